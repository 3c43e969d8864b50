/* quant/q4.h — symmetric int4, group 128, fp16 scale: the quantize-at-load format.
 *
 * For each group of 128 consecutive weights along a row (the input dimension): m = the weight of
 * largest magnitude (first on ties, sign kept), d = fp16(m / -8), q = clamp(round_half_away(w / d),
 * -8, 7) (q = 0 when d = 0), w' = q * d. The reference layout (what backends repack from):
 *   qs  [rows][cols/2] bytes: byte j of a row = (q[2j] + 8) | (q[2j+1] + 8) << 4
 *   d   [rows][cols/128] fp16 bits
 * See quant/README.md for the picture. */
#ifndef HEARTH_QUANT_Q4_H
#define HEARTH_QUANT_Q4_H
#include <stdint.h>

#define Q4_GROUP 128

/* Quantizes one row of `cols` finite f32 weights (cols % 128 == 0) into qs[cols/2] and d[cols/128],
 * with the fastest kernel this CPU has (cpu_features; HEARTH_CPU=scalar picks the reference).
 * Every kernel writes the same bytes as q4_quantize_row_ref. Callers refuse NaN/Inf weights first
 * (model/bind.c): what a kernel does with them is unspecified. Thread-safe. */
void q4_quantize_row(const float *w, int64_t cols, uint8_t *qs, uint16_t *d);
/* The scalar reference: the format's definition in code. */
void q4_quantize_row_ref(const float *w, int64_t cols, uint8_t *qs, uint16_t *d);
/* The AVX2 kernel (q4_avx2.c); call only when cpu_features_get()->avx2. */
void q4_quantize_row_avx2(const float *w, int64_t cols, uint8_t *qs, uint16_t *d);
/* Writes the dequantized row w'[cols]. */
void q4_dequantize_row(const uint8_t *qs, const uint16_t *d, int64_t cols, float *out);
#endif
