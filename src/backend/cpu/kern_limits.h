/* backend/cpu/kern_limits.h — sizes shared by the backend and the attention kernels. */
#ifndef HEARTH_BACKEND_CPU_KERN_LIMITS_H
#define HEARTH_BACKEND_CPU_KERN_LIMITS_H
#define KERN_ATT_KB 16      /* keys per step */
#define KERN_ATT_OBUF 8192  /* floats of output accumulators per tile: query rows * head_dim */
#endif
