/* runtime/model_load.c — hearth_model open/close: config -> family -> backend -> bind/quantize ->
 * KV pool -> scratch, with the memory plan printed when asked. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/meminfo.h"
#include "base/threadpool.h"
#include "load/hub.h"
#include "load/sentence_transformers.h"
#include "model/model.h"
#include "runtime/kv_cache.h"
#include "runtime/kv_ring.h"
#include "runtime/prefix_store.h"

/* MAX_BATCH_TOKENS_CUDA: a GPU's prefill GEMM wants thousands of rows (label scoring of hundreds of short
 * prompts packs into a few large forwards); its scratch grows with it: 4096 x (3 hidden + 2 q + 2 kv + 2 ff)
 * x 4 bytes, 0.5 GiB for Qwen2.5-3B. The CPU keeps 512 (a forward there already saturates the cores).
 * MAX_BATCH_SEQS_CUDA: the sequences (= output rows) of one forward. 400 prompts of ~10 new tokens after a shared
 * prefix fill a 4096-token forward only with ~400 sequences: at 64 a step held ~600 tokens, where the GEMM runs at
 * a third of its large-M rate. The logits of 256 rows take 155 MB of device memory (Qwen, f32).
 * MAX_BATCH_TOKENS_CUDA_EMBED: an embedding model has no decode to keep responsive and its passes are whole
 * inputs; 16384 tokens a pass took W6 on the H200 from 333 to 368 records/s (bench/RESULTS.md, session 26), for
 * 0.5 GiB of scratch on Qwen3-Embedding-0.6B. */
enum { MAX_BATCH_TOKENS = 512, MAX_BATCH_TOKENS_CUDA = 4096, MAX_BATCH_TOKENS_CUDA_EMBED = 16384,
       MAX_BATCH_SEQS = 64, MAX_BATCH_SEQS_CUDA = MODEL_MAX_SEQS, KV_BLOCK = 16 };

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CPU seconds of the whole process so far (all threads): on a shared machine the wall clock stretches, this less */
static double cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void hearth_model_params_default(struct hearth_model_params *p) {
  memset(p, 0, sizeof *p);
  p->dtype = HEARTH_DTYPE_INT4;
  p->backend = HEARTH_BACKEND_CPU;
}

