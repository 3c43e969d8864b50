#!/bin/bash
# Issue 35 activation-format microbenchmark (one thread, min of reps, ABBA): the 8-bit and 16-bit kernels
# of 5d2e4e8 (both modes still there), the new AVX2 16-bit kernel of d246557 (symbol renamed) and an
# f16-activation AVX2 FMA kernel (f16k.c, never in the library). Run from a checkout of this commit:
#   bash bench/act_ab/build.sh && /tmp/act_ab/kab avx2 4864 896 64 80   # set rows cols tokens reps
set -e
D=/tmp/act_ab; rm -rf $D; mkdir -p $D/old $D/new/backend/cpu
git archive 5d2e4e8 src | tar -x -C $D/old
git show d246557:src/backend/cpu/ops_avx2.c > $D/ops_avx2_new.c
for f in cpu_kernels.h q4x16.h kern_impl.h kern_limits.h; do git show d246557:src/backend/cpu/$f > $D/new/backend/cpu/$f; done
F="-O3 -DNDEBUG -std=c11 -D_GNU_SOURCE"
gcc $F -I$D/new -I$D/old/src -Dcpu_kernels_avx2=cpu_kernels_avx2_new -c $D/ops_avx2_new.c -mavx2 -mfma -mf16c -mavxvnni -o $D/a2new.o
gcc $F -I$D/old/src -c $D/old/src/backend/cpu/ops_avx2.c -mavx2 -mfma -mf16c -mavxvnni -o $D/a2old.o
gcc $F -I$D/old/src -c $D/old/src/backend/cpu/ops_avx512.c -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx512bf16 -mfma -mf16c -mavx2 -o $D/a512.o
gcc $F -I$D/old/src -c bench/act_ab/f16k.c -mavx2 -mfma -mf16c -o $D/f16k.o
gcc $F -I$D/old/src bench/act_ab/kab.c $D/old/src/backend/cpu/q4x16.c $D/old/src/quant/q4.c $D/a512.o $D/a2old.o $D/a2new.o $D/f16k.o -lm -o $D/kab
