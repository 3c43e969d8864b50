/* backend/cpu/cpu_ops_gemma4.h — the CPU's Gemma 4 ops (backend.h, "Gemma 4" part): plain C, f32. */
#ifndef HEARTH_BACKEND_CPU_OPS_GEMMA4_H
#define HEARTH_BACKEND_CPU_OPS_GEMMA4_H
#include "backend/backend.h"

/* gelu_mul (backend.h) over rows [t0, t1); cpu_backend.c spreads the rows over its threads. fast: the kernel set's
 * gelu_mul (cpu_kernels.h), or NULL for the libm form (the exact path) */
void cpu_gelu_mul_rows(struct hb_tensor *out, const struct hb_tensor *gate, const struct hb_tensor *up, int up_col0,
                       int t0, int t1, void (*fast)(float *o, const float *g, const float *u, int64_t n));
void cpu_scale(struct hb_ctx *c, struct hb_tensor *x, float s, int n);
void cpu_softcap(struct hb_ctx *c, struct hb_tensor *x, float cap, int n);
/* The rotation loop shared with rope_neox (defined in cpu_backend.c): pairs (i, i + half), i < n_pairs,
 * of every head of x's first b->n_tokens rows, by pos · inv_freq[i]; tokens over c's thread pool. */
void cpu_rope_rotate(struct hb_ctx *c, struct hb_tensor *x, const struct hb_batch *b, int n_heads, int head_dim,
                     int half, int n_pairs, const float *inv_freq);
void cpu_rope_prop(struct hb_ctx *c, struct hb_tensor *x, const struct hb_batch *b, int n_heads, int head_dim,
                   int n_pairs, float theta, float factor);
#endif
