/* bench/cpu_matmul_bench.c — the CPU int4 matmul kernels alone: matmul_q4q8 of the AVX-512 VNNI set against the AMX set
 * on random int4 weights of one shape, one thread, each timed over >= 1 s, two rounds interleaved (the GMAC/s of
 * bench/RESULTS.md "Session 28"; useful MACs = rows x cols x tokens). Needs a CPU with AVX-512 VNNI; the AMX row
 * runs only where the CPU has AMX. Build against a Release build of the library:
 *   gcc -O2 -Isrc -Iinclude bench/cpu_matmul_bench.c build/libhearth.a -lm -lpthread -o /tmp/mmb
 *   /tmp/mmb 9728 896 512      # rows cols tokens: the 0.5B's gate/up at 512 tokens
 *   /tmp/mmb 4864 896 512 avx2 # the AVX2 set against AVX-512 VNNI instead (session 29's row)
 *   /tmp/mmb 4864 896 512 avx2-vnni # the AVX2 code on AVX-VNNI against plain AVX2 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/q4x16.h"
#include "base/cpu_features.h"
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc, char **argv) {
  if (argc < 4) { fprintf(stderr, "usage: %s ROWS COLS TOKENS [avx2|avx2-vnni]\n", argv[0]); return 2; }
  int64_t rows=atoi(argv[1]), cols=atoi(argv[2]); int n=atoi(argv[3]);
  const struct cpu_features *cf = cpu_features_get();
  struct cpu_q4 w={rows,cols,malloc(rows*cols/2),malloc(rows*cols/128*2),NULL};
  for(int64_t i=0;i<rows*cols/2;i++) w.qs[i]=rand();
  for(int64_t i=0;i<rows*cols/128;i++) w.d[i]=0x2000+(rand()&0xff);
  q4x16_repack(&w);
  float *x=malloc(4*n*cols),*o=malloc(4*n*rows); for(int64_t i=0;i<n*cols;i++) x[i]=rand()/(float)RAND_MAX-0.5f;
  int64_t G=cols/128; struct cpu_q8 a={.q=malloc(n*cols),.lo=malloc(n*cols),.s=malloc(4*n*G),.c=malloc(4*n*G),.cols=cols,
    .v16=malloc(2*n*cols),.tiles=malloc(q8_tiles_bytes(n,G))}; /* v16 and the AMX tile copy: every set finds what it reads */
  q4x16_q8_quantize_generic(x,cols,0,n,&a); /* the same bits as every set's, on any CPU */
  const int avx2 = argc > 4 && !strcmp(argv[4], "avx2"), vnni = argc > 4 && !strcmp(argv[4], "avx2-vnni");
  const struct cpu_kernels *ks[2]={avx2 ? &cpu_kernels_avx2 : vnni ? &cpu_kernels_avxvnni : &cpu_kernels_avx512,
                                   avx2 ? &cpu_kernels_avx512 : vnni ? &cpu_kernels_avx2 : &cpu_kernels_amx};
  /* the AMX row only where the CPU has AMX (it dies with SIGILL elsewhere, e.g. on Zen 5): then one row */
  const int nk = ks[1] == &cpu_kernels_amx && !cf->amx ? 1 : 2;
  if (nk == 1) printf("(no AMX on this CPU: the %s row only)\n", ks[0]->name);
  for(int rep=0;rep<2;rep++) for(int k=0;k<nk;k++){
    double t0=now(); int it=0; do { ks[k]->matmul_q4q8(&w,&a,n,0,rows,o,rows); it++; } while(now()-t0<1.0);
    double dt=(now()-t0)/it; printf("%-12s %lldx%lld n %d: %.3f ms, %.1f GMAC/s (useful)\n",ks[k]->name,(long long)rows,(long long)cols,n,dt*1e3,rows*cols*(double)n/dt*1e-9);
  }
}
