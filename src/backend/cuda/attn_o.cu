/* backend/cuda/attn_o.cu — one launch for a one-token decode step's attention and its o_proj:
 * x += softmax(q·Kᵀ·scale)·V · Woᵀ over the paged cache (f16 q, cache and x; int4 Wo; sm_90).
 *
 * Why (bench/NOTES.md, round 16): in the decode chain, attention and the o_proj GEMV are two small
 * kernels whose own work is tiny (a few hundred keys, 0.4-2 MB of weights) and whose time is a chain of
 * latencies: two kernel boundaries, the new key's and q's round trips, the attention's reductions, x's
 * arrival in the GEMV, one weight step and the emit. This kernel copies both the cached keys and its slice of
 * Wo before griddepcontrol.wait, so after the wait it has only q, the new key, the arithmetic and one exchange.
 * Where it is used: cu_attn_o_max_len (on by default at head dim 64, where it measured faster; see there).
 *
 * Step twins (a speculative verify, hb_cuda_set_step_twins): the consecutive tokens of one sequence, a row each in
 * grid y. Row t's blocks compute exactly what the one-token launch at its position would (its q, its keys, its x),
 * so each row has that launch's bits; the one difference is which keys are this forward's own (written by the
 * kernel before): all of the rows' positions, not only the last, are copied after griddepcontrol.wait.
 *
 * Split. Block (r, j): KV group j's heads (HPG = n_heads / n_kv ≤ 8 query heads), output rows
 * [r·RB, r·RB + RB). Every block of group j computes that group's attention (a few hundred keys: cheap, and
 * redundant only in L2 reads made before the wait), then multiplies its RB rows of Wo by the group's columns.
 * The n_kv blocks of one row slice form a thread-block cluster: ranks 1.. write their rows into rank 0's shared
 * memory, and after one cluster barrier rank 0 sums them in rank order (deterministic), adds the residual and
 * writes x.
 *
 * Keys. Thread i copies key row i of a chunk (one block-table load, then the row's 16-byte pieces): the cached
 * keys and the zero rows up to the chunk's last 16-key tile before the wait, the new key after it.
 *
 * Attention on tensor cores (m16n8k16): A = q (rows: the group's heads, 8 of the 16 used), B = K rows as
 * stored; each warp takes two 16-key tiles (warp, warp + 8) with its own online softmax (FlashAttention-2 style:
 * the score accumulators become the P·V A operand in registers; V by ldmatrix.trans), and the warps' (max, sum,
 * O) meet in shared memory once, weighted by 2^(m_w − M) / L. Keys come in chunks (ado_chunk); contexts above
 * one chunk work (online rescale, copies after the wait), but the runtime keeps this path to one chunk.
 *
 * o_proj: Wo's slice (RB rows × the quantization groups that overlap the group's columns) is copied to shared
 * memory in the device int4 layout (cuda_common.cuh); A = weights (q4_word: exact f16), B = O (columns outside
 * the group's range are skipped), the group's scale applied per 128 columns in f32, four groups' chains in
 * flight per warp. */
#include <cooperative_groups.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/ptx.cuh"

namespace cg = cooperative_groups;

/* Wo's slice and scales are copied with no L2 policy (round 24: tg128 the same within 0.1 % on both models as with
 * evict_first, and it is the hinted cp.async form, with a shared-memory address, that stopped kernels in rounds 19
 * and 23; the switch ATTN_O_HINT is in the history at ac09af2) */
#define ADO_THREADS 256
#define ADO_WARPS 8
/* keys per chunk (a multiple of 16, at most a key row per thread and two 16-key tiles per warp): 256 at hd 64; 208
 * at hd 128, so that a block (K and V rows of 272 bytes, Wo's slice: ~150 KB) fits beside one block of the 3B's
 * QKV GEMV (~52 KB). (Round 16: at 256 keys, ~181 KB, it could not; at 208 the 3B's blocks still entered late,
 * see cu_attn_o_max_len.) */