static int alloc_scratch(struct hearth_model *m, int T, int O, struct hearth_err *err) {
  struct model_scratch *s = &m->scratch;
  const struct hf_config *c = &m->cfg;
  /* the widest layer sets each buffer (Gemma 4's layers differ in head_dim, KV heads and MLP width) */
  int64_t qd = 0, kvd = 0, ff = 0;
  for (int l = 0; l < c->num_hidden_layers; l++) {
    const struct hf_layer *y = &c->layer[l];
    if ((int64_t)c->num_attention_heads * y->head_dim > qd) qd = (int64_t)c->num_attention_heads * y->head_dim;
    if ((int64_t)y->n_kv_heads * y->head_dim > kvd) kvd = (int64_t)y->n_kv_heads * y->head_dim;
    if (y->n_ff > ff) ff = y->n_ff;
  }
  s->max_tokens = T;
  s->max_out = O;
  int rc = 0;
  const struct hb_ops *be = m->be;
  struct hb_ctx *x = m->bctx;
  if (!rc) rc = be->alloc(x, &s->ids, HB_I32, T, 1, err);
  if (!rc) rc = be->alloc(x, &s->x, HB_F32, T, c->hidden_size, err);
  if (!rc) rc = be->alloc(x, &s->xn, HB_F32, T, c->hidden_size, err);
  if (!rc) rc = be->alloc(x, &s->q, HB_F32, T, qd, err);
  if (!rc) rc = be->alloc(x, &s->k, HB_F32, T, kvd, err);
  if (!rc) rc = be->alloc(x, &s->v, HB_F32, T, kvd, err);
  if (!rc) rc = be->alloc(x, &s->attn, HB_F32, T, qd, err);
  if (!rc) rc = be->alloc(x, &s->o, HB_F32, T, c->hidden_size, err);
  if (!rc) rc = be->alloc(x, &s->gate, HB_F32, T, ff, err);
  if (!rc) rc = be->alloc(x, &s->up, HB_F32, T, ff, err);
  int64_t ple = (int64_t)c->num_hidden_layers * c->g4.ple_dim;
  if (!rc && ple) rc = be->alloc(x, &s->ple, HB_F32, T, ple, err);
  if (!rc && ple) rc = be->alloc(x, &s->ple_tok, HB_F32, T, ple, err);
  if (!rc && c->family == HEARTH_FAMILY_GEMMA4 && be->add_norm_matmul)
    rc = be->alloc(x, &s->x2, HB_F32, T, c->hidden_size, err);
  if (!rc) rc = be->alloc(x, &s->sel, HB_F32, O, c->hidden_size, err);
  if (!rc && !c->is_embedding)
    rc = be->alloc_f32 ? be->alloc_f32(x, &s->logits, O, c->vocab_size, err)
                       : be->alloc(x, &s->logits, HB_F32, O, c->vocab_size, err);
  if (!rc) rc = be->alloc(x, &s->gsel, HB_I32, 2 * O, 1, err);
  if (!rc && be->row_score && !c->is_embedding) rc = be->alloc(x, &s->score_req, HB_I32, O, HB_SCORE_REQ, err);
  if (!rc && be->row_score && !c->is_embedding) rc = be->alloc(x, &s->score_out, HB_I32, O, HB_SCORE_OUT, err);
  if (rc) return err_prefix(err, "activation scratch");
  m->max_seqs = O;
  m->b_pos = malloc(T * sizeof(int32_t));
  m->b_seq = malloc(T * sizeof(int32_t));
  m->b_out = malloc(O * sizeof(int32_t));
  m->b_len = malloc(O * sizeof(int32_t));
  m->b_bt = malloc((size_t)O * (size_t)m->max_blocks_per_seq * sizeof(int32_t));
  if (m->kv.swa.n_blocks && !(m->b_bt_swa = malloc((size_t)O * (size_t)m->max_blocks_per_seq * sizeof(int32_t))))
    return err_set(err, HEARTH_ERR_NOMEM, "out of memory");
  m->b_ids = malloc(T * sizeof(int32_t));
  size_t outw = (size_t)(c->vocab_size > c->hidden_size ? c->vocab_size : c->hidden_size);
  m->b_outbuf = malloc((size_t)O * outw * sizeof(float));
  m->b_gid = malloc(O * sizeof(int32_t));
  m->b_glp = malloc(O * sizeof(float));
  m->b_gsel = malloc(2 * O * sizeof(int32_t));
  m->b_score_req = malloc((size_t)O * HB_SCORE_REQ * sizeof(int32_t));
  m->b_score_out = malloc((size_t)O * HB_SCORE_OUT * sizeof(int32_t));
  if (!m->b_score_req || !m->b_score_out || !m->b_gsel || !m->b_gid || !m->b_glp || !m->b_pos || !m->b_seq || !m->b_out || !m->b_len || !m->b_bt || !m->b_ids || !m->b_outbuf) return err_set(err, HEARTH_ERR_NOMEM, "out of memory");
  return 0;
}

/* The memory the KV pool and the activation scratch will take, before any of it is allocated, in
 * double (a hostile config must not overflow the sum). On the CPU backend this is host memory,
 * and Linux would hand out far more than exists (overcommit) only for the OOM killer to end the
 * process at first touch; so it is checked against MemAvailable. A device backend says what it
 * can still allocate (mem_available: cudaMemGetInfo's free bytes): cudaMalloc would refuse too,
 * but only after the weights were uploaded, and naming one tensor rather than the plan. */
/* Blocks of Gemma 4's sliding-window pool (runtime/kv_ring.h) for this load, 0 for none; *window gets the window. */
static int swa_plan(const struct hearth_model *m, const struct hearth_model_params *p, int kv_tokens, int *window) {
  const int pass = p->backend != HEARTH_BACKEND_CUDA ? MAX_BATCH_TOKENS
                   : m->cfg.is_embedding             ? MAX_BATCH_TOKENS_CUDA_EMBED
                                                     : MAX_BATCH_TOKENS_CUDA;
  *window = m->cfg.family == HEARTH_FAMILY_GEMMA4 && p->kv_seqs >= 0 ? m->cfg.g4.sliding_window : 0;
  for (int l = 0; *window > 0 && l < m->cfg.num_hidden_layers; l++)
    if (m->cfg.layer[l].sliding && m->cfg.layer[l].kv_source == l)
      return kv_swa_blocks((kv_tokens + KV_BLOCK - 1) / KV_BLOCK, KV_BLOCK, *window, p->kv_seqs, pass);
  return 0;
}

