/* backend/cpu/kern_limits.h — sizes shared by the backend and the attention kernels. */
#ifndef HEARTH_BACKEND_CPU_KERN_LIMITS_H
#define HEARTH_BACKEND_CPU_KERN_LIMITS_H
#define KERN_ATT_KB 16      /* keys per step */
#define KERN_ATT_OBUF 8192  /* floats of output accumulators per tile: query rows * head_dim */
#define KERN_ATT_MAX_HD 512 /* widest head the tiles take (Gemma 4's full layers); wider: the scalar worker */
#endif
