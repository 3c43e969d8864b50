/* model/bind.h — strict binding of checkpoint tensors to model fields, with conversion.
 *
 * bind_matrix looks a tensor up by name (with or without the "model." prefix), checks its shape
 * against what config.json implies, converts it as the load dtype asks (int4 group-128 when the
 * input dimension is a multiple of 128, else bf16; or bf16/f32 as stored) and uploads it.
 * bind_vector does the same for 1-D tensors, always widened to f32. Errors name the shard file
 * and the tensor, expected vs actual. */
#ifndef HEARTH_MODEL_BIND_H
#define HEARTH_MODEL_BIND_H
#include "model/model.h"

struct binder {
  struct hearth_model *m;
  const struct st_set *st;
  enum hearth_dtype dtype;
  uint64_t n_params;
};

const struct st_tensor *bind_lookup(const struct binder *b, const char *name);
int bind_matrix(struct binder *b, struct hb_tensor *dst, const char *name, int64_t rows, int64_t cols,
                struct hearth_err *err);
int bind_vector(struct binder *b, struct hb_tensor *dst, const char *name, int64_t n, struct hearth_err *err);
#endif