static int memory_plan_check(const struct hearth_model *m, const struct hearth_model_params *p, int kv_tokens,
                             const char *when, struct hearth_err *err) {
  uint64_t avail;
  const char *what;
  if (p->backend == HEARTH_BACKEND_CPU) {
    avail = mem_available_bytes();
    what = "memory available";
  } else if (m->be && m->be->mem_available) {
    avail = m->be->mem_available(m->bctx);
    what = "device memory free";
  } else {
    return 0;
  }
  const struct hf_config *c = &m->cfg;
  /* bytes per KV and activation element: f32, except on a device's fast path, which keeps them in f16
   * (cuda_alloc: HB_F32 becomes HB_F16 unless the context is exact) */
  int es = p->backend != HEARTH_BACKEND_CPU && !(p->exact || p->dtype != HEARTH_DTYPE_INT4) ? 2 : 4;
  double tokens = (double)((kv_tokens + KV_BLOCK - 1) / KV_BLOCK) * KV_BLOCK;
  double kvd = (double)c->num_key_value_heads * c->head_dim, qd = (double)c->num_attention_heads * c->head_dim;
  double kv = tokens * c->num_hidden_layers * 2 * kvd * es;
  if (c->family == HEARTH_FAMILY_GEMMA4) { /* each layer's own width; shared layers none; sliding ones their pool */
    int window, swa = swa_plan(m, p, kv_tokens, &window);
    kv = 0;
    for (int l = 0; l < c->num_hidden_layers; l++)
      if (c->layer[l].kv_source == l)
        kv += (c->layer[l].sliding && swa ? (double)swa * KV_BLOCK : tokens) * 2.0 * c->layer[l].n_kv_heads *
              c->layer[l].head_dim * es;
  }
  double wide = c->vocab_size > c->hidden_size ? c->vocab_size : c->hidden_size;
  const int cuda = p->backend == HEARTH_BACKEND_CUDA;
  double scratch = (double)(!cuda ? MAX_BATCH_TOKENS : c->is_embedding ? MAX_BATCH_TOKENS_CUDA_EMBED : MAX_BATCH_TOKENS_CUDA) *
                       (3.0 * c->hidden_size + 2 * qd + 2 * kvd + 2.0 * c->intermediate_size) * es +
                   (double)(cuda ? MAX_BATCH_SEQS_CUDA : MAX_BATCH_SEQS) * ((double)c->vocab_size + wide + c->hidden_size) * 4;
  if (!avail || kv + scratch <= 0.9 * (double)avail) return 0;
  return err_set(err, HEARTH_ERR_NOMEM,
                 "config.json: the KV pool (%d tokens x %d layers x 2 x %d KV heads x %d head_dim x %d bytes%s = %.2f GiB) "
                 "plus activation scratch (%.2f GiB) does not fit in the %.2f GiB of %s %s (%s); "
                 "lower --ctx / --parallel (kv_tokens), or check the config's dimensions",
                 (int)tokens, c->num_hidden_layers, c->num_key_value_heads, c->head_dim, es,
                 c->family == HEARTH_FAMILY_GEMMA4 ? ", each layer at its own width, sliding layers a window" : "",
                 kv / 1073741824.0,
                 scratch / 1073741824.0, (double)avail / 1073741824.0, what, when,
                 p->backend == HEARTH_BACKEND_CPU ? "MemAvailable" : m->be->name);
}

