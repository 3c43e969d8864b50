/* backend/cuda/decode_stack.cu — one decode token through a whole Qwen2-style layer stack in one persistent
 * launch (the decode_stack op of backend.h).
 *
 * Why: the five-kernel chain per layer (gemv_q4.cu, attention.cu) spends ~33 µs on a 3B layer whose weights take
 * ~9 µs to stream at 4.4 TB/s (bench/NOTES.md, rounds 10-20): each kernel's weight stream starts only at its launch
 * and stops at its end, and what lies between (the boundary, the x prologue, the tail) is paid in series five times
 * a layer. Here one block per SM lives for the whole step. Its producer warp streams the block's share of every
 * layer's weights, in the order the block will use them, into a ring of shared-memory slots by bulk copies on
 * mbarriers. It never waits for activations, so the stream runs on through the grid barriers between the phases, and
 * a phase finds most of its weights already on chip.
 *
 * The consumer warps run the phases of each layer, with a grid barrier after each (ds_grid_sync):
 *   QKV   rmsnorm(x) → q/k/v GEMV + bias, rope on q/k, q to a buffer and k/v into the paged cache
 *   ATTN  attention of the one token over the cache: block (head, split) → partial (m, l, acc); the last
 *         split of a head merges them into att (f16)
 *   O     x += att · Woᵀ
 *   GU    rmsnorm(x) → h = silu(x·Wgᵀ) · (x·Wuᵀ)
 *   DOWN  x += h · Wdᵀ
 * A GEMV phase gives each block a contiguous range of 16-row tiles (the host's plan, the same for every layer); the
 * block's T·S two-group steps are cut into NC equal runs, one per consumer warp, and the ring holds them round-robin
 * (warp w's r-th step at stream position r·NC + w), so that all warps work at once and every slot has exactly one
 * consumer. A step is gemv_q4.cu's: the weights are the mma A operand, x (f16, with the folded offset correction) the
 * B operand; only column 0 (the one token) is used. Partial tiles meet in shared memory and are emitted by one thread
 * per output pair.
 *
 * Numerics are gemv_q4.cu's and attention.cu's: f16 x and activations, int4 × f16 products exact, f32 sums and
 * softmax; only the order of the f32 sums differs. Cross-block data (x, q, att, h, the cache) is read with ld.cg
 * (L2), since L1 is not coherent between SMs and every block reads the same buffers again every layer.
 *
 * Status: experimental, off unless HEARTH_DECODE_STACK=1 (round 21: correct, but half the chain's speed; see
 * bench/NOTES.md for the stage times and what is left to try).
 *
 * Deadlock freedom: every block must be resident (grid = SMs, one block per SM, nothing else running beside it in
 * the decode stream); the producer waits only for slots its own consumers free, and each consumer warp takes its
 * slots in stream order. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/gemv_x.cuh"
#include "backend/cuda/ptx.cuh"

#define DS_NC 15 /* consumer warps per block: with the producer 16 warps, what 128 registers a thread allow (13 warps are
                  * allocated as 16: __maxnreg__(152) at 13 warps failed to launch, "too many resources") */
#define DS_CT (DS_NC * 32)         /* consumer threads */
#define DS_NT (DS_CT + 32)         /* + the producer warp */
#define DS_SLOT 2112               /* one step: lo weights of 2 groups (1 KB), hi (1 KB), scales lo h0 h1, hi h0 h1 */
#define DS_MAXT 20                 /* tiles per block and phase */
#define DS_KMAX 24576              /* widest x (d, heads × hd, ff) */
#define DS_NR 4                    /* x chunks per thread held in registers by the norm prologue: d <= 8 · 4 · DS_CT */
enum { DS_QKV = 0, DS_O = 1, DS_GU = 2, DS_DOWN = 3, DS_NPH = 4 };
/* the matrices of a layer */
enum { DM_Q = 0, DM_K, DM_V, DM_O, DM_G, DM_U, DM_D, DM_N };

/* a 16-row tile: its lo and hi 8-row blocks, as (matrix, first row); rhi < 0: no hi rows (the lo block is copied
 * there so the mma reads finite data; nothing is emitted from it) */
struct ds_tile {
  int mlo, rlo, mhi, rhi;
};
struct ds_layer {
  const uint8_t *wq[DM_N];
  const __half *ws[DM_N];
  const float *bias[3];
  const void *n_attn, *n_ffn;
  __half *kc, *vc;
};
struct ds_args {
  const ds_layer *layers;
  const ds_tile *plan; /* [gridDim.x][DS_NPH][DS_MAXT] */
  const int *plan_n;   /* [gridDim.x][DS_NPH] */
  int n_layers, d, H, KVH, hd, ff, nwdt, sa, ring, kmax;
  float eps, scale;
  __half *x, *q, *att, *h;
  float *part;   /* [H][sa][hd + 2]: acc, m, l */
  unsigned *cnt; /* [H]: splits done (the last resets it) */
  unsigned *bar; /* the grid barrier's counter (the last arrival of a launch resets it) */
  const int32_t *pos, *seq, *bt;
  int max_blocks, bs;
  /* measurement knobs (HEARTH_DS_ABL, bench only: the outputs are garbage): 1 no weight copies, 2 no step math,
   * 4 grid barriers that do not wait, 8 no attention */
  int abl;
  unsigned long long *ts; /* HEARTH_DS_TIME=1: [DS_NTS] sums of block 0's phase times (ns), else NULL */
  float rinv[128];
};
#define DS_NTS 24 /* 1..18 the stages of a layer, 20 producer's waits, 21 consumer warp 0's waits, 0 layers */

