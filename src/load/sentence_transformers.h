/* load/sentence_transformers.h — the sentence-transformers layout beside a checkpoint:
 * modules.json lists the pipeline (Transformer -> Pooling -> Normalize); the Pooling module's
 * folder (usually 1_Pooling/) holds config.json with the pooling mode. A directory whose
 * modules.json names a Pooling module is an embedding model, whatever config.json's architecture
 * says (fine-tuned Qwen3 embedding checkpoints keep "Qwen3ForCausalLM"). */
#ifndef HEARTH_LOAD_SENTENCE_TRANSFORMERS_H
#define HEARTH_LOAD_SENTENCE_TRANSFORMERS_H
#include "base/err.h"
#include "hearth.h"

struct sentence_tf {
  int present;                /* modules.json exists and names a Pooling module */
  enum hearth_pooling pooling; /* the Pooling module's mode (HEARTH_POOL_LAST when !present) */
  int dim;                    /* its word_embedding_dimension; 0 when not given */
};

/* Reads DIR/modules.json and the Pooling module's config.json. No modules.json, or one without a
 * Pooling module, is not an error (out->present = 0). Returns HEARTH_ERR_UNSUPPORTED for a
 * pipeline hearth cannot reproduce (a Dense module, max / weighted pooling, several modes at once)
 * and HEARTH_ERR_FORMAT for malformed files, naming the file. */
int sentence_tf_load(const char *dir, struct sentence_tf *out, struct hearth_err *err);
#endif
