/* backend/cuda/gemv_q4.cu — the decode GEMV: y = f(x) · Wᵀ (+ b) (+ y) for n <= 8 rows of f16
 * activations and int4 group-128 weights (layout: matmul_q4.cu), with the fused prologues of
 * hb_cuda_norm_matmul / hb_cuda_silu_matmul (rmsnorm, silu·up) and up to three weights sharing x.
 *
 * On tensor cores (mma.sync m16n8k16, f16 × f16 → f32): the weights are the A operand (16 rows per
 * warp tile), the n <= 8 activation rows the B operand (8 columns, n used), so one mma does 256
 * weights × n tokens and batches of 2..8 rows cost the same instructions as 1. Products are exact
 * (int4 × f16) and sums f32; the group scale is applied in f32 to each group's partial sum, so the
 * rounding beyond the reference's f32 is x itself in f16 (the GPU's activation format) and, with
 * the offset fold, the cancellation of the folded offset: each group's f32 sum carries ~1032 Σx before the
 * correction takes it out (a review's simulation: ~1e-5 relative per group, 6-40 % of what f16 x
 * costs; without it the 3B decoded 3-6 % slower in round 12 — bench/NOTES.md).
 *
 * Why the weights need no reshuffle: mma only needs A's and B's k orders to agree, and k may be
 * permuted freely. Lane (gid, tig) of a warp loads the whole 16-byte run R = 4g + tig of group g
 * of rows gid and gid + 8 (so the 4 lanes of a quad cover the group's 128 columns); word q of that
 * run holds weight pairs (2q + 8j, 2q + 8j + 1), j = 0..3 (matmul_q4.cu's picture), which become
 * the A fragment's k-slots {2tig, 2tig+1} (j even) and {2tig+8, 2tig+9} (j odd) of mma (q, j/2).
 * The B fragment of lane (gid = token, tig) then holds x[token][32R + 2q + 16h + {0,1, 8,9}],
 * i.e. words q + 8h and q + 8h + 4 of the same run of x: no shuffles on either side.
 *
 * Work: a unit is NW/KS tiles of 16 rows; the block's NW warps split each tile's groups KS ways
 * (8 or 16 for the small QKV/o/down matrices so that one wave holds the whole matrix in flight) and
 * the KS partial sums of a tile meet in shared memory at the unit's end. KS = 1 (matrices of at least
 * 4 tiles per SM: gate/up, the LM head) has no block-wide step at all: each warp walks whole tiles
 * (tile = block + grid * warp, ...) and writes its outputs from registers.
 * The weights stream through a per-warp ring of RING steps in shared memory, filled by cp.async
 * (no registers hold data in flight), the first RING steps issued before griddepcontrol.wait
 * (weights do not depend on the previous kernel), like the norm weights and the rope positions.
 *
 * What the measurements say (bench/NOTES.md): in round 6, occupancy (2-4 blocks per SM), the
 * offset fold and whole-tile warps each moved these kernels by less than 5 %. Round 7
 * found the big ones bound by their own instruction stream (with no weight bytes read the LM head
 * kept 73 % of its time): one lop3 per weight pair and select-free ring copies took a 1 KB step from
 * ~200 SASS instructions to ~163 and the LM head from 2.5 to 2.8 TB/s; a 4-step ring (the default)
 * beat 8 end to end by leaving shared memory for the next kernel's blocks. A plain read in this
 * fragment order reaches 3.4 TB/s (bench/probe_read.cu). Round 9: two groups per ring step (the
 * per-step scaffolding over 2 KB) took the LM head to 3.3 TB/s and the 3B decode +9 %; weights
 * through registers instead of the ring lost 10-20 %, so the shared-memory pipe is not the limit. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <type_traits>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/gemv_x.cuh"
#include "backend/cuda/ptx.cuh"

/* the weight stream: each warp keeps a ring of RING (2; 4 in the co-resident gate/up shape) steps in shared
 * memory, filled by cp.async (no registers hold data in flight), one slot per step of GEMV_GPS = 2 groups (the step's scaffolding
 * shared over 2 KB, round 9): per group h, the 512 bytes of the tile's lo 8-row block, then the hi block's (the
 * device layout's group chunks as they are: lane (gid, tig) finds its 16-byte run of row gid at 16 lane); then
 * the scales, 16 bytes (8 rows) each for lo h0, lo h1, hi h0, hi h1 */
#define GEMV_GPS 2
#define GEMV_SLOT (2 * 1024 + 64)
/* ring steps per warp and unit: G groups of 128 columns, GEMV_GPS per step, split KS ways (padded so
 * that every warp of a unit takes the same number); the kernel and the launch shape share it */
__host__ __device__ inline int gemv_steps(int G, int ks) { return ((G + GEMV_GPS - 1) / GEMV_GPS + ks - 1) / ks; }
#define GEMV_MINB 2   /* resident 8-warp blocks per SM the registers are budgeted for */
#define GEMV_MINB16 1 /* the same for 16-warp blocks */
/* A matrix whose x (n rows × K f16, all of it in every block's shared memory) passes GEMV_XMAX bytes at 3 rows or more
 * goes to the tensor-core GEMM (the wgmma kernel from 3 rows: GEMM_WG_MIN_ROWS), as 9 rows and more do. Why (bench/RESULTS.md, session 39, H100): the 3B's down
 * projection holds 132-176 KB of x at 6-8 rows, so one GEMV block fits an SM with a 2-step ring, and its x8 step (2.98
 * ms) was slower than its x16 step (2.33). At 48 KB: 3B x6 +11 %, x8 +17 %; 0.5B x6 +6 %, x8 +12 %; x1-x4 unchanged.
 * Below 3 rows the GEMV stays: at 2 rows the GEMM took the 3B's down projection 15 % slower (16 KB setting). */
#define GEMV_XMAX (48 * 1024)
#define GEMV_XMAX_ROWS 3
/* the co-resident gate/up shape (gemv_cores_launch): one block per SM of this many whole-tile warps,
 * so that o_proj's 8-warp block before it fits beside it: 11 + 8 warps x 104 registers = 63,232 of the SM's 65,536 */
#define GEMV_CORES_NW 11
/* What used to be compile-time A/B switches here is now the one path each measured best (docs/decisions.md,
 * "One path per op"; the switches and their losing branches are in the history at ac09af2):
 * - the rmsnorm prologue adds each warp's f32 sum of squares into an f64 shared slot (round 23: the warps' atomics
 *   arrive in timing order; in f32 that order changed the last bits of 1 / rms from run to run, while the f64 sum of
 *   a few f32 values of like size is exact, so any order gives the same bits);
 * - the norm weights' cp.async carries no L2 hint (round 24: +0.6 % 3B, +1.6 % 0.5B without it), the QKV bias loads
 *   are evict_last;
 * - one-token launches run instances built for n = 1 (round 25: the token index of a lane, the sum-of-squares slots,
 *   the emit's token loop and the prologue's chunk divisions fold away), and the rope pairing's divisions by head_dim
 *   are shifts and masks when head_dim is a power of two (a.hds);
 * - the -8 weight offset is folded into a per-group correction (see gemv_smem) that enters as the second mma chain's
 *   starting value (read as one float4 per lane, stored negated and twice: [G][tig][token 2 tig, 2 tig + 1, 2 tig,
 *   2 tig + 1]).
 * The measurement switch GEMV_ABLATE (the kernel with its weight bytes, x prologue, epilogue, conversion, x reads or
 * mma taken out: bench/NOTES.md rounds 6 and 15) went with them. */
typedef double gemv_ss_t;
#define GEMV_CPG 16 /* correction floats per group */

/* up to three weights sharing one x, concatenated in row space (each but the last a multiple of
 * 16 rows, so a tile never straddles two); add: out += instead of out = */
struct gemv_args {
  const __half *x, *x2;
  int64_t ldx, ldx2; /* row strides of x and x2 (PRO_GELU: x2 is a column slice of the wider per-layer inputs) */
  const void *nw;
  int nwdt;
  float eps, off;
  int n, n_mm, K, rows_total, add, n_units;
  int act; /* GEMV_GLU: the gate's activation, HB_ACT_SILU or HB_ACT_GELU_TANH (Gemma 4) */
  /* PRO_ANORM / PRO_APLAIN (gemv_add_pass): x' = (x + rmsnorm(y) · aw) · sadd, written to xout by block 0 */
  const __half *y;
  __half *xout;
  int64_t ldy;
  const void *aw;
  int awdt;
  float sadd;
  int row0[4];
  const uint8_t *wq[3];
  const __half *ws[3];
  const float *bias[3];
  void *out[3];
  int64_t ldo[3];
  /* GEMV_ROPE (norm+QKV only): weights 0/1 are q/k with rope_neox over head_dim hd, weight 2 is v;
   * q goes to out[0], k and v to the paged f16 cache at each token's slot */
  int ring; /* steps in flight per warp (shared-memory slots): the host's choice, which picks the RING instance */
  int hd, max_blocks, bs;
  int hds; /* GEMV_ROPE: log2(hd) when hd is a power of two, else -1 (gemv_row_lo, gemv_hd_pos) */
  const int32_t *pos, *seq, *bt;
  __half *kc, *vc;
  float rinv[128]; /* GEMV_ROPE: 1 / theta^(2i/hd) for i < hd/2 (hd <= 256), rope_pow's formula on the host */
#if HEARTH_TRACE
  unsigned long long *tr;
  int tr_id;
#endif
};

/* x in shared memory: gemv_x.cuh (gemv_swz, gemv_put_chunk) */
/* f16 x rows, then (rmsnorm prologue) the norm weights as f32, then the per-group
 * corrections [K/128][GEMV_CPG] as f32, then the warps' weight rings */
__host__ __device__ inline size_t gemv_smem(int n, int64_t K, int pro) {
  return (size_t)n * (size_t)K * 2 + (pro == PRO_NORM || pro == PRO_ANORM ? (size_t)K * 4 : 0) +
         (size_t)(K / 128) * GEMV_CPG * 4;
}

