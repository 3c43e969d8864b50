/* base/meminfo.c — MemAvailable, read once per call (a model load, not a hot path). */
#include "base/meminfo.h"

#include <stdio.h>
#include <unistd.h>

uint64_t mem_available_bytes(void) {
  FILE *f = fopen("/proc/meminfo", "r");
  if (f) {
    char line[256];
    unsigned long long kb;
    while (fgets(line, sizeof line, f))
      if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
        fclose(f);
        return (uint64_t)kb * 1024;
      }
    fclose(f);
  }
  long pages = sysconf(_SC_AVPHYS_PAGES), size = sysconf(_SC_PAGESIZE);
  return pages > 0 && size > 0 ? (uint64_t)pages * (uint64_t)size : 0;
}