static void free_scratch(struct hearth_model *m) {
  struct model_scratch *s = &m->scratch;
  for (int i = 0; i < MODEL_MAX_GRAPHS; i++) {
    if (m->graphs[i].graph) m->be->graph_free(m->graphs[i].graph);
    if (m->graphs_greedy[i].graph) m->be->graph_free(m->graphs_greedy[i].graph);
    for (int t = 0; t < 2; t++)
      if (m->graphs_bshort[t][i].graph) m->be->graph_free(m->graphs_bshort[t][i].graph);
  }
  for (int i = 0; i < 2; i++)
    if (m->graphs_short[i].graph) m->be->graph_free(m->graphs_short[i].graph);
  struct hb_tensor *all[] = {&s->ids, &s->x, &s->xn, &s->q, &s->k, &s->v, &s->attn, &s->o, &s->gate, &s->up, &s->sel, &s->logits, &s->gsel, &s->ple, &s->ple_tok, &s->x2, &s->score_req, &s->score_out};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    if (all[i]->data) m->be->release(m->bctx, all[i]);
  free(m->b_pos); free(m->b_seq); free(m->b_out); free(m->b_len); free(m->b_bt); free(m->b_bt_swa);
  free(m->b_ids); free(m->b_outbuf); free(m->b_gid); free(m->b_glp); free(m->b_gsel); free(m->b_score_req); free(m->b_score_out);
  free(m->b_pen);
}

static void release_weights(struct hearth_model *m) {
  if (!m->bctx) return;
  if (m->w.layers) {
    for (int i = 0; i < m->cfg.num_hidden_layers; i++) {
      struct layer_weights *L = &m->w.layers[i];
      struct hb_tensor *all[] = LAYER_TENSORS(L);
      for (size_t j = 0; j < sizeof all / sizeof all[0]; j++)
        if (all[j]->data) m->be->release(m->bctx, all[j]);
    }
  }
  free(m->w.layers);
  if (!m->w.lm_head_tied && m->w.lm_head.data) m->be->release(m->bctx, &m->w.lm_head);
  if (m->w.tok_embd.data) m->be->release(m->bctx, &m->w.tok_embd);
  if (m->w.out_norm.data) m->be->release(m->bctx, &m->w.out_norm);
  struct hb_tensor *g4[] = {&m->w.ple_embd, &m->w.ple_model_proj, &m->w.ple_proj_norm, &m->w.ones[0], &m->w.ones[1]};
  for (size_t j = 0; j < sizeof g4 / sizeof g4[0]; j++)
    if (g4[j]->data) m->be->release(m->bctx, g4[j]);
}

int hearth_model_store_flush(struct hearth_model *m, int max_blocks) { return m ? prefix_store_flush(m, max_blocks) : 0; }

void hearth_model_free(struct hearth_model *m) {
  if (!m) return;
  if (m->bctx) {
    struct hearth_err e = {0};
    m->be->sync(m->bctx, &e); /* a decode step enqueued ahead may still run: nothing is freed under it */
    prefix_store_close(m);    /* noted blocks are saved while the pool and the backend still exist */
    free_scratch(m);
    kv_pool_free(m);
    release_weights(m);
    m->be->free(m->bctx);
  }
  pthread_mutex_destroy(&m->forward_mu);
  free(m->store_dir);
  free(m);
}

static uint64_t tensor_bytes(const struct hb_tensor *t) { return t->data ? t->bytes : 0; }

/* K and V bytes one token takes in the pool (f32), over the layers that store KV (not Gemma 4's shared ones);
 * `sliding` 1 / 0 counts only those layers, -1 all. */
static uint64_t kv_bytes_per_token_of(const struct hf_config *c, int sliding) {
  uint64_t n = 0;
  for (int l = 0; l < c->num_hidden_layers; l++) {
    const struct hf_layer *y = &c->layer[l];
    if (y->kv_source == l && (sliding < 0 || y->sliding == sliding)) n += 2ull * (uint64_t)y->n_kv_heads * (uint64_t)y->head_dim * 4;
  }
  return n;
}
static uint64_t kv_bytes_per_token(const struct hf_config *c) { return kv_bytes_per_token_of(c, -1); }