/* the offset fold: the A fragments keep the weights' +8 offset and the 1024.0 of the f16 trick (one lop3
 * per weight pair, q4_word_raw): even pairs are 1024 + u, odd pairs 1024 + 16 u, u = q + 8. x of the
 * odd pairs (elements 8-15 of every 16, i.e. every odd 8-element chunk) is stored / 16, so an odd
 * product is 64 x + u x, and q x = product - (1032 x | 72 x). Per group and token the subtrahend
 * 1032 * sum(x even) + 72 * sum(x odd) is computed once in the prologue (from the stored f16 values,
 * so it matches what the tensor core multiplies); every product stays exact in f32. */

#define GEMV_KMAX 32768 /* x of 8 tokens in shared memory */

/* what a tile's rows are and what the epilogue does with them (the kernel's MODE parameter) */
#define GEMV_PLAIN 0 /* rows r0 + gid and r0 + gid + 8 of the concatenated weights */
#define GEMV_ROPE 1  /* q/k: rotation pairs, rope, q out and k/v into the cache (see gemv_args) */
#define GEMV_GLU 2   /* gate/up: row i of both weights, out = silu(gate) * up (see gemv_row_lo) */

/* rows held by lane group gid of a 16-row tile at local row r0 (a multiple of 16) of weight m: rows
 * r0 + gid and r0 + gid + 8, or with GEMV_ROPE for q/k (m < 2) the rotation pair (i, i + hd/2) of one head,
 * i = 8 * (tile within the head) + gid, so that one lane holds both halves of every rotation.
 * GLU: tile t (virtual rows 16 t..16 t + 15 of 2 R) holds row 8 t + gid of the gate weight (lo) and
 * the same row of the up weight (hi), so that one lane holds both inputs of silu(gate) * up. */
template <int MODE>
__device__ __forceinline__ int gemv_row_lo(const gemv_args &a, int m, int r0, int gid) {
  if (MODE == GEMV_GLU) return r0 / 2 + gid;
  if (MODE != GEMV_ROPE || m == 2) return r0 + gid;
  const int lt = r0 / 16;
  if (a.hds >= 0) {
    const int sh = a.hds - 4; /* per = hd / 16 tiles a head */
    return ((lt >> sh) << a.hds) + ((lt & ((1 << sh) - 1)) << 3) + gid;
  }
  const int per = a.hd / 16;
  return (lt / per) * a.hd + (lt % per) * 8 + gid;
}
/* row lo's place in its head, the rope frequency index: a mask when head_dim is a power of two */
__device__ __forceinline__ int gemv_hd_pos(const gemv_args &a, int lo) {
  return a.hds >= 0 ? lo & (a.hd - 1) : lo % a.hd;
}
template <int MODE>
__device__ __forceinline__ int gemv_row_hi(const gemv_args &a, int m, int lo) {
  if (MODE == GEMV_GLU) return lo;
  return MODE == GEMV_ROPE && m < 2 ? lo + a.hd / 2 : lo + 8;
}

/* what the epilogue of output pair (lane group p of the tile at global row r0, token t) adds and rotates by:
 * the two rows' bias and (GEMV_ROPE, q/k) the token's position and the pair's inverse frequency. None of it
 * depends on the kernel before, so the emitting threads of a block's first unit load it before
 * griddepcontrol.wait; only loads go there (a load stalls nothing until its value is used), the arithmetic
 * stays in the emit. Round 10: the emit with a bias load and a double-precision pow on the chain after the
 * wait took 2.2-2.5 µs of the QKV kernel; the whole of it before the wait (branch cuda-prep) held up the
 * wait of blocks that entered late (the 3B) */
struct gemv_pre {
  float bl, bh, inv;
  int ps;
};
template <int MODE>
__device__ __forceinline__ gemv_pre gemv_prep(const gemv_args &a, int r0, int p, int t, const int *pos, uint64_t pk) {
  gemv_pre q = {0.0f, 0.0f, 1.0f, 0};
  if (MODE == GEMV_GLU || r0 >= a.rows_total) return q;
  const int m = r0 >= a.row0[1] ? (r0 >= a.row0[2] ? 2 : 1) : 0, rows = a.row0[m + 1] - a.row0[m];
  const int lo = gemv_row_lo<MODE>(a, m, r0 - a.row0[m], p), hi = gemv_row_hi<MODE>(a, m, lo);
  const float *bias = a.bias[m];
  if (bias) {
    if (lo < rows) q.bl = ld_f32_h(bias + lo, pk);
    if (hi < rows) q.bh = ld_f32_h(bias + hi, pk);
  }
  if (MODE == GEMV_ROPE && m < 2) {
    q.inv = a.rinv[gemv_hd_pos(a, lo)];
    q.ps = pos[t];
  }
  return q;
}

/* the epilogue of one output pair: rows lo/hi of lane group p of the tile at global row r0, token t
 * (bias, rope, q/cache stores, residual add, store); hq: q holds what gemv_prep loaded before the wait (by
 * value: a pointer would put it in local memory, whose stores wait for the loads before the wait) */
template <typename TO, int MODE>
__device__ __forceinline__ void gemv_emit(const gemv_args &a, int r0, int p, int t, float vl, float vh,
                                          const int *spos, const int64_t *sslot, bool hq, gemv_pre q) {
  if (r0 >= a.rows_total) return;
  if (MODE == GEMV_GLU) { /* no bias, no residual (gemv_fill checks) */
    const int lo = r0 / 2 + p;
    if (lo < a.row0[1]) stf((TO *)a.out[0] + (int64_t)t * a.ldo[0] + lo, glu_act(vl, a.act) * vh);
    return;
  }
  const int m = r0 >= a.row0[1] ? (r0 >= a.row0[2] ? 2 : 1) : 0, rows = a.row0[m + 1] - a.row0[m];
  const int lo = gemv_row_lo<MODE>(a, m, r0 - a.row0[m], p), hi = gemv_row_hi<MODE>(a, m, lo);
  const float *bias = a.bias[m];
  if (hq) {
    vl += q.bl;
    vh += q.bh;
  } else if (bias) {
    if (lo < rows) vl += bias[lo];
    if (hi < rows) vh += bias[hi];
  }
  if (MODE == GEMV_ROPE) { /* rows < rows always: q/k/v are whole heads */
    if (m < 2) { /* rope_neox as rope_kv_kernel computes it (the same angle: rinv is rope_pow's value) */
      float sn, cs;
      sincosf((float)(hq ? q.ps : spos[t]) * (hq ? q.inv : a.rinv[gemv_hd_pos(a, lo)]), &sn, &cs);
      const float x0 = vl, x1 = vh;
      vl = x0 * cs - x1 * sn;
      vh = x1 * cs + x0 * sn;
    }
    if (m == 0) {
      TO *op = (TO *)a.out[0] + (int64_t)t * a.ldo[0];
      stf(op + lo, vl);
      stf(op + hi, vh);
    } else {
      __half *cp = (m == 1 ? a.kc : a.vc) + sslot[t] * (int64_t)rows;
      cp[lo] = __float2half_rn(vl);
      cp[hi] = __float2half_rn(vh);
    }
    return;
  }
  TO *op = (TO *)a.out[m] + (int64_t)t * a.ldo[m];
  if (lo < rows) {
    if (a.add) vl += ldf(op + lo);
    stf(op + lo, vl);
  }
  if (hi < rows) {
    if (a.add) vh += ldf(op + hi);
    stf(op + hi, vh);
  }
}

/* PRO_ANORM / PRO_APLAIN: the norm_add that would run before this GEMV (gemma4_fused.cu), done by every block for
 * itself: x' = (x + rmsnorm(y) · aw) · sadd into xs as plain f16 rows [n][K], block 0 also storing it to a.xout (the
 * other residual buffer: the other blocks still read x). The sums of squares of y have norm_add_kernel's shapes (d >=
 * 1024: 256 threads, 8 elements each per 2,048, warp_sum, the 8 warps' sums added in order; else one warp, lane-strided)
 * and the element formula its roundings, so that x' has the plain op's bits. inv: per token 1 / rms(y) (the kernel's
 * s_inv, free until its own norm); part: 64 floats of scratch. Called by every thread after griddepcontrol.wait. */