template <int HD>
struct ado_chunk {
  static constexpr int C = HD == 128 ? 208 : 256;
};
#define ADO_HPG 8      /* query heads per KV group, at most */
/* registers: beside one block of the QKV GEMV before it (8 warps, <= 100), so that its copies start early */
#define ADO_MAXREG 144
/* loops whose bodies index no register array stay loops (`#pragma unroll 1`): smaller code, the same speed (round 16,
 * call 4: unrolled was within ±0.5 %) */

/* shared memory: K, V chunk rows (HD + 8 halves: ldmatrix rows of 8 keys hit distinct banks), q, O (f16), the
 * warps' partials (aliasing K), Wo's slice and scales, the row partials */
template <int HD>
struct ado_smem {
  static constexpr int LDS = HD + 8;
  static constexpr size_t kv = (size_t)ado_chunk<HD>::C * LDS * 2;                    /* bytes of K (and of V) */
  static constexpr size_t part = (size_t)ADO_WARPS * ADO_HPG * (HD + 2) * 4; /* O, m, l per warp and head */
  static_assert(part <= kv, "the warps' partials alias K");
};
template <int HD>
static size_t ado_bytes(int RB, int NG) {
  return 2 * ado_smem<HD>::kv + (size_t)ADO_HPG * HD * 2 * 2 /* q, O */ + (size_t)RB / 8 * NG * (512 + 16) +
         ADO_WARPS * 16 * 4 /* Yp: (8 / tiles) parts × RB rows */ + (size_t)8 * RB * 4 /* Yr */ +
         ADO_WARPS * ADO_HPG * 4 /* Fw */;
}

