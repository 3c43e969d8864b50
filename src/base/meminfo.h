/* base/meminfo.h — how much host memory a new allocation can count on. */
#ifndef HEARTH_BASE_MEMINFO_H
#define HEARTH_BASE_MEMINFO_H
#include <stdint.h>

/* MemAvailable from /proc/meminfo (what the kernel can hand out without swapping), else the free
 * physical pages from sysconf; 0 when neither is known (callers then skip their check). Linux
 * overcommits, so malloc of more than this succeeds and the process dies later, in the OOM killer. */
uint64_t mem_available_bytes(void);
#endif