__device__ __forceinline__ float gemv_rnd_h(float v) { return __half2float(__float2half_rn(v)); }
/* ss plus the squares of 8 halves, pair by pair in order (norm_add_kernel's sum) */
__device__ __forceinline__ float gemv_sumsq8(uint4 u, float ss) {
  const __half2 *h = (const __half2 *)&u;
#pragma unroll
  for (int e = 0; e < 4; e++) {
    float2 f = __half22float2(h[e]);
    ss += f.x * f.x + f.y * f.y;
  }
  return ss;
}
template <int NW>
__device__ __forceinline__ void gemv_add_pass(const gemv_args &a, __half *xs, int n, float *inv, float *part) {
  constexpr int NT = NW * 32;
  const int K = a.K, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int nch = n * (K / 8);
  /* the element pass takes two chunks a thread at a time (chunks c0 and c0 + NT); the loads of its first pair (x, y,
   * the norm weights) are issued here, before the sum of squares' loads of y, so that both passes wait on one round
   * trip to L2 instead of two (session 51: E4B tg128 +2.5 %, 12B +0.6 %; the same bits). */
  uint4 xv[2], yv[2];
  float w[2][8];
  auto ld_pair = [&](int c0) { /* every load issued before the first store (a.xout could alias them) */
#pragma unroll
    for (int i = 0; i < 2; i++) {
      const int c = c0 + i * NT;
      if (c >= nch) break;
      const int t = c / (K / 8), j0 = (c % (K / 8)) * 8;
      xv[i] = *(const uint4 *)(a.x + (int64_t)t * a.ldx + j0);
      yv[i] = *(const uint4 *)(a.y + (int64_t)t * a.ldy + j0);
#pragma unroll
      for (int e = 0; e < 8; e++) w[i][e] = ld_any(a.aw, a.awdt, j0 + e);
    }
  };
  ld_pair(threadIdx.x);
  if (K >= 1024) {
    constexpr int NG = NT / 256; /* 256-thread groups, each one token at a time (the 11-warp shape: one group) */
    if (threadIdx.x < NG * 256) {
      const int tid = threadIdx.x % 256;
      for (int t = threadIdx.x / 256; t < n; t += NG) {
        const __half *yr = a.y + (int64_t)t * a.ldy;
        float ss = 0.0f;
        /* the first four chunks' loads issued together (K <= 8,192 is one batch), summed in the loop's order */
        uint4 u4[4];
#pragma unroll
        for (int i = 0; i < 4; i++)
          if (tid * 8 + i * 2048 < K) u4[i] = *(const uint4 *)(yr + tid * 8 + i * 2048);
#pragma unroll
        for (int i = 0; i < 4; i++)
          if (tid * 8 + i * 2048 < K) ss = gemv_sumsq8(u4[i], ss);
        for (int j = tid * 8 + 4 * 2048; j < K; j += 256 * 8) ss = gemv_sumsq8(*(const uint4 *)(yr + j), ss);
        ss = warp_sum(ss);
        if (tid % 32 == 0) part[t * 8 + tid / 32] = ss;
      }
    }
    __syncthreads();
    if (threadIdx.x < n) {
      float tot = 0.0f;
#pragma unroll
      for (int i = 0; i < 8; i++) tot += part[threadIdx.x * 8 + i];
      inv[threadIdx.x] = rsqrtf(tot / (float)K + a.eps);
    }
  } else {
    for (int t = warp; t < n; t += NW) {
      const __half *yr = a.y + (int64_t)t * a.ldy;
      float ss = 0.0f;
      for (int j = lane; j < K; j += 32) {
        float v = __half2float(yr[j]);
        ss += v * v;
      }
      ss = warp_sum(ss);
      if (lane == 0) inv[t] = rsqrtf(ss / (float)K + a.eps);
    }
  }
  __syncthreads();
  for (int c0 = threadIdx.x; c0 < nch; c0 += 2 * NT) {
    if (c0 != (int)threadIdx.x) ld_pair(c0); /* the first pair was loaded before the sums */
#pragma unroll
    for (int i = 0; i < 2; i++) {
      const int c = c0 + i * NT;
      if (c >= nch) break;
      const int t = c / (K / 8), j0 = (c % (K / 8)) * 8;
      const __half2 *hx = (const __half2 *)&xv[i], *hy = (const __half2 *)&yv[i];
      const float iv = inv[t];
      uint4 o;
      __half2 *ho = (__half2 *)&o;
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const float2 fx = __half22float2(hx[e]), fy = __half22float2(hy[e]);
        const float w0 = w[i][2 * e], w1 = w[i][2 * e + 1];
        /* norm_add_kernel's: rnd(y · inv · (w + 0)), rnd(x + that) uncontracted, times s, rounded by the store */
        const float s0 = gemv_rnd_h(__fadd_rn(fx.x, gemv_rnd_h(fy.x * iv * (w0 + 0.0f))));
        const float s1 = gemv_rnd_h(__fadd_rn(fx.y, gemv_rnd_h(fy.y * iv * (w1 + 0.0f))));
        ho[e] = a.sadd == 1.0f ? __floats2half2_rn(s0, s1) : __floats2half2_rn(s0 * a.sadd, s1 * a.sadd);
      }
      *(uint4 *)(xs + (int64_t)t * K + j0) = o;
      if (blockIdx.x == 0) *(uint4 *)(a.xout + (int64_t)t * a.ldx + j0) = o;
    }
  }
  __syncthreads();
}

/* RING: the ring depth (2, or 4 in the co-resident gate/up shape), a template parameter because cp.async.wait_group takes an
 * immediate: as a runtime value (a.ring) every step chose among the waits through three branches */