static void fill_info(struct hearth_model *m, const struct hearth_model_params *p) {
  struct hearth_model_info *i = &m->info;
  const struct hf_config *c = &m->cfg;
  i->family = c->family;
  i->family_name = m->fam->name;
  i->arch = c->arch;
  i->is_embedding = c->is_embedding;
  i->n_vocab = c->vocab_size;
  i->n_embd = c->hidden_size;
  i->n_layer = c->num_hidden_layers;
  i->n_head = c->num_attention_heads;
  i->n_head_kv = c->num_key_value_heads;
  i->head_dim = c->head_dim;
  i->n_ff = c->intermediate_size;
  i->n_ctx_train = c->max_position_embeddings;
  i->max_seqs = m->max_seqs;
  i->max_batch_tokens = m->scratch.max_tokens;
  /* a backend without set_row_invariant computes every row alike in any batch (backend.h): a verify forward of
   * k + 1 tokens then gives the bits of k + 1 one-token steps (decisions.md, prompt-lookup speculation). Not with
   * a sliding-window pool (runtime/kv_ring.h): a verify pass maps and may release sliding blocks for draft
   * positions that the cut back to the accepted tokens would still need */
  i->can_speculate = !m->be->set_row_invariant && !c->is_embedding && m->kv.swa.n_blocks == 0;
  /* a backend whose batches are not row-invariant (CUDA) speculates where it can compute a verify's rows as the
   * one-token steps they stand for (set_step_twins: one sequence at a time, not in the exact mode), for the Qwen
   * families, whose every decode op has such a form (Gemma 4's fused ops have none) */
  if (m->be->set_row_invariant && m->be->set_step_twins && !c->is_embedding && m->kv.swa.n_blocks == 0 &&
      (c->family == HEARTH_FAMILY_QWEN2 || c->family == HEARTH_FAMILY_QWEN3) && !m->be->set_step_twins(m->bctx, 1))
    i->can_speculate = m->be->set_step_twins(m->bctx, 0) == 0;
  i->bos_id = c->bos_token_id;
  i->n_eos = c->n_eos;
  memcpy(i->eos_ids, c->eos_token_ids, sizeof i->eos_ids);
  i->dtype = p->dtype;
  i->backend = p->backend;
  i->kernels = m->be->kernels ? m->be->kernels(m->bctx) : m->be->name;
  uint64_t layers = 0;
  for (int l = 0; l < c->num_hidden_layers; l++) {
    const struct layer_weights *L = &m->w.layers[l];
    const struct hb_tensor *all[] = LAYER_TENSORS(L);
    for (size_t j = 0; j < sizeof all / sizeof all[0]; j++) layers += tensor_bytes(all[j]);
  }
  uint64_t emb = tensor_bytes(&m->w.tok_embd), head = m->w.lm_head_tied ? 0 : tensor_bytes(&m->w.lm_head);
  /* Gemma 4 PLE: the table is gathered (one row per token), the model projection streamed */
  uint64_t ple = tensor_bytes(&m->w.ple_embd), ple_proj = tensor_bytes(&m->w.ple_model_proj) + tensor_bytes(&m->w.ple_proj_norm);
  uint64_t ple_row = m->w.ple_embd.rows ? ple / (uint64_t)m->w.ple_embd.rows : 0;
  i->weight_bytes = layers + emb + head + tensor_bytes(&m->w.out_norm) + ple + ple_proj;
  /* A decode step reads every layer, the head (the tied table once) and one embedding row. */
  uint64_t row = m->w.tok_embd.rows ? emb / (uint64_t)m->w.tok_embd.rows : 0;
  i->weight_bytes_per_token = layers + tensor_bytes(&m->w.out_norm) + ple_row + ple_proj +
                              (c->is_embedding ? row : (m->w.lm_head_tied ? emb : head + row));
  i->kv_block_tokens = m->kv.block_size;
  i->kv_blocks = m->kv.n_blocks;
  i->kv_bytes = 0; /* as allocated: a sliding layer's rows are the sliding pool's (runtime/kv_ring.h) */
  for (int l = 0; m->kv.layers && l < c->num_hidden_layers; l++)
    i->kv_bytes += tensor_bytes(&m->kv.layers[l].k) + tensor_bytes(&m->kv.layers[l].v);
}

