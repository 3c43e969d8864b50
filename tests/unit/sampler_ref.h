/* tests/unit/sampler_ref.h — the pre-split sampler (sampler_ref.c), the oracle of test_sampler.c */
#ifndef HEARTH_TEST_SAMPLER_REF_H
#define HEARTH_TEST_SAMPLER_REF_H

#include <stdint.h>

#include "hearth.h"

struct ref_sampler;
int ref_sampler_new(const struct hearth_sampling *p, int n_vocab, struct ref_sampler **out, struct hearth_err *err);
void ref_sampler_free(struct ref_sampler *s);
int32_t ref_sampler_sample(struct ref_sampler *s, const float *logits, const int32_t *history, int n_history);
void ref_sampler_set_prompt(struct ref_sampler *s, const int32_t *prompt, int n_prompt);

#endif