template <int HD>
__global__ __maxnreg__(ADO_MAXREG) void attn_o_kernel(
    __half *x, const __half *q, const __half *kc, const __half *vc, const uint8_t *wq, const __half *ws,
    const int32_t *pos, const int32_t *seq, const int32_t *bt, int max_blocks, int bs, int n_heads, int n_kv,
    float scale_log2, int G, int RB, int NG, int ldq, int ldx CU_TRACE_PARAMS) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int LDS = ado_smem<HD>::LDS, KSTEPS = HD / 16, DT = HD / 8, ADO_C = ado_chunk<HD>::C;
  static_assert(ADO_C <= ADO_THREADS && ADO_C <= 2 * 16 * ADO_WARPS && ADO_C % 16 == 0,
                "a thread per key row, at most two 16-key tiles per warp");
  extern __shared__ __align__(16) uint8_t ado_sm[];
  __half *Ks = (__half *)ado_sm, *Vs = Ks + (size_t)ADO_C * LDS;
  __half *Qs = Vs + (size_t)ADO_C * LDS, *Os = Qs + ADO_HPG * HD;
  uint8_t *Wq = (uint8_t *)(Os + ADO_HPG * HD);
  __half *Wsc = (__half *)(Wq + (size_t)RB / 8 * NG * 512);
  float *Yp = (float *)(Wsc + (size_t)RB / 8 * NG * 8); /* [8 / tiles parts][RB] */
  float *Yr = Yp + ADO_WARPS * 16;                      /* rank 0's: [rank][RB] */
  float *Fw = Yr + 8 * RB;                              /* [warp][head]: each warp's weight in the merge */
  float *Pt = (float *)Ks;                              /* after the last chunk: [warp][head][HD + 2] */
  if (threadIdx.x == 0) { CU_TRACE(0); CU_TRACE(6); }
  /* the cluster's first barrier phase: every block has started before any touches another's shared memory */
  asm volatile("barrier.cluster.arrive.relaxed;" ::: "memory");

  const int j = (int)cg::this_cluster().block_rank(), r0 = (int)(blockIdx.x / n_kv) * RB;
  const int HPG = n_heads / n_kv, lane = threadIdx.x % 32, warp = threadIdx.x / 32, gid = lane / 4, tig = lane % 4;
  const int c_lo = j * HPG * HD, c_hi = c_lo + HPG * HD, g_lo = c_lo / 128;
  const int ng = (c_hi + 127) / 128 - g_lo;

  /* before the wait: Wo's slice (no kernel writes it) */
  {
#define ADO_COPY(dst, src) cp_async16(dst, src, 16)
    const int per_rb = ng * 32; /* 16-byte pieces of one 8-row block's groups */
    for (int i = threadIdx.x; i < RB / 8 * per_rb; i += ADO_THREADS) {
      const int rb = i / per_rb, k = i % per_rb;
      const int64_t src = ((int64_t)(r0 / 8 + rb) * G + g_lo) * 512 + (int64_t)k * 16;
      ADO_COPY(Wq + (size_t)rb * NG * 512 + k * 16, wq + src);
    }
    for (int i = threadIdx.x; i < RB / 8 * ng; i += ADO_THREADS) {
      const int rb = i / ng, g = i % ng;
      ADO_COPY(Wsc + ((size_t)rb * NG + g) * 8, ws + ((int64_t)(r0 / 8 + rb) * G + g_lo + g) * 8);
    }
#undef ADO_COPY
  }
  /* keys: thread i copies row i of a chunk (key kb + i), zeros past the context up to the chunk's last 16-key
   * tile. Its block-table entry is loaded first: one global load per thread, then 2 × HD / 8 copies. */
  /* this block's row (grid y: a verify's tokens, else 0); keys from pos[0] on are this forward's own */
  const int row = (int)blockIdx.y, p = pos[row], p_new = pos[0], sq = seq[row], len = p + 1;
  q += (int64_t)row * ldq;
  x += (int64_t)row * ldx;
  const int32_t *btr = bt + (int64_t)sq * max_blocks;
  const int64_t kvw = (int64_t)n_kv * HD;
  const __half *kbase = kc + (int64_t)j * HD, *vbase = vc + (int64_t)j * HD;
  auto row_src = [&](int kp) -> int64_t { return ((int64_t)btr[kp / bs] * bs + kp % bs) * kvw; };
  auto copy_row = [&](int row, int64_t off, bool live) {
#pragma unroll 1
    for (int c = 0; c < HD / 8; c++) {
      cp_async16(Ks + row * LDS + c * 8, kbase + off + c * 8, live ? 16 : 0);
      cp_async16(Vs + row * LDS + c * 8, vbase + off + c * 8, live ? 16 : 0);
    }
  };
  int kn = min(ADO_C, len);
  const int me = threadIdx.x; /* this thread's row of chunk 0 */
  const bool live0 = me < kn, pad0 = me < (kn + 15) / 16 * 16; /* (kn <= ADO_C: pad0 only for rows of the chunk) */
  const int64_t off0 = live0 ? row_src(me) : 0;
  const bool fresh = me >= p_new && me <= p; /* written by the kernel before: copied after the wait */
  if (pad0 && !fresh) copy_row(me, off0, live0); /* the cached keys, and the zero rows */
  cp_async_commit();
  pdl_wait();
  pdl_trigger();
  if (threadIdx.x == 0) { CU_TRACE(1); CU_TRACE(3); }
  /* after the wait: the new keys (written by the kernel before) and q */
  if (fresh && me < kn) copy_row(me, off0, true); /* (me >= kn: that key is in a later chunk) */
  if (threadIdx.x < HPG * HD / 8) cp_async16(Qs + threadIdx.x * 8, q + (int64_t)j * HPG * HD + threadIdx.x * 8, 16);
  cp_async_commit();
  float xres = 0.0f;
  if (j == 0 && threadIdx.x < RB) xres = __half2float(x[r0 + threadIdx.x]);

  float o[DT][4], m_a = -INFINITY, l_a = 0.0f;
#pragma unroll
  for (int i = 0; i < DT; i++)
