/* runtime/sampler.h — what the session layer (and the tests) need of a hearth_sampler beyond hearth.h: a
 * backend's sample op draws for it (backend.h, sample), so the uniform draw and the penalties that apply leave it
 * as data, and the RNG advances only once that draw was used. runtime/sampler.c stays the definition. */
#ifndef HEARTH_RUNTIME_SAMPLER_H
#define HEARTH_RUNTIME_SAMPLER_H

#include "backend/backend.h"
#include "hearth.h"

/* The next uniform draw in [0, 1) of s's RNG, without taking it. */
double sampler_peek_unit(const struct hearth_sampler *s);
/* Takes that draw (the backend's sample op decided with it). */
void sampler_skip_unit(struct hearth_sampler *s);
/* The sample op's request for s's next token: *row (u = sampler_peek_unit) and the row's penalty list in
 * pen[0 .. returned count) (pen0 left 0: the caller places it). Returns -2 when the backend cannot take it at all
 * (temperature 0: greedy with penalties) and -1 when the list holds more than cap entries; pen is then unspecified. */
int sampler_device_row(struct hearth_sampler *s, const int32_t *history, int n_history, struct hb_sample_row *row,
                       struct hb_sample_pen *pen, int cap);
/* hearth_sampler_sample with the draw u instead of the RNG's (which is left as it is): the host's answer to what
 * the sample op was asked (tests; the session layer's fallback takes the RNG's own draw, which is the same). */
int32_t sampler_sample_u(struct hearth_sampler *s, const float *logits, const int32_t *history, int n_history, double u);

#endif