/* Gemma 4's memory plan: weights by kind, and KV per token by layer type (shared layers store none). */
static void memory_plan_gemma4(const struct hearth_model *m) {
  const struct hf_config *c = &m->cfg;
  int n_sl = 0, n_full = 0, n_shared = 0;
  for (int l = 0; l < c->num_hidden_layers; l++) {
    if (c->layer[l].kv_source != l) n_shared++;
    else if (c->layer[l].sliding) n_sl++;
    else n_full++;
  }
  uint64_t ple = tensor_bytes(&m->w.ple_embd) + tensor_bytes(&m->w.ple_model_proj);
  fprintf(stderr, "hearth: memory plan: weights %.1f MiB on %s (embedding/head %.1f MiB, PLE %.1f MiB, layers %.1f MiB)\n",
          (double)m->info.weight_bytes / 1048576.0, m->be->name, (double)tensor_bytes(&m->w.tok_embd) / 1048576.0,
          (double)ple / 1048576.0,
          (double)(m->info.weight_bytes - tensor_bytes(&m->w.tok_embd) - ple) / 1048576.0);
  fprintf(stderr, "hearth: memory plan: KV per token: %d sliding layers %llu B (window %d), %d full layers %llu B, "
                  "%d KV-shared layers 0 B; total %llu B/token\n",
          n_sl, (unsigned long long)kv_bytes_per_token_of(c, 1), c->g4.sliding_window, n_full,
          (unsigned long long)kv_bytes_per_token_of(c, 0), n_shared, (unsigned long long)kv_bytes_per_token(c));
  const struct kv_pool *p = &m->kv;
  if (p->swa.n_blocks)
    fprintf(stderr, "hearth: memory plan: KV pools: full layers %d tokens, sliding layers %d tokens (a session holds at most "
                    "about window + %d of them), %.1f MiB in all as allocated\n",
            p->n_blocks * p->block_size, p->swa.n_blocks * p->block_size, 2 * p->block_size,
            (double)m->info.kv_bytes / 1048576.0);
}

