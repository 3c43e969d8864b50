/* base/cpu_features.c — cpuid probing for the run-time kernel choice. */
#include "base/cpu_features.h"

#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

/* AMX's tile data is an XSAVE state Linux hands out on request only (since 5.16): without the grant the
 * first tile instruction raises SIGILL. The grant is for the whole process and cannot be taken back. */
static int amx_granted(void) {
#if defined(__linux__) && defined(__x86_64__)
  const long arch_req_xcomp_perm = 0x1023, xfeature_xtiledata = 18;
  return syscall(SYS_arch_prctl, arch_req_xcomp_perm, xfeature_xtiledata) == 0;
#else
  return 0;
#endif
}

static struct cpu_features g_features;
static int g_done;

static void probe(struct cpu_features *f) {
  memset(f, 0, sizeof *f);
#if defined(__x86_64__) || defined(__i386__)
  unsigned a, b, c, d;
  if (__get_cpuid(0, &a, &b, &c, &d)) {
    char v[13];
    memcpy(v, &b, 4), memcpy(v + 4, &d, 4), memcpy(v + 8, &c, 4), v[12] = 0;
    f->amd = !strcmp(v, "AuthenticAMD") || !strcmp(v, "HygonGenuine");
  }
  if (!__get_cpuid(1, &a, &b, &c, &d)) return;
  int osxsave = (c >> 27) & 1;
  f->fma = (c >> 12) & 1;
  f->f16c = (c >> 29) & 1;
  if (!osxsave) return;
  unsigned xlo, xhi;
  __asm__ volatile("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
  int ymm_ok = (xlo & 0x6) == 0x6, zmm_ok = (xlo & 0xe6) == 0xe6;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return;
  f->avx2 = ymm_ok && ((b >> 5) & 1);
  if (zmm_ok) {
    f->avx512f = (b >> 16) & 1;
    f->avx512dq = (b >> 17) & 1;
    f->avx512bw = (b >> 30) & 1;
    f->avx512vl = (b >> 31) & 1;
    f->avx512vnni = (c >> 11) & 1;
  }
  int amx_cpu = ((d >> 24) & 1) && ((d >> 25) & 1); /* AMX-TILE, AMX-INT8 */
  int amx_os = (xlo & 0x60000) == 0x60000;         /* XCR0: XTILECFG, XTILEDATA */
  f->amx = zmm_ok && amx_cpu && amx_os && amx_granted();
  unsigned a1, b1, c1, d1;
  if (__get_cpuid_count(7, 1, &a1, &b1, &c1, &d1)) {
    f->avxvnni = ymm_ok && ((a1 >> 4) & 1);
    f->avx512bf16 = zmm_ok && ((a1 >> 5) & 1);
  }
#endif
  cpu_features_cap(f, getenv("HEARTH_CPU")); /* a documented option (README "Environment", hearth --help) */
}

void cpu_features_cap(struct cpu_features *f, const char *cap) {
  if (cap && !strcmp(cap, "scalar")) memset(f, 0, sizeof *f);
  if (cap && (!strcmp(cap, "avx2") || !strcmp(cap, "avx2-vnni"))) {
    f->avx512f = f->avx512bw = f->avx512vl = f->avx512dq = f->avx512vnni = f->avx512bf16 = 0;
    f->amx = 0;
    if (!strcmp(cap, "avx2")) f->avxvnni = 0; /* what an AVX2-only CPU (Zen 3, Haswell) has */
  }
  if (cap && !strcmp(cap, "avx512")) f->amx = 0;
}

const struct cpu_features *cpu_features_get(void) {
  if (!__atomic_load_n(&g_done, __ATOMIC_ACQUIRE)) {
    struct cpu_features f;
    probe(&f);
    g_features = f; /* idempotent: racing threads write the same value */
    __atomic_store_n(&g_done, 1, __ATOMIC_RELEASE);
  }
  return &g_features;
}