#pragma unroll
    for (int e = 0; e < 4; e++) o[i][e] = 0.0f;
  const __half *qrow = Qs + (gid < HPG ? gid : 0) * HD + 2 * tig; /* row gid of A = head gid; rows gid + 8 stay 0 */
  for (int kb = 0;;) {
    cp_async_wait<0>();
    __syncthreads();
    if (kb == 0 && threadIdx.x == 0) CU_TRACE(4);
    /* this warp's tiles of 16 keys: warp and warp + 8; their four score chains run side by side */
    const int nt16 = (kn + 15) / 16;
    if (warp < nt16) { /* warp-uniform */
      const bool two = warp + ADO_WARPS < nt16;
      float s[2][2][4]; /* [tile][keys +0..7, +8..15][c] */
#pragma unroll
      for (int t = 0; t < 2; t++)
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
          for (int e = 0; e < 4; e++) s[t][h][e] = 0.0f;
#pragma unroll 1
      for (int kk = 0; kk < KSTEPS; kk++) {
        const uint32_t a[4] = {gid < HPG ? *(const uint32_t *)(qrow + kk * 16) : 0u, 0u,
                               gid < HPG ? *(const uint32_t *)(qrow + kk * 16 + 8) : 0u, 0u};
#pragma unroll
        for (int t = 0; t < 2; t++) {
          if (t && !two) break;
          uint32_t kf[4];
          const int tl = warp + t * ADO_WARPS;
          ldmatrix_x4(kf, Ks + (tl * 16 + (lane / 16) * 8 + lane % 8) * LDS + kk * 16 + ((lane / 8) % 2) * 8);
          mma_16816(s[t][0], a, kf);
          mma_16816(s[t][1], a, kf + 2);
        }
      }
      float mx = m_a;
#pragma unroll
      for (int t = 0; t < 2; t++)
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
          for (int e = 0; e < 2; e++) {
            const int key = (warp + t * ADO_WARPS) * 16 + 8 * h + 2 * tig + e;
            s[t][h][e] = key < kn && (t == 0 || two) ? s[t][h][e] * scale_log2 : -INFINITY;
            mx = fmaxf(mx, s[t][h][e]);
          }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float al = exp2f(m_a - mx); /* m_a = -inf at first: 0 (mx is finite: key 16 warp is live) */
      m_a = mx;
      float sum = 0.0f;
#pragma unroll
      for (int t = 0; t < 2; t++)
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
          for (int e = 0; e < 2; e++) {
            s[t][h][e] = exp2f(s[t][h][e] - mx);
            sum += s[t][h][e];
          }
      l_a = l_a * al + sum;
#pragma unroll
      for (int i = 0; i < DT; i++) {
        o[i][0] *= al;
        o[i][1] *= al;
      }
      /* O += P·V: P (row gid, keys 2 tig.. and 8 + 2 tig..) as the A operand; V by ldmatrix.trans */
#pragma unroll
      for (int t = 0; t < 2; t++) {
        if (t && !two) break;
        const int tl = warp + t * ADO_WARPS;
        const uint32_t pa[4] = {half2_bits(s[t][0][0], s[t][0][1]), 0u, half2_bits(s[t][1][0], s[t][1][1]), 0u};
#pragma unroll
        for (int dp = 0; dp < HD / 16; dp++) {
          uint32_t vf[4];
          ldmatrix_x4_trans(vf, Vs + (tl * 16 + lane % 16) * LDS + dp * 16 + (lane / 16) * 8);
          mma_16816(o[2 * dp], pa, vf);
          mma_16816(o[2 * dp + 1], pa, vf + 2);
        }
      }
    }
    kb += kn;
    if (kb >= len) break;
    kn = min(ADO_C, len - kb);
    __syncthreads(); /* every warp is done with the chunk's rows */
    if (me < (kn + 15) / 16 * 16) copy_row(me, me < kn ? row_src(kb + me) : 0, me < kn);
    cp_async_commit();
  }
  /* the warps' (max, sum, O) per head into Pt (over K: every warp is past its last tile after the barrier) */
  l_a += __shfl_xor_sync(0xffffffffu, l_a, 1);
  l_a += __shfl_xor_sync(0xffffffffu, l_a, 2);
  __syncthreads();
  if (threadIdx.x == 0) CU_TRACE(7); /* attention's tiles done */
  if (gid < HPG) {
    float *pr = Pt + ((size_t)warp * ADO_HPG + gid) * (HD + 2);
#pragma unroll
    for (int i = 0; i < DT; i++) *(float2 *)(pr + 8 * i + 2 * tig) = make_float2(o[i][0], o[i][1]);
    if (tig == 0) { pr[HD] = m_a; pr[HD + 1] = l_a; }
  }
  __syncthreads();
  /* each warp's weight per head, 2^(m_w - M) / L, by 8 lanes per head (threads 0..63) */
  if (threadIdx.x < ADO_WARPS * ADO_HPG) {
    const int h = threadIdx.x / ADO_WARPS, w = threadIdx.x % ADO_WARPS;
    const float *pr = Pt + ((size_t)w * ADO_HPG + h) * (HD + 2);
    const float m = h < HPG ? pr[HD] : -INFINITY, l = h < HPG ? pr[HD + 1] : 0.0f;
    float M = m;
#pragma unroll
    for (int o2 = 1; o2 < ADO_WARPS; o2 <<= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o2));
    const float f = m == -INFINITY ? 0.0f : exp2f(m - M); /* a warp with no key: weight 0 */
    float L = l * f;