/* ---- PTX: named barriers and hinted loads (the mbarriers and bulk copies are in ptx.cuh) -------------- */
__device__ __forceinline__ float4 ds_ld4_h(const void *p, uint64_t pol) {
  float4 r;
#if HEARTH_L2_HINTS
  asm volatile("ld.global.L2::cache_hint.v4.f32 {%0,%1,%2,%3}, [%4], %5;" : "=f"(r.x), "=f"(r.y), "=f"(r.z), "=f"(r.w) : "l"(p), "l"(pol));
#else
  (void)pol;
  r = *(const float4 *)p;
#endif
  return r;
}
__device__ __forceinline__ uint4 ds_ldcg4_h(const void *p, uint64_t pol) {
  uint4 r;
#if HEARTH_L2_HINTS
  asm volatile("ld.global.cg.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p), "l"(pol));
#else
  (void)pol;
  r = __ldcg((const uint4 *)p);
#endif
  return r;
}
/* the consumer warps only (the producer never joins) */
__device__ __forceinline__ void ds_csync() { asm volatile("bar.sync 1, %0;" ::"n"(DS_CT) : "memory"); }
__device__ __forceinline__ unsigned ds_ld_acquire(const unsigned *p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ uint4 ds_ldcg4(const void *p) { return __ldcg((const uint4 *)p); }
__device__ __forceinline__ float ds_ldcg_h(const __half *p) { return __half2float(__ldcg(p)); }

/* all consumer threads of all blocks: every write before it (by any block) is visible after it. `last`: the
 * launch's final arrival, which nobody waits for; the block that arrives last resets the counter for the next launch
 * (every block has passed every earlier barrier by then, so no one is still reading it) */
__device__ __forceinline__ void ds_grid_sync(const ds_args &a, unsigned &nbar, bool last) {
  ds_csync();
  if (threadIdx.x == 0) {
    __threadfence();
    const unsigned old = atomicAdd(a.bar, 1u), target = (nbar + 1) * gridDim.x;
    if (last || (a.abl & 4)) {
      if (old + 1 == target) atomicExch(a.bar, 0u);
    } else {
      while (ds_ld_acquire(a.bar) < target) {}
      __threadfence();
    }
  }
  nbar++;
  if (!last) ds_csync();
}

__device__ __forceinline__ unsigned long long ds_now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
/* block 0, thread 0: the time since the last stamp, added to stage i */
__device__ __forceinline__ void ds_stamp(const ds_args &a, int i, unsigned long long &t) {
  if (a.ts && blockIdx.x == 0 && threadIdx.x == 0) {
    const unsigned long long n = ds_now();
    a.ts[i] += n - t;
    t = n;
  }
}

/* ---- shared memory ------------------------------------------------------------------------------------ */
struct ds_smem_layout {
  size_t xs, corr, red, plan, plan_n, mbar, ring, total;
};
__host__ __device__ inline ds_smem_layout ds_layout(int ring, int kmax) {
  ds_smem_layout L;
  L.xs = 0;                                        /* f16 x, gemv_q4.cu's swizzled order */
  L.corr = L.xs + (size_t)kmax * 2;                /* [K/128][16] f32 corrections (GEMV_CINIT) */
  L.red = L.corr + (size_t)(kmax / 128) * 16 * 4;  /* [DS_MAXT][DS_NC][16] partial tiles */
  L.plan = L.red + (size_t)DS_MAXT * DS_NC * 16 * 4;
  L.plan_n = L.plan + (size_t)DS_NPH * DS_MAXT * sizeof(ds_tile);
  L.mbar = L.plan_n + 64;
  L.ring = L.mbar + (size_t)ring * 16; /* full[ring], empty[ring] */
  L.ring = (L.ring + 127) / 128 * 128;
  L.total = L.ring + (size_t)ring * DS_SLOT;
  return L;
}

/* K of a phase's GEMV */
__device__ __forceinline__ int ds_K(const ds_args &a, int ph) {
  return ph == DS_O ? a.H * a.hd : ph == DS_DOWN ? a.ff : a.d;
}

/* a GEMV phase's shape in this block: T tiles of S two-group steps over G groups, R steps per consumer warp */
struct ds_shape {
  int T, G, S, TS, R;
};
__device__ __forceinline__ ds_shape ds_phase_shape(const ds_args &a, int ph, const int *plan_n) {
  ds_shape h;
  h.T = plan_n[ph];
  h.G = ds_K(a, ph) / 128;
  h.S = (h.G + 1) / 2;
  h.TS = h.T * h.S;
  h.R = (h.TS + DS_NC - 1) / DS_NC;
  return h;
}

/* ---- the producer ------------------------------------------------------------------------------------- */
/* the 32 lanes of the producer warp take the stream positions in turn (lane i the positions = i mod 32), each with its
 * own wait for the slot's last use: one thread issuing every slot's wait, expect and four copies in series held the
 * whole stack (bench/NOTES.md round 21, call 2: ~100-250 cycles a slot). No deadlock: a lane waits only for a slot's
 * use a ring before its position, and everything its consumer needs first lies before that (ring > 32) */
__device__ __noinline__ void ds_produce(const ds_args &a, const ds_tile *plan, const int *plan_n, uint8_t *ring, uint32_t mbar) {
  const uint32_t ring_s = smem_u32(ring);
  const int lane = threadIdx.x % 32;
  const uint64_t pol = l2_evict_first(1.0f);
  int64_t base = 0; /* the phase's first stream position */
  for (int l = 0; l < a.n_layers; l++) {
    const ds_layer *L = a.layers + l;
    for (int ph = 0; ph < DS_NPH; ph++) {
      const ds_shape sh = ds_phase_shape(a, ph, plan_n);
      const int G = sh.G, S = sh.S, TS = sh.TS, R = sh.R, n = R * DS_NC;
      for (int k = (int)((lane - base % 32 + 32) % 32); k < n; k += 32) {
        const int64_t pos = base + k;
        const int slot = (int)(pos % a.ring), lap = (int)(pos / a.ring);
        const uint32_t full = mbar + slot * 8, empty = mbar + (a.ring + slot) * 8;
        if (lap > 0) {
          const unsigned long long t0 = a.ts && blockIdx.x == 0 && lane == 0 ? ds_now() : 0;
          /* with a pause between probes: 32 lanes spinning on their slots slowed every consumer stage 1.5-2x
           * (call 4) */
          while (!mbar_test(empty, (lap - 1) & 1)) __nanosleep(128);
          if (a.ts && blockIdx.x == 0 && lane == 0) a.ts[20] += ds_now() - t0;
        }
        const int step = (k % DS_NC) * R + k / DS_NC;
        if (step < TS && !(a.abl & 1)) {
          const ds_tile t = plan[ph * DS_MAXT + step / S];
          const int g = (step % S) * 2, ng = g + 1 < G ? 2 : 1;
          const int rhi = t.rhi >= 0 ? t.rhi : t.rlo, mhi = t.rhi >= 0 ? t.mhi : t.mlo;
          const uint32_t dst = ring_s + slot * DS_SLOT;
          mbar_expect(full, (uint32_t)ng * (1024 + 32));
          bulk_g2s_h(dst, L->wq[t.mlo] + q4_off(t.rlo, g, G), ng * 512, full, pol);
          bulk_g2s_h(dst + 1024, L->wq[mhi] + q4_off(rhi, g, G), ng * 512, full, pol);
          bulk_g2s_h(dst + 2048, L->ws[t.mlo] + q4_soff(t.rlo, g, G), ng * 16, full, pol);
          bulk_g2s_h(dst + 2048 + 32, L->ws[mhi] + q4_soff(rhi, g, G), ng * 16, full, pol);
        } else {
          mbar_arrive(full); /* a padding step: nothing to copy, the consumer only frees it */
        }
      }
      base += n;
    }
  }
}

/* ---- consumer pieces ---------------------------------------------------------------------------------- */
/* chunk c (8 elements) of x into the swizzled shared order (gemv_x.cuh, one token); returns its share of the
 * group's folded-offset correction (odd chunks are stored / 16) */
__device__ __forceinline__ float ds_put(__half *xs, int c, uint4 v) {
  const int R = c / 4, sw = gemv_swz(R, 0);
  uint32_t *run = (uint32_t *)(xs + R * 32);
  return gemv_put_chunk<true>(run, c, sw, v);
}
/* the 16 chunks of a group sit in 16 aligned lanes (c = c0 + thread, DS_CT a multiple of 16): their correction
 * summed by shuffles and stored negated for token 0 (columns 0 and 2 of the float4 of tig 0) */
__device__ __forceinline__ void ds_corr(float *corr, int c, float cs, bool live) {
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) cs += __shfl_xor_sync(0xffffffffu, cs, o);
  if (live && (threadIdx.x & 15) == 0) {
    corr[(c / 16) * 16] = -cs;
    corr[(c / 16) * 16 + 2] = -cs;
  }
}
/* x (f16 [K], written by other blocks) → shared, with rmsnorm by nw when given (then K / 8 <= DS_NR · DS_CT, the
 * host checks). All of a thread's x chunks and norm weights are loaded before any is used: one L2 round trip, not one
 * per chunk (round 21, call 2: the prologues took 1.5-3 µs with the loads in series) */
__device__ __noinline__ void ds_prep(const ds_args &a, __half *xs, float *corr, const __half *src, int K, const void *nw, float *s_red) {
  const int nch = K / 8, tid = threadIdx.x;
  const bool nwf = nw && a.nwdt == HB_F32;
  const uint64_t pk = l2_evict_last(1.0f);
  for (int c0 = 0; c0 < nch; c0 += DS_NR * DS_CT) { /* uniform */
    uint4 v[DS_NR];
    float4 w0[DS_NR], w1[DS_NR];
#pragma unroll
    for (int k = 0; k < DS_NR; k++) {
      const int c = c0 + tid + k * DS_CT;
      if (c < nch) {
        v[k] = ds_ldcg4(src + c * 8);
        if (nwf) {
          w0[k] = ds_ld4_h((const float4 *)nw + 2 * c, pk);
          w1[k] = ds_ld4_h((const float4 *)nw + 2 * c + 1, pk);
        }
      }
    }
    float inv = 1.0f;
    if (nw) {
      float ss = 0.0f;
#pragma unroll
      for (int k = 0; k < DS_NR; k++) {
        if (c0 + tid + k * DS_CT < nch) {
          const __half2 *h = (const __half2 *)&v[k];
#pragma unroll
          for (int e = 0; e < 4; e++) {
            const float2 f = __half22float2(h[e]);
            ss += f.x * f.x + f.y * f.y;
          }
        }
      }
      ss = warp_sum(ss);
      if ((tid & 31) == 0) s_red[tid / 32] = ss;
      ds_csync();
      float tot = 0.0f;
#pragma unroll
      for (int w = 0; w < DS_NC; w++) tot += s_red[w];
      inv = rsqrtf(tot / (float)K + a.eps);
    }
#pragma unroll
    for (int k = 0; k < DS_NR; k++) {
      if (c0 + k * DS_CT >= nch) break; /* uniform */
      const int c = c0 + tid + k * DS_CT;
      const bool live = c < nch;
      float cs = 0.0f;
      if (live) {
        if (nw) {
          __half2 *h = (__half2 *)&v[k];
          float wv[8];
          if (nwf) {
            wv[0] = w0[k].x; wv[1] = w0[k].y; wv[2] = w0[k].z; wv[3] = w0[k].w;
            wv[4] = w1[k].x; wv[5] = w1[k].y; wv[6] = w1[k].z; wv[7] = w1[k].w;
          } else {
#pragma unroll
            for (int e = 0; e < 8; e++) wv[e] = ld_any(nw, a.nwdt, c * 8 + e);
          }
#pragma unroll
          for (int e = 0; e < 4; e++) {
            const float2 f = __half22float2(h[e]);
            h[e] = __floats2half2_rn(f.x * inv * wv[2 * e], f.y * inv * wv[2 * e + 1]);
          }
        }
        cs = ds_put(xs, c, v[k]);
      }
      ds_corr(corr, c, cs, live);
    }
  }
  ds_csync();
}

/* a GEMV phase's steps for consumer warp w; partial tiles into red. slot/par: the phase's first stream position */
__device__ __noinline__ void ds_gemv(const ds_args &a, int ph, const int *plan_n, const __half *xs, const float *corr, float *red,
                        const uint8_t *ring, uint32_t mbar, int &slot0, int &par0) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gid = lane / 4, tig = lane % 4;
  const ds_shape sh = ds_phase_shape(a, ph, plan_n);
  const int G = sh.G, S = sh.S, TS = sh.TS, R = sh.R;
  int slot = slot0 + warp, par = par0;
  if (slot >= a.ring) { slot -= a.ring; par ^= 1; }
  const __half *xlane = xs + tig * 32;
  const int xsw0 = (tig >> 1) & 3, xsw1 = xsw0 ^ 2;
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  int cur = -1;
  for (int r = 0; r < R; r++) {
    const int step = warp * R + r;
    const uint32_t full = mbar + slot * 8, empty = mbar + (a.ring + slot) * 8;
    if (a.ts && blockIdx.x == 0 && threadIdx.x == 0) {
      const unsigned long long t0 = ds_now();
      mbar_wait(full, par);
      a.ts[21] += ds_now() - t0;
    } else {
      mbar_wait(full, par);
    }
    if (step < TS && !(a.abl & 2)) {
      const int tile = step / S, j = step % S;
      if (tile != cur) {
        if (cur >= 0 && tig == 0) {
          red[(cur * DS_NC + warp) * 16 + gid] = acc[0];
          red[(cur * DS_NC + warp) * 16 + 8 + gid] = acc[2];
        }
#pragma unroll
        for (int e = 0; e < 4; e++) acc[e] = 0.0f;
        cur = tile;
      }
      const uint8_t *sb = ring + slot * DS_SLOT;
      uint4 W0[2], W8[2];
      __half S0[2], S8[2];
#pragma unroll
      for (int h = 0; h < 2; h++) {
        W0[h] = *(const uint4 *)(sb + h * 512 + lane * 16);
        W8[h] = *(const uint4 *)(sb + 1024 + h * 512 + lane * 16);
        S0[h] = *(const __half *)(sb + 2048 + h * 16 + gid * 2);
        S8[h] = *(const __half *)(sb + 2048 + 32 + h * 16 + gid * 2);
      }
      __syncwarp();
      if (lane == 0) mbar_arrive(empty);
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const int g = 2 * j + h;
        if (g >= G) break; /* uniform */
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
        const uint4 *xp = (const uint4 *)(xlane + g * 128);
        const int sw = (h & 1) ? xsw1 : xsw0;
        uint4 xv[4];
#pragma unroll
        for (int c = 0; c < 4; c++) xv[c] = xp[c ^ sw];
        float c4[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
        {
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
    } else {
      __syncwarp();
      if (lane == 0) mbar_arrive(empty);
    }
    slot += DS_NC;
    if (slot >= a.ring) { slot -= a.ring; par ^= 1; }
  }
  if (cur >= 0 && tig == 0) {
    red[(cur * DS_NC + warp) * 16 + gid] = acc[0];
    red[(cur * DS_NC + warp) * 16 + 8 + gid] = acc[2];
  }
  /* the next phase starts R·NC positions on */
  slot0 += R * DS_NC;
  while (slot0 >= a.ring) { slot0 -= a.ring; par0 ^= 1; }
  ds_csync();
}

/* the phase's outputs: one thread per (tile, lane group p) sums the tile's partials over the warps that had it */
__device__ __noinline__ void ds_emit(const ds_args &a, int ph, const ds_layer &L, const ds_tile *plan, const int *plan_n,
                        const float *red, int ps, int64_t kslot) {
  const ds_shape sh = ds_phase_shape(a, ph, plan_n);
  const int T = sh.T, S = sh.S, R = sh.R;
  for (int o = threadIdx.x; o < T * 8; o += DS_CT) {
    const int ti = o / 8, p = o % 8;
    const int w0 = ti * S / R, w1 = ((ti + 1) * S - 1) / R;
    float vl = 0.0f, vh = 0.0f;
    for (int w = w0; w <= w1; w++) {
      vl += red[(ti * DS_NC + w) * 16 + p];
      vh += red[(ti * DS_NC + w) * 16 + 8 + p];
    }
    const ds_tile t = plan[ph * DS_MAXT + ti];
    const int lo = t.rlo + p, hi = t.rhi + p;
    if (ph == DS_QKV) {
      const int m = t.mlo; /* q, k or v: whole heads, so rhi >= 0 */
      const uint64_t pk = l2_evict_last(1.0f);
      vl += ld_f32_h(L.bias[m] + lo, pk);
      vh += ld_f32_h(L.bias[m] + hi, pk);
      if (m < 2) {
        float sn, cs;
        sincosf((float)ps * a.rinv[lo % a.hd], &sn, &cs);
        const float x0 = vl, x1 = vh;
        vl = x0 * cs - x1 * sn;
        vh = x1 * cs + x0 * sn;
      }
      if (m == 0) {
        a.q[lo] = __float2half_rn(vl);
        a.q[hi] = __float2half_rn(vh);
      } else {
        __half *cp = (m == 1 ? L.kc : L.vc) + kslot * (int64_t)(a.KVH * a.hd);
        cp[lo] = __float2half_rn(vl);
        cp[hi] = __float2half_rn(vh);
      }
    } else if (ph == DS_GU) {
      a.h[lo] = __float2half_rn(vl / (1.0f + expf(-vl)) * vh);
    } else { /* O, DOWN: the residual */
      a.x[lo] = __float2half_rn(ds_ldcg_h(a.x + lo) + vl);
      if (t.rhi >= 0) a.x[hi] = __float2half_rn(ds_ldcg_h(a.x + hi) + vh);
    }
  }
}

/* the token's cache slot of position p */
__device__ __forceinline__ int64_t ds_slot(const ds_args &a, int seq, int p) {
  return (int64_t)a.bt[(int64_t)seq * a.max_blocks + p / a.bs] * a.bs + p % a.bs;
}

/* attention of the one token over keys 0..ps of its sequence. sae = the splits this step uses: one per head while
 * the keys fit one pass of DS_CT (then the block writes att itself, no merge), more for longer sequences (up to sa,
 * task (head, split) per block). Keys in passes of DS_CT with an online softmax: one thread per key for the score,
 * then p·V by threads of (8 dimensions, key subset), one 16-byte load per key each, summed over the subsets in `pv`
 * (red's space, free during attention). The last split of a head to finish merges the head's partials into att. */
/* the phase functions are not inlined: each gets its own register allocation (inlined, the attention's and the
 * prologue's arrays spilled inside the step loop's budget) */
__device__ __noinline__ void ds_attention(const ds_args &a, const ds_layer &L, int ps, int seq, float *sm, float *pv) {
  const int tid = threadIdx.x, hd = a.hd, nkv = a.KVH * hd, Lk = ps + 1;
  float *qf = sm;                 /* [hd] */
  float *pr = qf + 256;           /* [DS_CT] probabilities of the pass */
  float *wred = pr + DS_CT;       /* [DS_NC] */
  __shared__ unsigned s_last;
  __shared__ int64_t s_kslot[DS_CT]; /* the pass's keys' cache rows (the p·V loop reads them again) */
  const int need = (Lk + DS_CT - 1) / DS_CT, sae = need < a.sa ? need : a.sa;
  const uint64_t pk = l2_evict_last(1.0f); /* the cache stays in L2 beside the weight stream (evict_first) */
  const int chunk = (Lk + sae - 1) / sae;
  const int ndc = hd / 8, nkg = DS_CT / ndc, dc = tid % ndc, kg = tid / ndc; /* p·V: dims 8 dc.., keys kg mod nkg */
  for (int task = blockIdx.x; task < a.H * sae; task += gridDim.x) {
    const int hh = task / sae, sp = task % sae, g = hh / (a.H / a.KVH);
    const int k0 = sp * chunk, k1 = min(Lk, k0 + chunk);
    if (tid < hd) qf[tid] = ds_ldcg_h(a.q + hh * hd + tid);
    ds_csync();
    float m = -INFINITY, l = 0.0f, acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    for (int p0 = k0; p0 < k1; p0 += DS_CT) {
      const int p = p0 + tid;
      float s = -INFINITY;
      if (p < k1) {
        const int64_t ks = ds_slot(a, seq, p) * nkv + g * hd;
        s_kslot[tid] = ks;
        const __half *kr = L.kc + ks;
        float dot = 0.0f;
        for (int i0 = 0; i0 < hd / 8; i0 += 16) { /* 16 loads in flight (hd 128: all of the row) */
          uint4 kv[16];
#pragma unroll
          for (int i = 0; i < 16; i++)
            if (i0 + i < hd / 8) kv[i] = ds_ldcg4_h(kr + 8 * (i0 + i), pk);
#pragma unroll
          for (int i = 0; i < 16; i++) {
            if (i0 + i >= hd / 8) break;
            const __half2 *k2 = (const __half2 *)&kv[i];
#pragma unroll
            for (int e = 0; e < 4; e++) {
              const float2 f = __half22float2(k2[e]);
              dot = fmaf(f.x, qf[8 * (i0 + i) + 2 * e], dot);
              dot = fmaf(f.y, qf[8 * (i0 + i) + 2 * e + 1], dot);
            }
          }
        }
        s = dot * a.scale;
      }
      float mx = warp_max(s);
      if ((tid & 31) == 0) wred[tid / 32] = mx;
      ds_csync();
      mx = m;
#pragma unroll
      for (int w = 0; w < DS_NC; w++) mx = fmaxf(mx, wred[w]);
      const float pe = p < k1 ? expf(s - mx) : 0.0f;
      pr[tid] = pe;
      float ls = warp_sum(pe);
      ds_csync(); /* wred read by all before it is reused; pr and s_kslot written */
      if ((tid & 31) == 0) wred[tid / 32] = ls;
      const float corr = expf(m - mx); /* m = -inf on the first pass: 0 */
#pragma unroll
      for (int e = 0; e < 8; e++) acc[e] *= corr;
      const int np = min(DS_CT, k1 - p0);
#pragma unroll 4
      for (int k = kg; k < np; k += nkg) {
        const uint4 vv = ds_ldcg4_h(L.vc + s_kslot[k] + dc * 8, pk);
        const __half2 *v2 = (const __half2 *)&vv;
        const float pk = pr[k];
#pragma unroll
        for (int e = 0; e < 4; e++) {
          const float2 f = __half22float2(v2[e]);
          acc[2 * e] = fmaf(pk, f.x, acc[2 * e]);
          acc[2 * e + 1] = fmaf(pk, f.y, acc[2 * e + 1]);
        }
      }
      ds_csync();
      ls = 0.0f;
#pragma unroll
      for (int w = 0; w < DS_NC; w++) ls += wred[w];
      l = l * corr + ls;
      m = mx;
      ds_csync(); /* pr, s_kslot and wred reused by the next pass */
    }
#pragma unroll
    for (int e = 0; e < 8; e++) pv[kg * hd + dc * 8 + e] = acc[e];
    ds_csync();
    float o = 0.0f;
    if (tid < hd)
      for (int k = 0; k < nkg; k++) o += pv[k * hd + tid];
    if (sae == 1) {
      if (tid < hd) a.att[hh * hd + tid] = __float2half_rn(o / l);
      ds_csync();
      continue;
    }
    float *pp = a.part + (size_t)task * (hd + 2);
    if (tid < hd) pp[tid] = o;
    if (tid == 0) {
      pp[hd] = m;
      pp[hd + 1] = l;
    }
    ds_csync();
    if (tid == 0) {
      __threadfence();
      s_last = atomicAdd(a.cnt + hh, 1u) + 1 == (unsigned)sae;
      if (s_last) __threadfence();
    }
    ds_csync();
    if (s_last) { /* merge the head's splits (empty ones have m = -inf, l = 0) */
      const float *hp = a.part + (size_t)hh * sae * (hd + 2);
      float M = -INFINITY;
      for (int s2 = 0; s2 < sae; s2++) M = fmaxf(M, __ldcg(hp + s2 * (hd + 2) + hd));
      if (tid < hd) {
        float num = 0.0f, den = 0.0f;
        for (int s2 = 0; s2 < sae; s2++) {
          const float ms = __ldcg(hp + s2 * (hd + 2) + hd);
          const float w = ms == -INFINITY ? 0.0f : expf(ms - M);
          num = fmaf(w, __ldcg(hp + s2 * (hd + 2) + tid), num);
          den = fmaf(w, __ldcg(hp + s2 * (hd + 2) + hd + 1), den);
        }
        a.att[hh * hd + tid] = __float2half_rn(num / den);
      }
      if (tid == 0) a.cnt[hh] = 0;
    }
    ds_csync();
  }
}

__global__ __launch_bounds__(DS_NT, 1) void ds_kernel(const __grid_constant__ ds_args a) {
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ float s_att[256 + DS_CT + DS_NC];
  __shared__ float s_red[DS_NC];
  const ds_smem_layout SL = ds_layout(a.ring, a.kmax);
  __half *xs = (__half *)(smem + SL.xs);
  float *corr = (float *)(smem + SL.corr), *red = (float *)(smem + SL.red);
  ds_tile *plan = (ds_tile *)(smem + SL.plan);
  int *plan_n = (int *)(smem + SL.plan_n);
  uint8_t *ring = smem + SL.ring;
  const uint32_t mbar = smem_u32(smem + SL.mbar);
  const int tid = threadIdx.x;
  for (int i = tid; i < DS_NPH * DS_MAXT; i += DS_NT) plan[i] = a.plan[(size_t)blockIdx.x * DS_NPH * DS_MAXT + i];
  if (tid < DS_NPH) plan_n[tid] = a.plan_n[blockIdx.x * DS_NPH + tid];
  for (int i = tid; i < (a.kmax / 128) * 16; i += DS_NT) corr[i] = 0.0f; /* the columns past token 0 stay 0 */
  if (tid < a.ring) {
    mbar_init(mbar + tid * 8);
    mbar_init(mbar + (a.ring + tid) * 8);
  }
  mbar_fence_init();
  __syncthreads();
  if (tid >= DS_CT) { /* the producer warp */
    ds_produce(a, plan, plan_n, ring, mbar);
    return;
  }
  const int ps = a.pos[0], seq = a.seq[0];
  const int64_t kslot = ds_slot(a, seq, ps);
  unsigned nbar = 0;
  int slot0 = 0, par0 = 0;
  unsigned long long t = a.ts && blockIdx.x == 0 && tid == 0 ? ds_now() : 0;
  /* one GEMV phase: x into shared memory, the steps, the outputs, the grid barrier; stamps st..st + 3 */
  auto phase = [&](const ds_layer &L, int ph, const __half *src, int K, const void *nw, int st, bool last) {
    ds_prep(a, xs, corr, src, K, nw, s_red);
    ds_stamp(a, st, t);
    ds_gemv(a, ph, plan_n, xs, corr, red, ring, mbar, slot0, par0);
    ds_stamp(a, st + 1, t);
    ds_emit(a, ph, L, plan, plan_n, red, ps, kslot);
    ds_stamp(a, st + 2, t);
    ds_grid_sync(a, nbar, last);
    ds_stamp(a, st + 3, t);
  };
  for (int l = 0; l < a.n_layers; l++) {
    const ds_layer &L = a.layers[l];
    phase(L, DS_QKV, a.x, a.d, L.n_attn, 1, false);
    if (!(a.abl & 8)) ds_attention(a, L, ps, seq, s_att, red);
    ds_stamp(a, 5, t);
    ds_grid_sync(a, nbar, false);
    ds_stamp(a, 6, t);
    phase(L, DS_O, a.att, a.H * a.hd, NULL, 7, false);
    phase(L, DS_GU, a.x, a.d, L.n_ffn, 11, false);
    phase(L, DS_DOWN, a.h, a.ff, NULL, 15, l == a.n_layers - 1);
    if (a.ts && blockIdx.x == 0 && tid == 0) a.ts[0]++;
  }
}

/* ---- host ------------------------------------------------------------------------------------------------ */

/* the per-model state: the layer table and the plan on the device, built on the first (uncaptured) call */
struct ds_state {
  const void *key; /* layer 0's wq data: the model this was built for */
  int n_layers, n_sm;
  ds_layer *layers;
  ds_tile *plan;
  int *plan_n;
  __half *q, *att, *h;
  float *part;
  unsigned *cnt, *bar;
  int ring, kmax, sa; /* ring slots, the widest x, attention splits per head at most */
  unsigned long long *ts; /* HEARTH_DS_TIME=1 */
  int abl;
};
/* the context's state (ctx->ds), made on first use; cu_decode_stack_free releases it with the context */
static ds_state *ds_get(struct hb_ctx *ctx) {
  if (!ctx->ds) ctx->ds = calloc(1, sizeof(ds_state));
  return (ds_state *)ctx->ds;
}
static void ds_release(ds_state &s) {
  cudaFree(s.layers); cudaFree(s.plan); cudaFree(s.plan_n); cudaFree(s.q); cudaFree(s.att); cudaFree(s.h);
  cudaFree(s.part); cudaFree(s.cnt); cudaFree(s.bar); cudaFree(s.ts);
  memset(&s, 0, sizeof s);
}

/* HEARTH_DECODE_STACK=1 turns the stack on; 2 also makes a one-token step whose shapes it does not cover an error
 * instead of a fall-back to the chain (the tests: a run that falls back would pass without testing the stack). It
 * is off by default: round 21 measured it at half the per-layer chain's speed (3B 424 against 855 tok/s, 0.5B 934
 * against 1,969; bench/NOTES.md), so the product path stays the chain */
static int ds_mode(void) {
  const char *e = getenv("HEARTH_DECODE_STACK");
  return e && (*e == '1' || *e == '2') ? *e - '0' : 0;
}
/* whether the kernel covers these shapes (every layer's weights, biases, norms and cache) */
static int ds_covers(struct hb_ctx *ctx, const struct hb_tensor *x, const struct hb_stack_layer *ls, int n_layers,
                     const struct hb_attn_params *p) {
  const int d = (int)x->cols, H = p->n_heads, KVH = p->n_kv_heads, hd = p->head_dim;
  const int ff = (int)ls[0].w_gate->rows;
  if (p->window || p->softcap != 0.0f || hd % 32 || hd > 256 || d % 128 || ff % 128 || (H * hd) % 128 || H % KVH ||
      d > DS_KMAX || ff > DS_KMAX || H * hd > DS_KMAX || d / 8 > DS_NR * DS_CT)
    return 0;
  for (int i = 0; i < n_layers; i++) {
    const struct hb_stack_layer *L = &ls[i];
    const struct hb_tensor *w[DM_N] = {L->wq, L->wk, L->wv, L->wo, L->w_gate, L->w_up, L->w_down};
    const int64_t rows[DM_N] = {H * hd, KVH * hd, KVH * hd, d, ff, ff, d}, cols[DM_N] = {d, d, d, H * hd, d, d, ff};
    for (int m = 0; m < DM_N; m++)
      if (w[m]->dtype != HB_Q4 || w[m]->rows != rows[m] || w[m]->cols != cols[m]) return 0;
    if (!L->bq || !L->bk || !L->bv || L->bq->dtype != HB_F32 || L->bk->dtype != HB_F32 || L->bv->dtype != HB_F32) return 0;
    if (L->attn_norm->dtype != L->ffn_norm->dtype || L->attn_norm->dtype != ls[0].attn_norm->dtype) return 0;
    if (L->kv->k.dtype != HB_F16 || L->kv->v.dtype != HB_F16 || L->kv->head_dim != hd || L->kv->n_kv_heads != KVH) return 0;
  }
  static int launchable = -1; /* the kernel fits a block of DS_NT threads on this device */
  if (launchable < 0) {
    cudaFuncAttributes fa;
    launchable = cudaFuncGetAttributes(&fa, ds_kernel) == cudaSuccess && fa.maxThreadsPerBlock >= DS_NT;
    cudaGetLastError();
  }
  const int nb = ctx->n_sm;
  return launchable && ctx->cc_major >= 9 && (ff / 8 + nb - 1) / nb <= DS_MAXT &&
         (H * hd / 16 + 2 * KVH * hd / 16 + nb - 1) / nb <= DS_MAXT;
}

/* contiguous ranges of a phase's tiles per block */
static void ds_split(ds_tile *plan, int *plan_n, int nb, int ph, const ds_tile *tiles, int nt) {
  for (int b = 0; b < nb; b++) {
    const int t0 = (int)((int64_t)nt * b / nb), t1 = (int)((int64_t)nt * (b + 1) / nb);
    plan_n[b * DS_NPH + ph] = t1 - t0;
    for (int i = t0; i < t1; i++) plan[((size_t)b * DS_NPH + ph) * DS_MAXT + (i - t0)] = tiles[i];
  }
}

static int ds_build(struct hb_ctx *ctx, const struct hb_stack_layer *ls, int n_layers, int d, int H, int KVH, int hd, int ff) {
  ds_state *sp = ds_get(ctx);
  if (!sp) {
    CU_ARG(ctx, "decode_stack: out of host memory");
    return 1;
  }
  ds_state &s = *sp;
  if (s.key == ls[0].wq->data && s.n_layers == n_layers && s.n_sm == ctx->n_sm) return 0;
  if (ctx->capturing) {
    CU_ARG(ctx, "decode_stack: first call inside a graph capture");
    return 1;
  }
  if (CU_OK(ctx, cudaStreamSynchronize(ctx->stream))) return 1;
  if (s.key) ctx->gen++; /* buffers a captured graph may name are about to move: graphs go stale */
  ds_release(s);
  const int nb = ctx->n_sm, sa = nb / H > 0 ? nb / H : 1;
  /* the tiles of each phase */
  const int nq = H * hd / 16, nk = KVH * hd / 16, no = (d + 15) / 16, ngu = ff / 8, nd = (d + 15) / 16;
  const int nmax = nq + 2 * nk > ngu ? nq + 2 * nk : ngu;
  ds_tile *tiles = (ds_tile *)calloc((size_t)nmax + no + nd, sizeof *tiles);
  ds_tile *plan = (ds_tile *)calloc((size_t)nb * DS_NPH * DS_MAXT, sizeof *plan);
  int *plan_n = (int *)calloc((size_t)nb * DS_NPH, sizeof *plan_n);
  ds_layer *lt = (ds_layer *)calloc((size_t)n_layers, sizeof *lt);
  int bad = !tiles || !plan || !plan_n || !lt;
  if (!bad) {
    int n = 0;
    const int per = hd / 16;
    for (int m = 0; m < 2; m++) /* q, k: rotation pairs (i, i + hd/2) of a head, i = 8 (tile in head) + lane group */
      for (int t = 0; t < (m == 0 ? nq : nk); t++) {
        const int lo = (t / per) * hd + (t % per) * 8;
        tiles[n++] = ds_tile{m, lo, m, lo + hd / 2};
      }
    for (int t = 0; t < nk; t++) tiles[n++] = ds_tile{DM_V, 16 * t, DM_V, 16 * t + 8};
    ds_split(plan, plan_n, nb, DS_QKV, tiles, n);
    n = 0;
    for (int t = 0; t < no; t++) tiles[n++] = ds_tile{DM_O, 16 * t, DM_O, 16 * t + 8 < d ? 16 * t + 8 : -1};
    ds_split(plan, plan_n, nb, DS_O, tiles, n);
    n = 0;
    for (int t = 0; t < ngu; t++) tiles[n++] = ds_tile{DM_G, 8 * t, DM_U, 8 * t};
    ds_split(plan, plan_n, nb, DS_GU, tiles, n);
    n = 0;
    for (int t = 0; t < nd; t++) tiles[n++] = ds_tile{DM_D, 16 * t, DM_D, 16 * t + 8 < d ? 16 * t + 8 : -1};
    ds_split(plan, plan_n, nb, DS_DOWN, tiles, n);
    for (int i = 0; i < n_layers; i++) {
      const struct hb_stack_layer *L = &ls[i];
      const struct hb_tensor *w[DM_N] = {L->wq, L->wk, L->wv, L->wo, L->w_gate, L->w_up, L->w_down};
      for (int m = 0; m < DM_N; m++) {
        lt[i].wq[m] = (const uint8_t *)w[m]->data;
        lt[i].ws[m] = (const __half *)w[m]->aux;
      }
      lt[i].bias[0] = (const float *)L->bq->data;
      lt[i].bias[1] = (const float *)L->bk->data;
      lt[i].bias[2] = (const float *)L->bv->data;
      lt[i].n_attn = L->attn_norm->data;
      lt[i].n_ffn = L->ffn_norm->data;
      lt[i].kc = (__half *)L->kv->k.data;
      lt[i].vc = (__half *)L->kv->v.data;
    }
  }
  const size_t npl = (size_t)nb * DS_NPH * DS_MAXT;
  if (bad || CU_OK(ctx, cudaMalloc(&s.layers, n_layers * sizeof(ds_layer))) || CU_OK(ctx, cudaMalloc(&s.plan, npl * sizeof(ds_tile))) ||
      CU_OK(ctx, cudaMalloc(&s.plan_n, (size_t)nb * DS_NPH * sizeof(int))) || CU_OK(ctx, cudaMalloc(&s.q, (size_t)H * hd * 2)) ||
      CU_OK(ctx, cudaMalloc(&s.att, (size_t)H * hd * 2)) || CU_OK(ctx, cudaMalloc(&s.h, (size_t)ff * 2)) ||
      CU_OK(ctx, cudaMalloc(&s.part, (size_t)H * sa * (hd + 2) * 4)) || CU_OK(ctx, cudaMalloc(&s.cnt, (size_t)H * 4)) ||
      CU_OK(ctx, cudaMalloc(&s.bar, 4)) ||
      CU_OK(ctx, cudaMemcpy(s.layers, lt, n_layers * sizeof(ds_layer), cudaMemcpyHostToDevice)) ||
      CU_OK(ctx, cudaMemcpy(s.plan, plan, npl * sizeof(ds_tile), cudaMemcpyHostToDevice)) ||
      CU_OK(ctx, cudaMemcpy(s.plan_n, plan_n, (size_t)nb * DS_NPH * sizeof(int), cudaMemcpyHostToDevice)) ||
      CU_OK(ctx, cudaMemset(s.cnt, 0, (size_t)H * 4)) || CU_OK(ctx, cudaMemset(s.bar, 0, 4))) {
    if (bad) CU_ARG(ctx, "decode_stack: out of host memory");
    free(tiles); free(plan); free(plan_n); free(lt);
    return 1;
  }
  free(tiles); free(plan); free(plan_n); free(lt);
  ctx->bytes_scratch += npl * sizeof(ds_tile) + (size_t)H * sa * (hd + 2) * 4 + ((size_t)2 * H * hd + ff) * 2;
  /* the ring: what is left of the block's shared memory beside the static part */
  int kmax = d > ff ? d : ff;
  if (H * hd > kmax) kmax = H * hd;
  cudaFuncAttributes fa;
  if (CU_OK(ctx, cudaFuncGetAttributes(&fa, ds_kernel))) return 1;
  /* the block's shared memory, at most HEARTH_DS_SMEM_KB (default: all a block may have): the rest of the SM's 256 KB is
   * L1, which holds the spills, the stack of the phase calls and the layer table. Round 22: a 3B run at 164 KB (52
   * slots, then the default) printed no result, for a reason not looked into (a bench log that did not come back); at
   * the maximum it ran as in round 21 (426 tok/s) */
  const char *sk = getenv("HEARTH_DS_SMEM_KB");
  size_t cap = sk && *sk ? (size_t)atoi(sk) * 1024 : ctx->smem_optin;
  if (cap > ctx->smem_optin) cap = ctx->smem_optin;
  int ring = 0;
  while (ds_layout(ring + 1, kmax).total + fa.sharedSizeBytes <= cap) ring++;
  if (ring < 40) { /* ds_produce needs more than 32 */
    CU_ARG(ctx, "decode_stack: %d ring slots fit in shared memory, 40 needed", ring);
    return 1;
  }
  s.ring = ring;
  s.kmax = kmax;
  const char *ab = getenv("HEARTH_DS_ABL"), *tm = getenv("HEARTH_DS_TIME");
  s.abl = ab && *ab ? atoi(ab) : 0;
  if (s.abl) fprintf(stderr, "decode_stack: HEARTH_DS_ABL=%d (timing only: outputs are garbage)\n", s.abl);
  if (tm && *tm == '1' && (CU_OK(ctx, cudaMalloc(&s.ts, DS_NTS * 8)) || CU_OK(ctx, cudaMemset(s.ts, 0, DS_NTS * 8)))) return 1;
  if (CU_OK(ctx, cudaFuncSetAttribute(ds_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)ds_layout(ring, kmax).total)))
    return 1;
  /* the smallest carve-out that holds the block, so that the rest stays L1 */
  const size_t need = ds_layout(ring, kmax).total + fa.sharedSizeBytes + ctx->smem_reserved;
  int pct = (int)((need * 100 + ctx->smem_sm - 1) / ctx->smem_sm);
  if (pct > 100) pct = 100;
  if (CU_OK(ctx, cudaFuncSetAttribute(ds_kernel, cudaFuncAttributePreferredSharedMemoryCarveout, pct))) return 1;
  s.key = ls[0].wq->data;
  s.sa = sa;
  s.n_layers = n_layers;
  s.n_sm = nb;
  return 0;
}

extern "C" int hb_cuda_decode_stack(struct hb_ctx *ctx, struct hb_tensor *x, const struct hb_stack_layer *ls, int n_layers,
                                    const struct hb_batch *b, const struct hb_attn_params *p, float eps, float theta) {
  if (ctx->status) return 0; /* sticky error: nothing runs either way */
  const int mode = ds_mode();
  if (!mode || ctx->exact || ctx->skip || ctx->dup || b->n_tokens != 1 || !b->d_pos.data || n_layers < 1) return 1;
  if (x->dtype != HB_F16 || !ds_covers(ctx, x, ls, n_layers, p)) {
    if (mode == 2) CU_ARG(ctx, "decode_stack: HEARTH_DECODE_STACK=2 and this model's shapes are not covered");
    return mode == 2 ? 0 : 1;
  }
  const int d = (int)x->cols, H = p->n_heads, KVH = p->n_kv_heads, hd = p->head_dim;
  const int ff = (int)ls[0].w_gate->rows, nb = ctx->n_sm;
  if (ds_build(ctx, ls, n_layers, d, H, KVH, hd, ff)) return 0;
  ds_state &s = *(ds_state *)ctx->ds;
  ds_args a;
  memset(&a, 0, sizeof a);
  a.layers = s.layers;
  a.plan = s.plan;
  a.plan_n = s.plan_n;
  a.n_layers = n_layers;
  a.d = d;
  a.H = H;
  a.KVH = KVH;
  a.hd = hd;
  a.ff = ff;
  a.nwdt = (int)ls[0].attn_norm->dtype;
  a.sa = s.sa;
  a.ring = s.ring;
  a.kmax = s.kmax;
  a.abl = s.abl;
  a.ts = s.ts;
  a.eps = eps;
  a.scale = p->scale;
  a.x = (__half *)x->data;
  a.q = s.q;
  a.att = s.att;
  a.h = s.h;
  a.part = s.part;
  a.cnt = s.cnt;
  a.bar = s.bar;
  a.pos = (const int32_t *)b->d_pos.data;
  a.seq = (const int32_t *)b->d_seq.data;
  a.bt = (const int32_t *)b->d_block_table.data;
  a.max_blocks = b->max_blocks;
  a.bs = b->block_size;
  cu_rope_rinv(a.rinv, hd, theta);
  ds_kernel<<<nb, DS_NT, ds_layout(s.ring, s.kmax).total, ctx->stream>>>(a);
  CU_LAUNCHED(ctx, "decode_stack");
  return 0;
}

/* HEARTH_DS_TIME=1: block 0's mean time per layer in each stage */
static void ds_report(struct hb_ctx *ctx, const ds_state &s) {
  if (!s.ts) return;
  unsigned long long h[DS_NTS];
  if (cudaStreamSynchronize(ctx->stream) != cudaSuccess || cudaMemcpy(h, s.ts, sizeof h, cudaMemcpyDeviceToHost) != cudaSuccess || !h[0])
    return;
  static const char *names[19] = {"", "qkv prep", "qkv steps", "qkv emit", "sync", "attention", "sync", "o prep",
                                  "o steps", "o emit", "sync", "gu prep", "gu steps", "gu emit", "sync", "down prep",
                                  "down steps", "down emit", "sync"};
  double tot = 0.0;
  fprintf(stderr, "decode_stack: block 0, mean us per layer over %llu layers\n", h[0]);
  for (int i = 1; i <= 18; i++) {
    tot += h[i] / (double)h[0] / 1e3;
    fprintf(stderr, "  %2d %-11s %7.2f\n", i, names[i], h[i] / (double)h[0] / 1e3);
  }
  fprintf(stderr, "  layer %.2f; producer waits %.2f, warp 0 waits %.2f\n", tot, h[20] / (double)h[0] / 1e3,
          h[21] / (double)h[0] / 1e3);
}

void cu_decode_stack_free(struct hb_ctx *ctx) {
  if (!ctx->ds) return;
  ds_state *s = (ds_state *)ctx->ds;
  ds_report(ctx, *s);
  ds_release(*s);
  free(s);
  ctx->ds = NULL;
}
