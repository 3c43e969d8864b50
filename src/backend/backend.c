/* backend/backend.c — which backends this build has. */
#include "backend/backend.h"

#include <stddef.h>

#ifdef HEARTH_HAVE_CUDA
extern const struct hb_ops hb_cuda_ops;
#endif

const struct hb_ops *hb_get(int kind, struct hearth_err *err) {
  if (kind == HEARTH_BACKEND_CPU) return &hb_cpu_ops;
  if (kind == HEARTH_BACKEND_CUDA) {
#ifdef HEARTH_HAVE_CUDA
    return &hb_cuda_ops;
#else
    err_set(err, HEARTH_ERR_UNSUPPORTED, "this build of hearth has no CUDA backend (nvcc was not found at configure time)");
    return NULL;
#endif
  }
  err_set(err, HEARTH_ERR_ARG, "unknown backend %d", kind);
  return NULL;
}
