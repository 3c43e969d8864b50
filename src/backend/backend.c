/* backend/backend.c — which backends this build has. */
#include "backend/backend.h"

#include <stddef.h>

#ifdef HEARTH_HAVE_CUDA
#include <pthread.h>

#include "backend/cuda/cuda_backend.h"

/* The CUDA op table plus its fused ops, token selection and graphs, which cuda_backend.h exports
 * as functions; adapters give the graph handle the table's opaque type. */
static int cuda_capture_end(struct hb_ctx *c, void **g, struct hearth_err *err) {
  struct hb_cuda_graph *cg = NULL;
  int rc = hb_cuda_capture_end(c, &cg, err);
  *g = cg;
  return rc;
}
static int cuda_graph_launch(struct hb_ctx *c, void *g, struct hearth_err *err) { return hb_cuda_graph_launch(c, g, err); }
static void cuda_graph_free(void *g) { hb_cuda_graph_free(g); }

static struct hb_ops g_cuda_full;
static pthread_once_t g_cuda_once = PTHREAD_ONCE_INIT;
static void cuda_full_init(void) {
  g_cuda_full = hb_cuda_ops;
  g_cuda_full.norm_matmul = hb_cuda_norm_matmul;
  g_cuda_full.silu_matmul = hb_cuda_silu_matmul;
  g_cuda_full.rope_kv_write = hb_cuda_rope_kv_write;
  g_cuda_full.norm_qkv_rope_kv = hb_cuda_norm_qkv_rope_kv;
  g_cuda_full.norm_swiglu = hb_cuda_norm_swiglu;
  g_cuda_full.g4_qkv_post = hb_cuda_g4_qkv_post;
  g_cuda_full.g4_post_attention = hb_cuda_g4_post_attention;
  g_cuda_full.norm_add = hb_cuda_norm_add;
  g_cuda_full.gelu_matmul = hb_cuda_gelu_matmul;
  g_cuda_full.add_norm_matmul = hb_cuda_add_norm_matmul;
  g_cuda_full.batch_short_len = hb_cuda_batch_short_len;
  g_cuda_full.set_step_twins = hb_cuda_set_step_twins;
  g_cuda_full.argmax = hb_cuda_argmax;
  g_cuda_full.capture_begin = hb_cuda_capture_begin;
  g_cuda_full.capture_end = cuda_capture_end;
  g_cuda_full.graph_launch = cuda_graph_launch;
  g_cuda_full.graph_free = cuda_graph_free;
}
#endif

const struct hb_ops *hb_get(int kind, struct hearth_err *err) {
  if (kind == HEARTH_BACKEND_CPU) return &hb_cpu_ops;
  if (kind == HEARTH_BACKEND_CUDA) {
#ifdef HEARTH_HAVE_CUDA
    pthread_once(&g_cuda_once, cuda_full_init);
    return &g_cuda_full;
#else
    err_set(err, HEARTH_ERR_UNSUPPORTED, "this build of hearth has no CUDA backend (nvcc was not found at configure time)");
    return NULL;
#endif
  }
  err_set(err, HEARTH_ERR_ARG, "unknown backend %d", kind);
  return NULL;
}