#pragma unroll
    for (int o2 = 1; o2 < ADO_WARPS; o2 <<= 1) L += __shfl_xor_sync(0xffffffffu, L, o2);
    Fw[w * ADO_HPG + h] = L > 0.0f ? f / L : 0.0f; /* L >= 1 for a head of the group */
  }
  __syncthreads();
  for (int e = threadIdx.x; e < HPG * HD; e += ADO_THREADS) {
    const int h = e / HD, d = e % HD;
    float A = 0.0f;
#pragma unroll
    for (int w = 0; w < ADO_WARPS; w++) A = fmaf(Pt[((size_t)w * ADO_HPG + h) * (HD + 2) + d], Fw[w * ADO_HPG + h], A);
    Os[e] = __float2half_rn(A);
  }
  __syncthreads();
  if (threadIdx.x == 0) CU_TRACE(8); /* O merged */

  /* o_proj: warp → tile (16 rows) and every (8 / tiles)-th group from `part`, four groups' chains at a time;
   * A = Wo (exact f16 from the int4 layout), B = O */
  const int tiles = RB / 16, wpt = ADO_WARPS / tiles, tile = warp % tiles, part = warp / tiles;
  float tot_lo = 0.0f, tot_hi = 0.0f;
  for (int g0 = part; g0 < ng; g0 += 4 * wpt) {
    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
      for (int e = 0; e < 4; e++) acc[i][e] = 0.0f;
#pragma unroll 1
    for (int run = 0; run < 4; run++) {
#pragma unroll
      for (int i = 0; i < 4; i++) {
        const int g = g0 + i * wpt;
        const int kc0 = (g_lo + g) * 128 + run * 32; /* the run's first column of Wo */
        if (g >= ng || kc0 + 32 <= c_lo || kc0 >= c_hi) continue; /* warp-uniform; c_lo, c_hi: multiples of 32 */
        const uint8_t *wlo = Wq + ((size_t)(2 * tile) * NG + g) * 512 + gid * 64 + tig * 4 + run * 16;
        uint32_t pl[4], ph[4];
        q4_word(*(const uint32_t *)wlo, pl);
        q4_word(*(const uint32_t *)(wlo + (size_t)NG * 512), ph);
#pragma unroll
        for (int st = 0; st < 2; st++) {
          const __half *xo = Os + (kc0 - c_lo) + st * 16 + 2 * tig;
          const uint32_t b[2] = {*(const uint32_t *)xo, *(const uint32_t *)(xo + 8)};
          const uint32_t a[4] = {pl[2 * st], ph[2 * st], pl[2 * st + 1], ph[2 * st + 1]};
          mma_16816(acc[i], a, b);
        }
      }
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
      const int g = g0 + i * wpt;
      if (g >= ng) break;
      const __half *sc = Wsc + ((size_t)(2 * tile) * NG + g) * 8 + gid;
      tot_lo = fmaf(acc[i][0], __half2float(sc[0]), tot_lo);
      tot_hi = fmaf(acc[i][2], __half2float(sc[(size_t)NG * 8]), tot_hi);
    }
  }
  /* column 0 of the result (every column is the same: B's columns are all O) */
  if (tig == 0) {
    Yp[part * RB + tile * 16 + gid] = tot_lo;
    Yp[part * RB + tile * 16 + gid + 8] = tot_hi;
  }
  __syncthreads();
  float y = 0.0f;
  if (threadIdx.x < RB)
    for (int pp = 0; pp < wpt; pp++) y += Yp[pp * RB + threadIdx.x];
  if (threadIdx.x == 0) CU_TRACE(9); /* this block's rows of o_proj */
  /* the rows of ranks 1.. into rank 0's Yr (every block of the cluster has started: the first phase), then one
   * barrier phase, after which rank 0 sums them (nobody reads the other ranks' shared memory) */
  asm volatile("barrier.cluster.wait.acquire;" ::: "memory");
  if (threadIdx.x < RB) {
    float *dst = j == 0 ? Yr : cg::this_cluster().map_shared_rank(Yr, 0);
    dst[j * RB + threadIdx.x] = y;
  }
  asm volatile("barrier.cluster.arrive.release;" ::: "memory");
  asm volatile("barrier.cluster.wait.acquire;" ::: "memory");
  if (j == 0) {
    if (threadIdx.x < RB) {
      float yy = Yr[threadIdx.x];
      for (int rk = 1; rk < n_kv; rk++) yy += Yr[rk * RB + threadIdx.x];
      x[r0 + threadIdx.x] = __float2half_rn(xres + yy);
    }
  }
  if (threadIdx.x == 0) CU_TRACE(2);
