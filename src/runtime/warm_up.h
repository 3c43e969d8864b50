/* runtime/warm_up.h — the work of hearth_model_warm_up on any backend (the public call skips the CPU, where
 * nothing is loaded lazily; tests run it there to check that it leaves no trace). */
#ifndef HEARTH_RUNTIME_WARM_UP_H
#define HEARTH_RUNTIME_WARM_UP_H

#include "hearth.h"

int warm_up_run(struct hearth_model *m, struct hearth_err *err);

#endif