int hearth_model_load(const struct hearth_model_params *p, struct hearth_model **out, struct hearth_err *err) {
  *out = NULL;
  if (!p || !p->path) return err_set(err, HEARTH_ERR_ARG, "model path is required");
  const double t_start = now_s();
  struct hearth_model *m = calloc(1, sizeof *m);
  if (!m) return err_set(err, HEARTH_ERR_NOMEM, "out of memory");
  pthread_mutex_init(&m->forward_mu, NULL);
  m->ahead.need = 2;
  char dir[4096];
  int rc = hub_resolve(p->path, dir, sizeof dir, err);
  if (rc) goto fail;
  rc = hf_config_load(dir, &m->cfg, err);
  if (rc) goto fail;
  /* An embedding model by the caller's word (serve --embedding-model) or by a sentence-transformers
   * pipeline: decided before binding, so that no LM head is bound. Otherwise the family's bind tells
   * from the tensors (no head, bare names: Qwen3-Embedding as published). */
  struct sentence_tf stf;
  if ((rc = sentence_tf_load(dir, &stf, err))) goto fail;
  if (stf.present && stf.dim && stf.dim != m->cfg.hidden_size) {
    rc = err_set(err, HEARTH_ERR_FORMAT, "sentence-transformers Pooling: word_embedding_dimension %d differs from hidden_size %d",
                 stf.dim, m->cfg.hidden_size);
    goto fail;
  }
  if (p->embedding || stf.present) m->cfg.is_embedding = 1;
  m->info.pooling = stf.pooling;
  switch (m->cfg.family) {
  case HEARTH_FAMILY_QWEN2: m->fam = &family_qwen2; break;
  case HEARTH_FAMILY_QWEN3: m->fam = &family_qwen3; break;
  case HEARTH_FAMILY_GEMMA4: m->fam = &family_gemma4; break;
  default: rc = err_set(err, HEARTH_ERR_UNSUPPORTED, "config.json: family %s is not implemented yet", hf_family_name(m->cfg.family)); goto fail;
  }
  int kv_tokens = p->kv_tokens > 0 ? p->kv_tokens : 8192;
  if (kv_tokens > m->cfg.max_position_embeddings * 8) kv_tokens = m->cfg.max_position_embeddings * 8;
  /* fail fast, before any weight is read; checked again once the weights hold their memory */
  if ((rc = memory_plan_check(m, p, kv_tokens, "before loading", err))) goto fail;
  m->be = hb_get(p->backend, err);
  if (!m->be) { rc = err->code; goto fail; }
  struct hb_config bc = {.n_threads = p->n_threads, .device = 0, .exact = p->exact || p->dtype != HEARTH_DTYPE_INT4};
  if ((rc = m->be->init(&bc, &m->bctx, err))) goto fail;
  /* a device backend's free memory is known once it is up, still before any weight is read */
  if (p->backend != HEARTH_BACKEND_CPU && (rc = memory_plan_check(m, p, kv_tokens, "before loading", err))) goto fail;
  m->w.layers = calloc((size_t)m->cfg.num_hidden_layers, sizeof *m->w.layers);
  if (!m->w.layers) { rc = err_set(err, HEARTH_ERR_NOMEM, "out of memory"); goto fail; }
  struct st_set *st = NULL;
  if ((rc = st_open_dir(dir, &st, err))) goto fail;
  /* converting and quantizing every weight is most of a load's CPU time: all cores do it (bind.c) */
  m->load_pool = threadpool_create(p->n_threads);
  double t_bind = now_s();
  rc = m->fam->bind(m, st, p->dtype, err);
  double t_bound = now_s();
  threadpool_free(m->load_pool);
  m->load_pool = NULL;
  free(m->load_buf);
  m->load_buf = NULL;
  m->load_buf_bytes = 0;
  m->fingerprint = prefix_store_fingerprint(dir, st, p->dtype, m->be->name, KV_BLOCK);
  st_close(st);
  if (rc) goto fail;
  if ((rc = memory_plan_check(m, p, kv_tokens, "after loading the weights", err))) goto fail;
  const int max_tokens = p->backend != HEARTH_BACKEND_CUDA ? MAX_BATCH_TOKENS
                   : m->cfg.is_embedding              ? MAX_BATCH_TOKENS_CUDA_EMBED
                                                      : MAX_BATCH_TOKENS_CUDA;
  /* Gemma 4's sliding layers keep a window of KV per session in a pool of their own (runtime/kv_ring.h) */
  int window, swa_blocks = swa_plan(m, p, kv_tokens, &window);
  if ((rc = kv_pool_init(m, kv_tokens, KV_BLOCK, swa_blocks, window, err))) goto fail;
  int per_seq = kv_tokens < m->cfg.max_position_embeddings ? kv_tokens : m->cfg.max_position_embeddings;
  m->max_blocks_per_seq = (per_seq + KV_BLOCK - 1) / KV_BLOCK;
  if ((rc = alloc_scratch(m, max_tokens, p->backend == HEARTH_BACKEND_CUDA ? MAX_BATCH_SEQS_CUDA : MAX_BATCH_SEQS, err)))
    goto fail;
  if (p->kv_cache_dir && (rc = prefix_store_open(m, p->kv_cache_dir, err))) goto fail;
  fill_info(m, p);
  if (p->verbose) {
    const struct hearth_model_info *i = &m->info;
    fprintf(stderr, "hearth: %s (%s) %d layers, d=%d, heads %d/%d x %d, ff %d, vocab %d%s\n", i->arch,
            i->family_name, i->n_layer, i->n_embd, i->n_head, i->n_head_kv, i->head_dim, i->n_ff, i->n_vocab,
            i->is_embedding ? ", embedding" : "");
    fprintf(stderr, "hearth: %.1fM params, weights %.1f MiB (%.2f bits/param, %s) on %s, KV pool %d tokens = %.1f MiB\n",
            (double)i->n_params / 1e6, (double)i->weight_bytes / 1048576.0,
            i->n_params ? 8.0 * (double)i->weight_bytes / (double)i->n_params : 0.0,
            p->dtype == HEARTH_DTYPE_INT4 ? "int4" : p->dtype == HEARTH_DTYPE_BF16 ? "bf16" : "f32", m->be->name,
            m->kv.n_blocks * m->kv.block_size, (double)i->kv_bytes / 1048576.0);
    if (m->cfg.family == HEARTH_FAMILY_GEMMA4) memory_plan_gemma4(m);
    fprintf(stderr, "hearth: load %.2f s (process CPU %.2f s): config and headers %.2f, weights read/converted/uploaded %.2f, "
                    "KV pool and scratch %.2f\n",
            now_s() - t_start, cpu_s(), t_bind - t_start, t_bound - t_bind, now_s() - t_bound);
  }
  *out = m;
  return 0;
fail:
  hearth_model_free(m);
  return rc;
}

const struct hearth_model_info *hearth_model_info(const struct hearth_model *m) { return &m->info; }