#else
  __trap(); /* never launched: cu_attn_o_init turns the path off unless the sm_90 code is in the binary */
#endif
}

/* the default (cu_attn_o_max_len); tests change it through hb_cuda_set_attn_o_max */
void cu_attn_o_init(struct hb_ctx *ctx) {
  ctx->attn_o_max = -1;
  if (ctx->cc_major < 9) return; /* (cu_attn_o_max_len: off) */
  /* the kernels run only from sm_90 code (clusters, griddepcontrol): a binary whose code for this device is JIT-
   * compiled from older PTX would launch an empty body, so the path is off then. The shared-memory limit is raised
   * once here, not per launch. */
  cudaFuncAttributes f64, f128;
  if (cudaFuncGetAttributes(&f64, attn_o_kernel<64>) != cudaSuccess ||
      cudaFuncGetAttributes(&f128, attn_o_kernel<128>) != cudaSuccess || f64.ptxVersion < 90 || f128.ptxVersion < 90 ||
      cudaFuncSetAttribute(attn_o_kernel<64>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           (int)(ctx->smem_optin - f64.sharedSizeBytes)) != cudaSuccess ||
      cudaFuncSetAttribute(attn_o_kernel<128>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           (int)(ctx->smem_optin - f128.sharedSizeBytes)) != cudaSuccess) {
    cudaGetLastError(); /* not sticky: the path is only off */
    ctx->attn_o_off = 1;
  }
}

int cu_attn_o_chunk(int head_dim) {
  return head_dim == 128 ? ado_chunk<128>::C : head_dim == 64 ? ado_chunk<64>::C : 0;
}

/* The default takes the fused path where it measured faster (bench/NOTES.md, round 16): head dim 64 (the 0.5B: +4 %
 * tg128). At head dim 128 (the 3B) it lost 7-9 %: its 64 blocks of ~150 KB do not all find an SM beside the QKV
 * kernel's blocks, and those that start late copy their keys after that kernel ends. */
int cu_attn_o_max_len(struct hb_ctx *ctx, int head_dim) {
  if (ctx->exact || ctx->cc_major < 9 || ctx->attn_o_off || !cu_attn_o_chunk(head_dim) || ctx->attn_o_max == 0) return 0;
  if (ctx->attn_o_max > 0) return ctx->attn_o_max;
  return ctx->attn_o_max == -2 || head_dim == 64 ? cu_attn_o_chunk(head_dim) : 0;
}