template <typename TO, int PRO, int KS, int MODE, int NW, int RING, int N1 = 0>
__global__ __launch_bounds__(NW * 32, NW == 8 ? GEMV_MINB : GEMV_MINB16) void gemv_q4_kernel(const __grid_constant__ gemv_args a) {
  constexpr int TPB = NW / KS, NT = NW * 32; /* tiles of 16 rows per unit, threads */
  /* KS == 1: every warp walks whole tiles on its own (tile = warp's global index, then + all warps)
   * and writes its outputs from registers: no block-wide reduction, no barrier after the prologue */
  constexpr bool WE = KS == 1;
  constexpr bool NORM = PRO == PRO_NORM || PRO == PRO_ANORM; /* the GEMV's own rmsnorm of its input */
  constexpr bool PA = PRO == PRO_ANORM || PRO == PRO_APLAIN;  /* its input made by a norm_add first (gemv_add_pass) */
  extern __shared__ uint4 smem[];
  __shared__ float s_inv[8];
  __shared__ gemv_ss_t s_ss[8]; /* rmsnorm: each token's sum of squares (f64: exact in any order) */
  __shared__ int s_pos[8];        /* GEMV_ROPE: each token's position and cache slot (from batch_upload, */
  __shared__ int64_t s_slot[8];   /* not from the kernel before: read before griddepcontrol.wait) */
  __shared__ float red[NW][4][32]; /* per warp, C fragment element, lane */
  __half *xs = (__half *)smem;
  const int K = a.K, G = K / 128, n = N1 ? 1 : a.n; /* N1: launched for one token only */
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gid = lane / 4, tig = lane % 4;
  const int ts = warp / KS, ks = warp % KS;
  constexpr int GPS = GEMV_GPS;
#if HEARTH_TRACE
  unsigned long long *cu_tr = a.tr;
  const int cu_tr_id = a.tr_id;
#endif
  if (threadIdx.x == 0) { CU_TRACE(0); CU_TRACE(6); }
  const int S = gemv_steps(G, KS);
  const uint64_t pol_w = l2_evict_first(), pol_k = l2_evict_last(); /* ptx.cuh: the weights, the small constants */

  /* the weight-loading side of the pipeline: step (lu, lj) = groups (ks + lj * KS) * GPS .. + GPS - 1
   * of tile lu * TPB + ts (WE: of tile lu); out-of-range blocks load zeros, steps past the row nothing */
  const int ustride = WE ? gridDim.x * NW : gridDim.x, u0 = WE ? blockIdx.x + gridDim.x * warp : blockIdx.x;
  /* the norm weights (raw, + off at use) into shared memory by cp.async, one group before the ring's:
   * a loop of plain loads and shared stores ran as K / threads dependent round trips */
  float *nws = (float *)(xs + (int64_t)n * K);
  float *corr = nws + (NORM ? K : 0); /* the offset fold's corrections: [G][GEMV_CPG] */
  if (NORM) {
    const int nb = K * (a.nwdt == HB_F32 ? 4 : 2);
    for (int i = threadIdx.x * 16; i < nb; i += NT * 16)
      cp_async16((uint8_t *)nws + i, (const uint8_t *)a.nw + i, 16);
  }
  cp_async_commit();
  if (MODE == GEMV_ROPE && threadIdx.x < n) {
    const int ps = a.pos[threadIdx.x];
    s_pos[threadIdx.x] = ps;
    s_slot[threadIdx.x] = (int64_t)a.bt[(int64_t)a.seq[threadIdx.x] * a.max_blocks + ps / a.bs] * a.bs + ps % a.bs;
  }
  int lu = u0, lj = 0;
  uint8_t *ring = (uint8_t *)smem + gemv_smem(n, K, PRO) + (size_t)warp * RING * GEMV_SLOT;
  /* per tile (lj == 0): a running pointer per 8-row block (q4_off: a block's groups are contiguous, 512 bytes
   * each) and one for the scales (lanes 0-3: lo h0, lo h1, hi h0, hi h1); a step adds a constant. A block past its
   * weight's rows zero-fills (ignore-src) at block 0 of the weight, so every address stays inside the buffer: no
   * select per copy. Liveness is uniform over the warp (blocks of 8 rows, rows padded to 8). */
  const uint8_t *pl = NULL, *ph = NULL, *psc = NULL;
  bool zl = true, zh = true, zsc = true; /* zero-fill instead of copying (cp.async's ignore-src) */
  const uint32_t wsrc = smem_u32(ring) + lane * 16, ssrc = smem_u32(ring) + 2048 + lane * 16;
  auto load = [&](int slot) { /* the step (lu, lj) into ring slot `slot` */
    if (lj == 0) {
      const int r0 = (WE ? lu : lu * TPB + ts) * 16;
      const bool live = lu < a.n_units && r0 < a.rows_total;
      /* GLU: lo from the gate weight, hi from the up weight (same row) */
      const int m = !live || MODE == GEMV_GLU ? 0 : r0 >= a.row0[1] ? (r0 >= a.row0[2] ? 2 : 1) : 0;
      const int mh = MODE == GEMV_GLU ? 1 : m;
      const int rows = a.row0[m + 1] - a.row0[m];
      const int lo = live ? gemv_row_lo<MODE>(a, m, r0 - a.row0[m], 0) : 0, hi = gemv_row_hi<MODE>(a, m, lo);
      const bool bl = live && lo < rows, bh = live && hi < (MODE == GEMV_GLU ? a.row0[2] - a.row0[1] : rows);
      const int64_t g0 = (int64_t)ks * GEMV_GPS; /* this warp's first group of the tile */
      pl = a.wq[m] + q4_off(bl ? lo : 0, g0, G) + lane * 16;
      ph = a.wq[mh] + q4_off(bh ? hi : 0, g0, G) + lane * 16;
      zl = !bl;
      zh = !bh;
      const bool sl = lane < 2 ? bl : bh;
      psc = (const uint8_t *)(a.ws[lane < 2 ? m : mh] + q4_soff(sl ? (lane < 2 ? lo : hi) : 0, g0 + (lane & 1), G));
      zsc = !sl;
    }
    const int g = (ks + lj * KS) * GEMV_GPS; /* uniform over the warp */
    /* steps past the row (KS padding) copy nothing: the consumer skips them; nor do the steps of units past the last
     * (never consumed): a warp with fewer steps than its ring past its last one (down_proj: 3 steps, 2 slots) issued
     * their zero-fill copies and waited on them at its end (session 51: 3B down 7.5 -> 6.7 µs a layer) */
    if (g < G && lu < a.n_units) {
      const uint32_t so = (uint32_t)slot * GEMV_SLOT;
      const bool v1 = g + 1 < G; /* an odd G's last step has one group: the second copies zero-fill (their
                                    addresses fall in the buffer's tail) */
      cp_async16_zh(wsrc + so, pl, zl, pol_w);
      cp_async16_zh(wsrc + so + 512, ph, zh, pol_w);
      cp_async16_zh(wsrc + so + 1024, pl + 512, zl || !v1, pol_w);
      cp_async16_zh(wsrc + so + 1536, ph + 512, zh || !v1, pol_w);
      cp_async16_if_zh(lane < 4, ssrc + so, psc, zsc || ((lane & 1) && !v1), pol_w); /* the scales: lanes 0-3 */
    }
    cp_async_commit();
    pl += KS * GEMV_GPS * 512;
    ph += KS * GEMV_GPS * 512;
    psc += KS * GEMV_GPS * 16;
    if (++lj == S) { lj = 0; lu += ustride; }
  };
#pragma unroll
  for (int i = 0; i < RING; i++) load(i);
  if (NORM && threadIdx.x < 8) s_ss[threadIdx.x] = 0.0f;
  /* columns past n: finite values for the mma columns that are never stored */
  for (int i = threadIdx.x; i < G * GEMV_CPG; i += blockDim.x)
    if ((i % 16) / 4 * 2 + (i & 1) >= n) corr[i] = 0.0f;
  /* KS > 1: the thread that will emit output pair (ot, p, t) of the block's first unit prepares it here */
  gemv_pre pre0 = {0.0f, 0.0f, 1.0f, 0};
  if (!WE && MODE == GEMV_ROPE && threadIdx.x < TPB * 8 * n && u0 < a.n_units) {
    const int o = threadIdx.x, ot = o / (8 * n), p = (o / n) % 8, t = o % n;
    pre0 = gemv_prep<MODE>(a, (u0 * TPB + ot) * 16, p, t, a.pos, pol_k);
  }
  pdl_wait();
  pdl_trigger();
  if (threadIdx.x == 0) { CU_TRACE(1); CU_TRACE(3); }
  /* PA: x' = the norm_add of x and y into xs (plain row-major f16 rows), which the steps below then read in place of x */
  if (PA) gemv_add_pass<NW>(a, xs, n, s_inv, &red[0][0][0]);
  const __half *xsrc = PA ? xs : a.x;
  const int64_t xld = PA ? (int64_t)K : a.ldx;

  /* prologue: x rows -> f16 (after the norm / silu) in shared memory, chunk c = 8 elements of
   * token c / (K/8); the 16-byte chunk c of 32-run R goes to its swizzled slot */
  const int nch = n * (K / 8);
  /* chunk c's token and its chunk index in the row; with N1 written out (0 and c): the compiler cannot see that
   * c < K/8, so it kept both integer divisions by a runtime K per chunk, on the chain after griddepcontrol.wait */
  auto ctok = [&](int c) { return N1 ? 0 : c / (K / 8); };
  auto cpos = [&](int c) { return N1 ? c : c % (K / 8); };
  /* returns the chunk's share of its group's correction; odd chunks are stored / 16 */
  auto put = [&](int c, uint4 v) -> float {
    const int t = ctok(c), k8 = cpos(c), R = k8 / 4, sw = gemv_swz(R, t);
    uint32_t *run = (uint32_t *)(xs + (int64_t)t * K + R * 32);
    return gemv_put_chunk<true>(run, k8, sw, v);
  };
  /* the 16 chunks of one (token, group) sit in 16 aligned lanes of one warp (chunk c = c0 + thread,
   * c0 a multiple of the block size, K/8 a multiple of 16): sum them by shuffles (a fixed order, so
   * the result is deterministic). Called by every lane of the warp; dead lanes pass 0. */
  auto corr_add = [&](int c, float cs, bool live) {
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) cs += __shfl_xor_sync(0xffffffffu, cs, o);
    const int t = ctok(c), g = cpos(c) / 16;
    if (live && lane % 16 == 0) {
      corr[g * 16 + t / 2 * 4 + (t & 1)] = -cs;
      corr[g * 16 + t / 2 * 4 + (t & 1) + 2] = -cs;
    }
  };
  auto xat = [&](const __half *base, int c, int64_t ld) {
    return *(const uint4 *)(base + (int64_t)ctok(c) * ld + (int64_t)cpos(c) * 8);
  };
  /* rmsnorm: chunk c's sum of squares into s_ss[token], one shared atomic per warp when its 32 chunks are one
   * token's (a float atomicAdd on shared memory is a compare-and-swap loop: one per chunk took 60 % of the long-row
   * path's time in round 12's ncu sampling). Called by every lane of the warp; dead lanes (c >= nch) add nothing. */
  auto ss_add = [&](int c, uint4 v) {
    float ss = 0.0f;
    if (c < nch) {
      const __half2 *h = (const __half2 *)&v;
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const float2 f = __half22float2(h[e]);
        ss += f.x * f.x + f.y * f.y;
      }
    }
    const int t = ctok(c < nch ? c : nch - 1);
    if (__all_sync(0xffffffffu, t == __shfl_sync(0xffffffffu, t, 0))) {
      if ((K / 8) % 32) {
        /* a row's last warp is part-full (one token) or shared by two (several): the chunks' sums in f64 then, as
         * the shared warps add them, so that a token's sum is the same whatever n is (gemv_twin_launch) */
        gemv_ss_t d = ss;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
        if (lane == 0) atomicAdd(&s_ss[t], d);
      } else {
        ss = warp_sum(ss);
        if (lane == 0) atomicAdd(&s_ss[t], (gemv_ss_t)ss);
      }
    } else if (c < nch) {
      atomicAdd(&s_ss[t], (gemv_ss_t)ss);
    }
  };
  if (NORM && nch <= 4 * NT) { /* (PA: every chunk is read into registers before the first put, after a barrier) */
    /* one read of x (up to 4 chunks per thread, kept in registers): sum of squares per token
     * (one atomic per warp when the warp's chunks are one token's), then scale and store */
    uint4 xv[4];
#pragma unroll
    for (int k = 0; k < 4; k++) {
      const int c = threadIdx.x + k * NT;
      if (c < nch) xv[k] = xat(xsrc, c, xld);
    }
    cp_async_wait<RING>(); /* the norm weights: the group before the ring's */
    __syncthreads(); /* s_ss zeroed, norm weights landed */
#pragma unroll
    for (int k = 0; k < 4; k++) {
      if (k * NT >= nch) break; /* uniform */
      ss_add(threadIdx.x + k * NT, xv[k]);
    }
    __syncthreads();
    if (threadIdx.x < n) s_inv[threadIdx.x] = rsqrtf((float)s_ss[threadIdx.x] / (float)K + a.eps);
    __syncthreads();
#pragma unroll
    for (int k = 0; k < 4; k++) {
      if (k * NT >= nch) break; /* uniform */
      const int c = threadIdx.x + k * NT;
      const bool live = c < nch;
      float cs = 0.0f;
      if (live) {
        const float inv = s_inv[ctok(c)];
        const int w0i = cpos(c) * 8;
        __half2 *h = (__half2 *)&xv[k];
#pragma unroll
        for (int e = 0; e < 4; e++) {
          const float2 f = __half22float2(h[e]);
          h[e] = __floats2half2_rn(f.x * inv * (ld_any(nws, a.nwdt, w0i + 2 * e) + a.off),
                                   f.y * inv * (ld_any(nws, a.nwdt, w0i + 2 * e + 1) + a.off));
        }
        cs = put(c, xv[k]);
      }
      corr_add(c, cs, live);
    }
  } else {
    if (NORM) { /* long rows: two reads of x (the second from L1) */
      cp_async_wait<RING>(); /* the norm weights */
      __syncthreads();
      for (int c0 = 0; c0 < nch; c0 += blockDim.x) { /* uniform: ss_add shuffles */
        const int c = c0 + threadIdx.x;
        ss_add(c, c < nch ? xat(xsrc, c, xld) : make_uint4(0u, 0u, 0u, 0u));
      }
      __syncthreads();
      if (threadIdx.x < n) s_inv[threadIdx.x] = rsqrtf((float)s_ss[threadIdx.x] / (float)K + a.eps);
      __syncthreads();
    }
#pragma unroll 4
    for (int c0 = 0; c0 < nch; c0 += blockDim.x) { /* uniform over the warp: corr_add shuffles */
      const int c = c0 + threadIdx.x;
      const bool live = c < nch;
      float cs = 0.0f;
      uint4 v = make_uint4(0u, 0u, 0u, 0u);
      if (PA) { /* x' is read from the run that put() rewrites: a run's 4 chunks are 4 lanes of this warp, this pass */
        if (live) v = xat(xsrc, c, xld);
        __syncwarp();
      }
      if (live) {
      if (!PA) v = xat(xsrc, c, xld);
      if (PRO != PRO_PLAIN && PRO != PRO_APLAIN) {
        __half2 *h = (__half2 *)&v;
        const uint4 v2 = PRO == PRO_SILU || PRO == PRO_GELU ? xat(a.x2, c, a.ldx2) : v;
        const __half2 *h2 = (const __half2 *)&v2;
        const float inv = NORM ? s_inv[ctok(c)] : 0.0f;
        const int w0i = cpos(c) * 8;
#pragma unroll
        for (int e = 0; e < 4; e++) {
          float2 f = __half22float2(h[e]);
          if (NORM) { /* (x · inv) · (w + off), as the one-read path above and rmsnorm_kernel: one association for
                       * every n, so that a step twin's rows are its one-token launches' (gemv_twin_launch) */
            f.x = f.x * inv * (ld_any(nws, a.nwdt, w0i + 2 * e) + a.off);
            f.y = f.y * inv * (ld_any(nws, a.nwdt, w0i + 2 * e + 1) + a.off);
          } else if (PRO == PRO_GELU) { /* gelu_mul_kernel's expression, rounded to f16 as its store is */
            const float2 up = __half22float2(h2[e]);
            f.x = gelu_tanh_f(f.x) * up.x;
            f.y = gelu_tanh_f(f.y) * up.y;
          } else {
            const float2 up = __half22float2(h2[e]);
            f.x = f.x / (1.0f + expf(-f.x)) * up.x;
            f.y = f.y / (1.0f + expf(-f.y)) * up.y;
          }
          h[e] = __floats2half2_rn(f.x, f.y);
        }
      }
      cs = put(c, v);
      }
      corr_add(c, cs, live);
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) CU_TRACE(4);
#if HEARTH_TRACE
  bool tr_first = true;
#endif

  /* the consuming side: step (u, j) */
  const int xt = gid % n;
  const __half *xrow = xs + (int64_t)xt * K, *xlane = xrow + tig * 32; /* run 4 g + tig at xlane + 128 g */
  /* gemv_swz(4 g + tig, xt) by the parity of g: ((2 g + tig / 2) ^ 2 xt) & 3 (steps begin at groups that are
   * multiples of GEMV_GPS, so with GEMV_GPS even the parity of g is that of h) */
  const int xsw0 = ((tig >> 1) ^ (xt << 1)) & 3, xsw1 = xsw0 ^ 2;
  int u = u0, j = 0;
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  int slot = 0; /* the step's ring slot */
  while (u < a.n_units) { /* uniform over the block (WE: over the warp) */
    {
      /* this step's slot has landed (its group is the oldest of RING outstanding); it is used up
       * (weights -> A fragments, scales -> f32) before load() refills it with the step RING ahead */
      cp_async_wait<RING - 1>();
#if HEARTH_TRACE
      if (tr_first && lane == 0) CU_TRACE(5);
      tr_first = false;
#endif
      const uint8_t *sb = ring + slot * GEMV_SLOT;
      uint4 W0[GPS], W8[GPS];
      __half S0[GPS], S8[GPS];
#pragma unroll
      for (int h = 0; h < GPS; h++) {
        W0[h] = *(const uint4 *)(sb + h * 1024 + lane * 16);
        W8[h] = *(const uint4 *)(sb + h * 1024 + 512 + lane * 16);
        S0[h] = *(const __half *)(sb + 2048 + h * 16 + gid * 2);
        S8[h] = *(const __half *)(sb + 2048 + 32 + h * 16 + gid * 2);
      }
      load(slot); /* refill this slot with the step RING ahead */
      if (++slot == RING) slot = 0;
#pragma unroll
      for (int h = 0; h < GPS; h++) {
        const int g = (ks + j * KS) * GPS + h;
        if (g >= G) break; /* uniform over the warp */
        uint32_t p0[4][4], p8[4][4];
        {
          const uint32_t a0[4] = {W0[h].x, W0[h].y, W0[h].z, W0[h].w}, a8[4] = {W8[h].x, W8[h].y, W8[h].z, W8[h].w};
#pragma unroll
          for (int q = 0; q < 4; q++) {
            q4_word_raw(a0[q], p0[q]);
            q4_word_raw(a8[q], p8[q]);
          }
        }
        const float sc0 = __half2float(S0[h]), sc8 = __half2float(S8[h]);
        /* B: x of token xt (lanes past the n rows read row xt = gid % n: finite data for output
         * columns that are never stored), run R; the run's half2 words are stored permuted so that
         * the two words of each B fragment sit side by side */
        const uint4 *xp = (const uint4 *)(xlane + g * 128);
        const int sw = (h & 1) ? xsw1 : xsw0; /* gemv_swz(4 g + tig, xt) */
        uint4 xv[4];
#pragma unroll
        for (int c = 0; c < 4; c++)
          xv[c] = xp[c ^ sw];
        /* two accumulators (hh = 0, 1): two chains of 4 dependent mmas instead of one of 8 (four
         * chains of 2 measured the same, round 9) */
        float c4[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
        { /* the second chain starts from minus the correction of tokens 2 tig, 2 tig + 1 */
          const float4 cr = *(const float4 *)&corr[g * 16 + tig * 4];
          c4[1][0] = cr.x;
          c4[1][1] = cr.y;
          c4[1][2] = cr.z;
          c4[1][3] = cr.w;
        }
#pragma unroll
        for (int q = 0; q < 4; q++) {
#pragma unroll
          for (int hh = 0; hh < 2; hh++) {
            const uint32_t af[4] = {p0[q][2 * hh], p8[q][2 * hh], p0[q][2 * hh + 1], p8[q][2 * hh + 1]};
            const uint4 xc = xv[2 * hh + (q >> 1)];
            const uint32_t bf[2] = {q & 1 ? xc.z : xc.x, q & 1 ? xc.w : xc.y};
            mma_16816(c4[hh], af, bf);
          }
        }
        acc[0] = fmaf(sc0, c4[0][0] + c4[1][0], acc[0]);
        acc[1] = fmaf(sc0, c4[0][1] + c4[1][1], acc[1]);
        acc[2] = fmaf(sc8, c4[0][2] + c4[1][2], acc[2]);
        acc[3] = fmaf(sc8, c4[0][3] + c4[1][3], acc[3]);
      }
      if (++j < S) continue;
      j = 0;
      if (lane == 0) CU_TRACE(7); /* the unit's last step multiplied */
      if (WE) { /* the warp's own tile: lane (gid, tig) holds rows gid / gid + 8 of tokens 2 tig, 2 tig + 1 */
#pragma unroll
        for (int e = 0; e < 2; e++)
          if (2 * tig + e < n)
            gemv_emit<TO, MODE>(a, u * 16, gid, 2 * tig + e, acc[e], acc[2 + e], s_pos, s_slot, false, gemv_pre{});
        if (lane == 0) CU_TRACE(9);
#pragma unroll
        for (int e = 0; e < 4; e++) acc[e] = 0.0f;
      } else { /* unit done: the KS partial tiles meet in shared memory, one thread per (tile, row, token) */
#pragma unroll
        for (int e = 0; e < 4; e++) { red[warp][e][lane] = acc[e]; acc[e] = 0.0f; }
        __syncthreads();
        if (threadIdx.x == 0) CU_TRACE(8); /* the partial tiles in shared memory */
        /* one thread per (tile, lane group gid, token): both rows of the lane group */
        for (int o = threadIdx.x; o < TPB * 8 * n; o += blockDim.x) {
          const int ot = o / (8 * n), p = (o / n) % 8, t = o % n;
          const int ln = p * 4 + t / 2;
          float vl = 0.0f, vh = 0.0f;
#pragma unroll
          for (int k = 0; k < KS; k++) {
            vl += red[ot * KS + k][t % 2][ln];
            vh += red[ot * KS + k][2 + t % 2][ln];
          }
          const int r0 = (u * TPB + ot) * 16;
          gemv_emit<TO, MODE>(a, r0, p, t, vl, vh, s_pos, s_slot, MODE == GEMV_ROPE && u == u0 && o == threadIdx.x, pre0);
          CU_TRACE(9); /* emitted (a residual's load has returned) */
        }
        __syncthreads();
      }
      u += ustride;
    }
  }
  cp_async_wait<0>(); /* the prefetches past the last step */
  if (lane == 0) CU_TRACE(2);
}

/* ---- dispatch ------------------------------------------------------------------------------------ */

/* whole-tile warps (KS = 1) from this many tiles per SM (round 6); 0 under HEARTH_TEST_GEMV (cu_gemv_init) */
static int g_gemv_we_min = 4;
/* Ring depth 2 in 8- and 16-warp blocks: round 7 found 4 better than 8 (the next kernel's blocks fit beside this
 * one's), round 9 4 for the 0.5B's gate/up, round 13 (the blocked weight layout) 2 everywhere: 0.5B +8-10 %,
 * 3B +0-2 %. The depth-4 instances of those shapes and the rule that picked 4 for 3-4 steps per warp were removed
 * with the knob that allowed them (docs/decisions.md, "One path per op"; history: ac09af2).
 * The co-resident gate/up shape (bench/NOTES.md round 22, gemv_cores_launch): the norm+gate/up GEMV as one block of
 * GEMV_CORES_NW whole-tile warps per SM with a 4-step ring (half of the 3B's gate/up steps asked for while o_proj
 * runs), so that every one of its blocks enters beside o_proj's (two 8-warp blocks per SM do not fit beside it: only
 * half of them started their ring while o_proj ran); every GEMV instance prefers the largest shared-memory carveout
 * (an SM configured for smaller blocks cannot take a larger one until it drains). Taken where it measured faster:
 * one-token steps of at least 8 tiles per SM (the 3B: +0.7 to +1.5 % tg128; the 0.5B's 4.6 tiles per SM lost 4 %).
 * Round 22 also measured, and dropped (history: the patch bench/patches/round22-knobs.patch at ac09af2): down_proj
 * as 8-warp blocks whose ring holds every step, resident beside this shape (-4 %), the dependents' trigger after the
 * k-th step (±0), and the x read before the ring's first steps in the kernels that enter after the kernel before has
 * ended (-3 to -7 %).
 * HEARTH_TEST_GEMV (test-only, README "Environment"): "whole" gives every shape whole-tile warps, "cores" also the
 * co-resident shape on every gate/up it fits, so that the test suite's small models run the instances that only
 * large models take in a product run. */
static int g_gemv_cores_any = 0; /* HEARTH_TEST_GEMV=cores: the co-resident shape wherever it fits */

/* the launch shapes: (warps per block, warps per tile) */
#define GEMV_CONFIGS(X) X(8, 1) X(8, 2) X(8, 4) X(8, 8) X(16, 16)
#define GEMV_CFG_ROW(NW, KS) {NW, KS},
static const int g_gemv_cfg[][2] = {GEMV_CONFIGS(GEMV_CFG_ROW)};
#undef GEMV_CFG_ROW
#define GEMV_NCFG ((int)(sizeof g_gemv_cfg / sizeof g_gemv_cfg[0]))

/* the dynamic shared-memory limit raised to what the device allows, and the largest carveout preferred */
template <typename KERN>
static int gemv_attr_k(struct hb_ctx *ctx, KERN kern) {
  if (smem_attr(ctx, kern)) return 1;
  return CU_OK(ctx, cudaFuncSetAttribute(kern, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared));
}
/* one shape at one ring depth: its general instance and its n = 1 instance, which every one-token launch takes */
template <typename TO, int PRO, int KS, int MODE, int NW, int RING>
static int gemv_attr_n(struct hb_ctx *ctx) {
  return gemv_attr_k(ctx, gemv_q4_kernel<TO, PRO, KS, MODE, NW, RING>) |
         gemv_attr_k(ctx, gemv_q4_kernel<TO, PRO, KS, MODE, NW, RING, 1>);
}
template <typename TO, int PRO, int KS, int MODE, int NW, int RING>
static void gemv_launch_k(struct hb_ctx *ctx, dim3 grid, dim3 block, size_t sm, const gemv_args &a) {
  if (a.n == 1) cu_launch_pdl(ctx, "gemv_q4", gemv_q4_kernel<TO, PRO, KS, MODE, NW, RING, 1>, grid, block, sm, a);
  else cu_launch_pdl(ctx, "gemv_q4", gemv_q4_kernel<TO, PRO, KS, MODE, NW, RING>, grid, block, sm, a);
}
template <typename TO, int PRO, int MODE>
static int gemv_attr1(struct hb_ctx *ctx) {
  int bad = 0;
#define GEMV_ATTR(NW, KS) bad |= gemv_attr_n<TO, PRO, KS, MODE, NW, 2>(ctx);
  GEMV_CONFIGS(GEMV_ATTR)
#undef GEMV_ATTR
  return bad;
}
int cu_gemv_init(struct hb_ctx *ctx) {
  const char *t = getenv("HEARTH_TEST_GEMV"); /* test-only (above) */
  const char *xm = getenv("HEARTH_TEST_GEMV_XMAX"); /* test-only: GEMV_XMAX in its place (README "Environment") */
  ctx->gemv_xmax = xm && *xm ? (size_t)strtoull(xm, NULL, 10) : GEMV_XMAX;
  const char *tr = getenv("HEARTH_TEST_TWIN_ROWS"); /* test-only: fewer rows a step-twin chunk (README "Environment") */
  ctx->twin_rows = tr && atoi(tr) >= 1 && atoi(tr) <= 8 ? atoi(tr) : 8;
  if (t && (!strcmp(t, "whole") || !strcmp(t, "cores"))) g_gemv_we_min = 0;
  if (t && !strcmp(t, "cores")) g_gemv_cores_any = 1;
  return gemv_attr_n<__half, PRO_NORM, 1, GEMV_GLU, GEMV_CORES_NW, 4>(ctx) |
         gemv_attr_n<__half, PRO_ANORM, 1, GEMV_GLU, GEMV_CORES_NW, 4>(ctx) |
         gemv_attr1<__half, PRO_ANORM, GEMV_PLAIN>(ctx) | gemv_attr1<__half, PRO_ANORM, GEMV_GLU>(ctx) |
         gemv_attr1<__half, PRO_APLAIN, GEMV_PLAIN>(ctx) |
         gemv_attr1<__half, PRO_PLAIN, GEMV_PLAIN>(ctx) | gemv_attr1<__half, PRO_NORM, GEMV_PLAIN>(ctx) |
         gemv_attr1<__half, PRO_NORM, GEMV_GLU>(ctx) |
         gemv_attr1<__half, PRO_SILU, GEMV_PLAIN>(ctx) | gemv_attr1<__half, PRO_GELU, GEMV_PLAIN>(ctx) |
         gemv_attr1<float, PRO_PLAIN, GEMV_PLAIN>(ctx) |
         gemv_attr1<float, PRO_NORM, GEMV_PLAIN>(ctx) | gemv_attr1<float, PRO_SILU, GEMV_PLAIN>(ctx) |
         gemv_attr1<__half, PRO_NORM, GEMV_ROPE>(ctx);
}

/* the launch shape whose units fill the resident slots most evenly, counting the padded steps of
 * groups that do not divide by KS; among near-equals the first listed (8-warp blocks, fewest
 * shared-memory reductions per weight byte). 16-warp blocks (one per SM at <= 128 registers) give
 * matrices of few tiles and long rows (down_proj: 128 tiles of 86 groups) twice the warps in flight. */
static int gemv_pick(int tiles, int G, int n_sm, int per_sm8, int per_sm16, int *units_out) {
  double eff[GEMV_NCFG], best = 0.0;
  int units[GEMV_NCFG];
  /* enough tiles for every SM's warps to stream whole tiles without a block-wide reduction */
  if (g_gemv_cfg[0][1] == 1 && tiles >= g_gemv_we_min * n_sm) {
    *units_out = tiles;
    return 0;
  }
  for (int i = 0; i < GEMV_NCFG; i++) {
    const int nw = g_gemv_cfg[i][0], ks = g_gemv_cfg[i][1], tpb = nw / ks;
    if (ks == 1) { /* whole-tile warps only above */
      eff[i] = 0.0;
      units[i] = tiles;
      continue;
    }
    /* 16-warp blocks only for one round of long rows: with fewer than 2 steps per warp between two
     * block-wide reductions (gate/up at K = 2048: one step) they ran 1.45x slower (round 5, call 6) */
    if (nw == 16 && (!per_sm16 || tiles > n_sm * per_sm16 || G < 2 * ks)) {
      eff[i] = 0.0;
      units[i] = tiles;
      continue;
    }
    const int slots = n_sm * (nw == 8 ? per_sm8 : per_sm16);
    units[i] = (tiles + tpb - 1) / tpb;
    const int rounds = (units[i] + slots - 1) / slots, S = (G + ks - 1) / ks;
    eff[i] = (double)units[i] / ((double)rounds * slots) * (double)G / ((double)S * ks) *
             (double)tiles / ((double)units[i] * tpb);
    if (eff[i] > best) best = eff[i];
  }
  for (int i = 0; i < GEMV_NCFG; i++)
    if (eff[i] >= best * 0.97) {
      *units_out = units[i];
      return i;
    }
  *units_out = units[GEMV_NCFG - 1];
  return GEMV_NCFG - 1;
}

/* programmatic stream serialization: the kernel may start (and stream its first weights) while the
 * previous one drains; it waits with griddepcontrol.wait before it reads x or writes out */
/* the deepest weight ring (4 or 2 steps per warp) with which `bps` blocks of nw warps fit an SM's
 * shared memory (x, norm weights and corrections `base`; the static buffers, at most nw * 512 + 256
 * bytes (ptxas: 4,224 for 8 warps with rope); the per-block system reserve, plus slack); 0 when none does */
static bool gemv_ring_fits(const struct hb_ctx *ctx, size_t base, int nw, int r, int bps) {
  const size_t stat = (size_t)nw * 512 + 256;
  const size_t dyn = base + (size_t)nw * r * GEMV_SLOT, blk = dyn + stat + ctx->smem_reserved + 768;
  return dyn + stat <= ctx->smem_optin && (size_t)bps * blk <= ctx->smem_sm;
}
static int gemv_ring(const struct hb_ctx *ctx, size_t base, int nw, int bps) {
  return gemv_ring_fits(ctx, base, nw, 2, bps) ? 2 : 0; /* the depth built for these shapes (above) */
}

/* whether the co-resident shape (above) takes a norm + gate/up launch of n rows (whole-tile warps, one tile each) */
static bool gemv_cores_fits(const struct hb_ctx *ctx, int rows_total, int K, int n, int pro) {
  const int tiles = (rows_total + 15) / 16;
  if (tiles < g_gemv_we_min * ctx->n_sm || tiles > GEMV_CORES_NW * ctx->n_sm) return false;
  if (!g_gemv_cores_any && (n != 1 || tiles < 8 * ctx->n_sm)) return false;
  return gemv_ring_fits(ctx, gemv_smem(n, K, pro), GEMV_CORES_NW, 4, 1);
}

/* the co-resident shape (above): launches the norm+gate/up GEMV in it and returns 1 where that applies */
template <typename TO, int PRO, int MODE>
static int gemv_cores_launch(struct hb_ctx *ctx, gemv_args &a) {
  /* constexpr: only the two norm + gate/up instances exist in this shape (a plain `if` instantiated it for every
   * prologue and mode) */
  if constexpr (!std::is_same<TO, __half>::value || (PRO != PRO_NORM && PRO != PRO_ANORM) || MODE != GEMV_GLU) {
    (void)ctx;
    (void)a;
    return 0;
  } else {
    if (!gemv_cores_fits(ctx, a.rows_total, a.K, a.n, PRO)) return 0;
    const int tiles = (a.rows_total + 15) / 16, ring = 4;
    const size_t sm = gemv_smem(a.n, a.K, PRO) + (size_t)GEMV_CORES_NW * ring * GEMV_SLOT;
    a.n_units = tiles;
    a.ring = ring;
#if HEARTH_TRACE
    a.tr = ctx->tr_dev;
    a.tr_id = cu_trace_id(ctx, "gemv glu n%d %dx%d %d/1 r%d co", a.n, a.rows_total, a.K, GEMV_CORES_NW, ring);
#endif
    const dim3 grid((unsigned)ctx->n_sm), block(GEMV_CORES_NW * 32);
    ctx->gemv_last_full = 0;
    gemv_launch_k<__half, PRO, 1, GEMV_GLU, GEMV_CORES_NW, 4>(ctx, grid, block, sm, a);
    return 1;
  }
}

/* the resident blocks per SM (and their ring depth in *ring, 0 when none fits) of nw-warp blocks over n rows */
static int gemv_per_sm(const struct hb_ctx *ctx, int n, int K, int pro, int nw, int *ring) {
  int per_sm = nw == 8 ? GEMV_MINB : GEMV_MINB16;
  for (*ring = 0; per_sm >= 1 && !(*ring = gemv_ring(ctx, gemv_smem(n, K, pro), nw, per_sm)); per_sm--) {}
  return per_sm;
}

/* the launch shape (g_gemv_cfg index) a launch of n rows picks, and its units, when the co-resident one does not */
static int gemv_shape(const struct hb_ctx *ctx, int rows_total, int K, int n, int pro, int *units) {
  int r8, r16;
  const int per_sm = gemv_per_sm(ctx, n, K, pro, 8, &r8), per_sm16 = gemv_per_sm(ctx, n, K, pro, 16, &r16);
  return gemv_pick((rows_total + 15) / 16, gemv_steps(K / 128, 1), ctx->n_sm, per_sm, r16 ? per_sm16 : 0, units);
}

template <typename TO, int PRO, int MODE>
static void gemv_launch_ci(struct hb_ctx *ctx, gemv_args &a, int ci, int units);

/* Step twins (hb_cuda_set_step_twins): the rows of a launch computed as the one-token launch of each row would
 * compute it. An output's bits depend on its row's x and the order of its K sums, which the shape's warps per tile
 * (KS) fix: the mma's column for one token does not see the others, the offset fold's corrections sum 16 aligned
 * chunks of one token, and the prologue's sum of squares of a token is an f64 sum of the same values at any n
 * (ss_add: per-warp f32 partials of the same 32-chunk runs of the token where K / 8 is a multiple of 32, else the
 * chunks' own sums). So the launch takes the KS of the one-token choice, in chunks of as many rows as that shape
 * fits (x grows by K f16 a row): the same bits, the weights read once a chunk. Not Gemma 4's folded prologues. */
static int gemv_twin_ok(int pro) { return pro != PRO_ANORM && pro != PRO_APLAIN && pro != PRO_GELU; }

template <typename TO, int PRO, int MODE>
static void gemv_twin_launch(struct hb_ctx *ctx, gemv_args &a) {
  const int K = a.K, n = a.n, tiles = (a.rows_total + 15) / 16;
  int u1 = tiles;
  const int cores1 = std::is_same<TO, __half>::value && (PRO == PRO_NORM || PRO == PRO_ANORM) && MODE == GEMV_GLU &&
                     gemv_cores_fits(ctx, a.rows_total, K, 1, PRO);
  const int ks = cores1 ? 1 : g_gemv_cfg[gemv_shape(ctx, a.rows_total, K, 1, PRO, &u1)][1];
  int ci = 0;
  while (ci < GEMV_NCFG - 1 && g_gemv_cfg[ci][1] != ks) ci++;
  const int nw = g_gemv_cfg[ci][0], tpb = nw / ks;
  int m = n < ctx->twin_rows ? n : ctx->twin_rows;
  while (m > 0 && !gemv_ring(ctx, gemv_smem(m, K, PRO), nw, 1)) m--;
  if (!gemv_twin_ok(PRO)) ctx->twin_bad++; /* (the launch still runs, in the one-token shape's KS) */
  if (m == 0) { /* not one row in that shape (cannot happen for the shapes a one-token launch took): no twin */
    ctx->twin_bad++;
    int units = tiles;
    if (n <= 8) gemv_launch_ci<TO, PRO, MODE>(ctx, a, gemv_shape(ctx, a.rows_total, K, n, PRO, &units), units);
    return;
  }
  const gemv_args a0 = a;
  for (int r0 = 0; r0 < n; r0 += m) {
    gemv_args c = a0;
    c.n = n - r0 < m ? n - r0 : m;
    c.x = a0.x + (int64_t)r0 * a0.ldx;
    if (a0.x2) c.x2 = a0.x2 + (int64_t)r0 * a0.ldx2;
    for (int i = 0; i < a0.n_mm; i++) c.out[i] = (char *)a0.out[i] + (size_t)r0 * (size_t)a0.ldo[i] * sizeof(TO);
    if (a0.pos) c.pos = a0.pos + r0;
    if (a0.seq) c.seq = a0.seq + r0;
    gemv_launch_ci<TO, PRO, MODE>(ctx, c, ci, ks == 1 ? tiles : (tiles + tpb - 1) / tpb);
  }
}

template <typename TO, int PRO, int MODE = GEMV_PLAIN>
static void gemv_launch_t(struct hb_ctx *ctx, gemv_args &a) {
  if (ctx->twin) { gemv_twin_launch<TO, PRO, MODE>(ctx, a); return; }
  if (gemv_cores_launch<TO, PRO, MODE>(ctx, a)) return;
  int units = (a.rows_total + 15) / 16;
  const int ci = gemv_shape(ctx, a.rows_total, a.K, a.n, PRO, &units);
  gemv_launch_ci<TO, PRO, MODE>(ctx, a, ci, units);
}

/* one launch of a in shape ci (g_gemv_cfg) over `units` units */
template <typename TO, int PRO, int MODE>
static void gemv_launch_ci(struct hb_ctx *ctx, gemv_args &a, int ci, int units) {
  const int nw = g_gemv_cfg[ci][0];
  int ring8, ring16;
  const int per_sm = gemv_per_sm(ctx, a.n, a.K, PRO, 8, &ring8), per_sm16 = gemv_per_sm(ctx, a.n, a.K, PRO, 16, &ring16);
  const int slots = ctx->n_sm * (nw == 8 ? per_sm : per_sm16);
  a.n_units = units;
  /* KS = 1: units are tiles, spread over all resident blocks (tile = block + grid * warp + ...) so
   * that every SM gets the same number of tiles, not whole 8-tile blocks */
  const int ks = g_gemv_cfg[ci][1], blocks = ks == 1 ? slots : units, nb = blocks < slots ? blocks : slots;
  a.ring = nw == 8 ? ring8 : ring16; /* 2 (gemv_ring) */
#if HEARTH_TRACE
  a.tr = ctx->tr_dev;
  a.tr_id = cu_trace_id(ctx, "gemv %s n%d %dx%d %d/%d r%d", MODE == GEMV_ROPE ? "qkv" : MODE == GEMV_GLU ? "glu" : PRO == PRO_NORM || PRO == PRO_ANORM ? "norm" : "plain",
                        a.n, a.rows_total, a.K, nw, ks, a.ring);
#endif
  const size_t sm = gemv_smem(a.n, a.K, PRO) + (size_t)nw * a.ring * GEMV_SLOT;
  const dim3 grid((unsigned)nb), block((unsigned)(nw * 32));
  /* two blocks on at least half of the SMs (the 12B's QKV: 256 blocks on 132 SMs; the E4B's 96 are not) */
  ctx->gemv_last_full = nw == 8 && per_sm >= 2 && 2 * (nb - ctx->n_sm) >= ctx->n_sm;
  int k = 0;
#define GEMV_LAUNCH(NW, KS) \
  if (ci == k++) gemv_launch_k<TO, PRO, KS, MODE, NW, 2>(ctx, grid, block, sm, a);
  GEMV_CONFIGS(GEMV_LAUNCH)
#undef GEMV_LAUNCH
}

/* the fused decode GEMV: returns 0 when it launched, 1 when the shapes need the general path */
static int gemv_fill(struct hb_ctx *ctx, gemv_args &a, int pro, const struct hb_tensor *x, const struct hb_tensor *x2,
                     const struct hb_tensor *nw, float eps, float off, int n_mm, struct hb_tensor *const *outs,
                     const struct hb_tensor *const *ws, const struct hb_tensor *const *biases, int n, int add) {
  /* step twins (gemv_twin_launch): any number of rows, in chunks, as the one-token launch would take them */
  const int tw = ctx->twin;
  if (ctx->exact || n < 1 || (n > 8 && !tw) || n_mm < 1 || n_mm > 3 || x->dtype != HB_F16 || x->cols % 8) return 1;
  if (ws[0]->cols % 128 || ws[0]->cols > GEMV_KMAX) return 1;
  if (!tw && n >= GEMV_XMAX_ROWS && (size_t)n * (size_t)ws[0]->cols * 2 > ctx->gemv_xmax) return 1;
  /* x etc. and at least a 2-step ring of 8 warps in one block (gemv_ring) */
  if (!gemv_ring(ctx, gemv_smem(tw ? 1 : n, ws[0]->cols, pro), 8, 1)) return 1;
  if (x->rows < n) return 1;
  if (x2 && (x2->dtype != HB_F16 || x2->cols != x->cols)) return 1;
  memset(&a, 0, sizeof a);
  a.x = (const __half *)x->data;
  a.x2 = x2 ? (const __half *)x2->data : NULL;
  a.ldx = x->cols;
  a.ldx2 = x->cols;
  a.nw = nw ? nw->data : NULL;
  a.nwdt = nw ? (int)nw->dtype : 0;
  a.eps = eps;
  a.off = off;
  a.n = n;
  a.n_mm = n_mm;
  a.K = (int)ws[0]->cols;
  a.add = add;
  enum hb_dtype odt = outs[0]->dtype;
  int r = 0;
  for (int i = 0; i < n_mm; i++) {
    const struct hb_tensor *w = ws[i];
    if (w->dtype != HB_Q4 || w->cols != a.K || outs[i]->dtype != odt || outs[i]->cols != w->rows ||
        (i < n_mm - 1 && w->rows % 16) || outs[i]->rows < n ||
        (biases && biases[i] && (biases[i]->dtype != HB_F32 || biases[i]->rows * biases[i]->cols != w->rows)))
      return 1;
    a.row0[i] = r;
    r += (int)w->rows;
    a.wq[i] = (const uint8_t *)w->data;
    a.ws[i] = (const __half *)w->aux;
    a.bias[i] = biases && biases[i] ? (const float *)biases[i]->data : NULL;
    a.out[i] = outs[i]->data;
    a.ldo[i] = outs[i]->cols;
  }
  for (int i = n_mm; i < 4; i++) a.row0[i] = r;
  a.rows_total = r;
  if (x->cols < a.K || (nw && nw->rows * nw->cols != a.K)) return 1;
  /* the norm weights travel by 16-byte cp.async (gemv_q4_kernel) */
  if (nw && (((uintptr_t)nw->data & 15) || (nw->dtype != HB_F32 && nw->dtype != HB_F16 && nw->dtype != HB_BF16))) return 1;
  return 0;
}

int cu_gemv_fused(struct hb_ctx *ctx, int pro, const struct hb_tensor *x, const struct hb_tensor *x2,
                  const struct hb_tensor *nw, float eps, float off, int n_mm, struct hb_tensor *const *outs,
                  const struct hb_tensor *const *ws, const struct hb_tensor *const *biases, int n, int add) {
  if (ctx->row_invariant) return 1; /* the decode kernels' numerics differ from the GEMM's */
  gemv_args a;
  if (gemv_fill(ctx, a, pro, x, x2, nw, eps, off, n_mm, outs, ws, biases, n, add)) return 1;
  const enum hb_dtype odt = outs[0]->dtype;
  if (odt == HB_F16) {
    if (pro == PRO_NORM) gemv_launch_t<__half, PRO_NORM>(ctx, a);
    else if (pro == PRO_SILU) gemv_launch_t<__half, PRO_SILU>(ctx, a);
    else gemv_launch_t<__half, PRO_PLAIN>(ctx, a);
  } else if (odt == HB_F32) {
    if (pro == PRO_NORM) gemv_launch_t<float, PRO_NORM>(ctx, a);
    else if (pro == PRO_SILU) gemv_launch_t<float, PRO_SILU>(ctx, a);
    else gemv_launch_t<float, PRO_PLAIN>(ctx, a);
  } else {
    return 1;
  }
  return 0;
}

/* norm + QKV GEMV with rope_neox on q/k and the k/v rows written straight into the paged cache:
 * returns 0 when it launched, 1 when the shapes need the separate ops */
int cu_gemv_qkv_rope_kv(struct hb_ctx *ctx, const struct hb_tensor *x, const struct hb_tensor *nw, float eps,
                        const struct hb_tensor *const *ws, const struct hb_tensor *const *biases, struct hb_tensor *q,
                        struct hb_kv_layer *kv, const struct hb_batch *b, int n_heads, float theta, int n) {
  if (ctx->row_invariant) return 1;
  const int hd = kv->head_dim, n_kv = kv->n_kv_heads;
  if (!b->d_pos.data || n != b->n_tokens || hd % 32 || hd > 256 || kv->k.dtype != HB_F16 || kv->v.dtype != HB_F16 ||
      q->dtype != HB_F16 || ws[0]->rows != (int64_t)n_heads * hd || ws[1]->rows != (int64_t)n_kv * hd ||
      ws[2]->rows != ws[1]->rows || kv->k.cols != ws[1]->rows)
    return 1;
  /* outs[1], outs[2] only fix the dtype/shape checks: the kernel writes k and v into the cache */
  struct hb_tensor k1 = *q, v1 = *q;
  k1.cols = v1.cols = ws[1]->rows;
  struct hb_tensor *outs[3] = {q, &k1, &v1};
  gemv_args a;
  if (gemv_fill(ctx, a, PRO_NORM, x, NULL, nw, eps, 0.0f, 3, outs, ws, biases, n, 0)) return 1;
  a.hd = hd;
  a.hds = (hd & (hd - 1)) ? -1 : __builtin_ctz((unsigned)hd);
  cu_rope_rinv(a.rinv, hd, theta);
  a.pos = (const int32_t *)b->d_pos.data;
  a.seq = (const int32_t *)b->d_seq.data;
  a.bt = (const int32_t *)b->d_block_table.data;
  a.max_blocks = b->max_blocks;
  a.bs = b->block_size;
  a.kc = (__half *)kv->k.data;
  a.vc = (__half *)kv->v.data;
  gemv_launch_t<__half, PRO_NORM, GEMV_ROPE>(ctx, a);
  return 0;
}

/* norm + gate/up GEMV with out = silu(gate) * up in the epilogue (one lane holds row i of both):
 * returns 0 when it launched, 1 when the shapes need the separate ops */
int cu_gemv_norm_swiglu(struct hb_ctx *ctx, const struct hb_tensor *x, const struct hb_tensor *nw, float eps,
                        const struct hb_tensor *w_gate, const struct hb_tensor *w_up, struct hb_tensor *out, int n,
                        int act) {
  if (ctx->row_invariant) return 1;
  if (w_gate->rows != w_up->rows || w_gate->rows % 16 || out->dtype != HB_F16) return 1;
  /* the second output only fixes gemv_fill's dtype/shape checks: the kernel writes out alone */
  struct hb_tensor u1 = *out;
  struct hb_tensor *outs[2] = {out, &u1};
  const struct hb_tensor *ws[2] = {w_gate, w_up};
  gemv_args a;
  if (gemv_fill(ctx, a, PRO_NORM, x, NULL, nw, eps, 0.0f, 2, outs, ws, NULL, n, 0)) return 1;
  a.act = act;
  gemv_launch_t<__half, PRO_NORM, GEMV_GLU>(ctx, a);
  return 0;
}

/* (gelu_tanh(gate) * up[:, up_col0 ..]) · wᵀ with the product made in the prologue (PRO_GELU), as gelu_mul + matmul
 * compute it: the PLE gate's GELU and its projection in one launch. Returns 0 when it launched, 1 when the shapes
 * need the separate ops. */
int cu_gemv_gelu_matmul(struct hb_ctx *ctx, struct hb_tensor *out, const struct hb_tensor *gate,
                        const struct hb_tensor *up, int up_col0, const struct hb_tensor *w, int n) {
  if (ctx->row_invariant || out->dtype != HB_F16 || up->dtype != HB_F16 || up_col0 < 0 || up_col0 % 8 ||
      up->cols % 8 || up_col0 + gate->cols > up->cols || up->rows < n)
    return 1;
  struct hb_tensor *outs[1] = {out};
  const struct hb_tensor *ws[1] = {w};
  gemv_args a;
  if (gemv_fill(ctx, a, PRO_GELU, gate, NULL, NULL, 0.0f, 0.0f, 1, outs, ws, NULL, n, 0)) return 1;
  a.x2 = (const __half *)up->data + up_col0; /* 16-byte aligned: up_col0 and the row stride are multiples of 8 */
  a.ldx2 = up->cols;
  gemv_launch_t<__half, PRO_GELU>(ctx, a);
  return 0;
}

/* norm_add folded into the GEMV after it (backend.h add_norm_matmul): xo = (x + rmsnorm(y) · aw) · s made by every
 * block in its prologue (gemv_add_pass; block 0 stores it to xo), then that GEMV's own prologue on xo: rmsnorm with nw
 * (PRO_ANORM) or none (PRO_APLAIN, nw NULL), and n_mm weights, or (act >= 0) the GLU epilogue of norm_swiglu with
 * ws = {gate, up} and outs[0] the product. Returns 0 when it launched, 1 when the shapes need the separate ops. */
#define ADD_FOLD_MAX_N 4
int cu_gemv_add_norm_matmul(struct hb_ctx *ctx, struct hb_tensor *xo, const struct hb_tensor *x,
                            const struct hb_tensor *y, const struct hb_tensor *aw, float s, const struct hb_tensor *nw,
                            float eps, int n_mm, struct hb_tensor *const *outs, const struct hb_tensor *const *ws,
                            int act, int n) {
  /* at most 4 rows: at 8 the folded prologue (every block making x' for 8 tokens) cost more than the launches it
   * saves — Gemma 4 E4B decode x8 1,272-1,281 tok/s folded against 1,545-1,547 with this limit, E2B 2,101-2,106
   * against 2,415-2,429; x1 and x4 the same either way (H200, session 28, bench/NOTES.md) */
  if (ctx->row_invariant || n < 1 || n > ADD_FOLD_MAX_N) return 1;
  const int64_t d = x->cols;
  if (x->dtype != HB_F16 || y->dtype != HB_F16 || xo->dtype != HB_F16 || y->cols != d || xo->cols != d ||
      y->rows < n || xo->rows < n || x->rows < n || aw->rows * aw->cols != d || ws[0]->cols != d ||
      (aw->dtype != HB_F32 && aw->dtype != HB_F16 && aw->dtype != HB_BF16) || xo->data == x->data ||
      outs[0]->dtype != HB_F16)
    return 1;
  const int glu = act >= 0;
  if (glu && (!nw || n_mm != 2 || ws[0]->rows != ws[1]->rows || ws[0]->rows % 16)) return 1;
  const int pro = nw ? PRO_ANORM : PRO_APLAIN;
  gemv_args a;
  struct hb_tensor u1;
  struct hb_tensor *go[2];
  if (glu) { /* as cu_gemv_norm_swiglu: the second output only fixes gemv_fill's checks */
    u1 = *outs[0];
    go[0] = outs[0];
    go[1] = &u1;
  }
  if (gemv_fill(ctx, a, pro, x, NULL, nw, eps, 0.0f, n_mm, glu ? go : outs, ws, NULL, n, 0)) return 1;
  a.y = (const __half *)y->data;
  a.ldy = y->cols;
  a.xout = (__half *)xo->data;
  a.aw = aw->data;
  a.awdt = (int)aw->dtype;
  a.sadd = s;
  a.act = act;
  if (glu) gemv_launch_t<__half, PRO_ANORM, GEMV_GLU>(ctx, a);
  else if (nw) gemv_launch_t<__half, PRO_ANORM>(ctx, a);
  else gemv_launch_t<__half, PRO_APLAIN>(ctx, a);
  return 0;
}