int cu_attn_o(struct hb_ctx *ctx, struct hb_tensor *x, const struct hb_tensor *q, const struct hb_kv_layer *kv,
              const struct hb_batch *b, const struct hb_attn_params *p, const struct hb_tensor *wo) {
  if (ctx->row_invariant) return 1;
  const int hd = p->head_dim, n_heads = p->n_heads, n_kv = p->n_kv_heads;
  const int max_len = cu_attn_o_max_len(ctx, hd);
  /* the shapes first: where they are not this kernel's, the one-token steps run the attention op too */
  if (!max_len || p->window != 0 || p->softcap != 0.0f || n_kv < 1 || n_kv > 8 || n_heads % n_kv ||
      n_heads / n_kv > ADO_HPG)
    return 1;
  if (x->dtype != HB_F16 || q->dtype != HB_F16 || kv->k.dtype != HB_F16 || kv->v.dtype != HB_F16 || wo->dtype != HB_Q4)
    return 1;
  if (wo->cols != (int64_t)n_heads * hd || wo->cols % 128 || wo->rows != x->cols || x->cols % 16) return 1;
  const int rows = (int)wo->rows, G = (int)(wo->cols / 128), HPG = n_heads / n_kv;
  const int RB = rows % 64 == 0 ? 64 : rows % 32 == 0 ? 32 : 16; /* (128, tried at head dim 128 in round 16, did not make the path win there) */
  /* the most quantization groups one KV group's columns overlap (≤ 9: HPG·hd ≤ 1024; each group starts at a multiple
   * of 64 columns, so the o_proj loop's 32-column runs lie wholly inside or outside it) */
  int NG = 0;
  for (int j = 0; j < n_kv; j++) {
    const int lo = j * HPG * hd, ng = (lo + HPG * hd + 127) / 128 - lo / 128;
    NG = ng > NG ? ng : NG;
  }
  const size_t sm = hd == 128 ? ado_bytes<128>(RB, NG) : ado_bytes<64>(RB, NG);
  if (sm > ctx->smem_optin) return 1; /* (the kernels' limit was raised to smem_optin at init) */
  /* one token, or a verify's tokens of one sequence as their one-token launches (step twins): every row's keys
   * within max_len (seq_len[0] is the last row's) */
  const int nt = b->n_tokens;
  if (nt < 1 || (nt > 1 && (!ctx->twin || b->n_seqs != 1 || nt > 8)) || !b->seq_len || b->seq_len[0] > max_len) {
    /* step twins: a row whose one-token step takes this kernel (its keys within max_len) has no twin in the attention
     * op the caller runs instead (hb_cuda_set_step_twins counts it) */
    for (int t = 0; ctx->twin && t < nt; t++)
      if (!b->pos || b->pos[t] + 1 <= max_len) { ctx->twin_bad++; break; }
    return 1;
  }

  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3((unsigned)(rows / RB * n_kv), (unsigned)nt);
  cfg.blockDim = dim3(ADO_THREADS);
  cfg.dynamicSmemBytes = sm;
  cfg.stream = ctx->stream;
  cudaLaunchAttribute at[2];
  at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[0].val.programmaticStreamSerializationAllowed = 1;
  at[1].id = cudaLaunchAttributeClusterDimension;
  at[1].val.clusterDim.x = (unsigned)n_kv;
  at[1].val.clusterDim.y = 1;
  at[1].val.clusterDim.z = 1;
  cfg.attrs = at;
  cfg.numAttrs = 2;
  const float scale_log2 = p->scale * 1.4426950408889634f;
#define ADO_LAUNCH(HD)                                                                                              \
  do {                                                                                                              \
    cu_ok_(ctx,                                                                                                     \
           cudaLaunchKernelEx(&cfg, attn_o_kernel<HD>, (__half *)x->data, (const __half *)q->data,                  \
                              (const __half *)kv->k.data, (const __half *)kv->v.data, (const uint8_t *)wo->data,    \
                              (const __half *)wo->aux, (const int32_t *)b->d_pos.data,                              \
                              (const int32_t *)b->d_seq.data, (const int32_t *)b->d_block_table.data,               \
                              b->max_blocks, b->block_size, n_heads, n_kv, scale_log2, G, RB, NG,                   \
                              (int)q->cols, (int)x->cols                                                            \
                              CU_TRACE_ARGS(ctx, cu_trace_id(ctx, "attn+o hd%d", HD))),                             \
           "attn_o", __FILE__, __LINE__);                                                                           \
  } while (0)
  if (hd == 128) ADO_LAUNCH(128);
  else ADO_LAUNCH(64);
#undef ADO_LAUNCH
  return 0;
}
