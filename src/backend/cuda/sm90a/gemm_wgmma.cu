/* backend/cuda/sm90a/gemm_wgmma.cu — the int4 prefill GEMM on Hopper's warpgroup MMA (wgmma, sm_90a only).
 *
 * Why a second kernel: gemm_q4 (matmul_q4.cu) issues mma.sync m16n8k16, which on an H100/H200 reaches about a
 * quarter of the f16 tensor peak (~180 TFLOP/s at the 3B's pp1570); Hopper's full rate needs wgmma, issued by a
 * warpgroup of 4 warps with B read by the tensor cores straight from shared memory.
 *
 * The product is computed transposed, D = W · xᵀ (the Machete arrangement), so that the int4 weights are the
 * wgmma A operand *from registers*: each thread loads its words of the repacked int4 tile from shared memory and
 * dequantizes them (q4_pair, then × the group's f16 scale, the same f16 arithmetic as gemm_q4, so the products
 * are the same) straight into the A fragment, which has the m16n8k16 A layout per warp — the layout q4_off's
 * nibble order was built for. The activations are B: NT tokens × 64 k of f16 per stage, K-major, in the 128-byte
 * swizzle (16-byte chunk c of token row r at chunk c ^ (r % 8)), described to wgmma by a matrix descriptor.
 *
 * Block: WGS = 2 or 4 warpgroups (256 or 512 threads), each 64 weight rows × NT tokens (NT = 128, 64, or 32 with
 * WGS 2; f32 accumulators, NT/2 per thread), so BM = 64 WGS weight rows per block: 4 halves the x tile's L2 traffic
 * per flop, at one block per SM; 4-stage cp.async pipeline (8 stages at NT = 32: decode batches of 9..32
 * sequences, whose stages are small; x tile and weight tile per stage), one __syncthreads per 64-k step. Each step:
 * wait for the stage, fence.proxy.async (cp.async wrote it through the generic proxy; wgmma reads through the
 * async proxy), dequantize 4 A fragments, 4 wgmmas, commit, wait. Same arguments and epilogue semantics as
 * gemm_q4: up to 3 weights sharing x, bias, add into the output, f16 or f32 output, split-K slices. Launched with
 * programmatic dependent launch: the first stages' weight copies and the scales go out before griddepcontrol.wait,
 * the x copies after it.
 *
 * The file is compiled for sm_90a alone (CMakeLists.txt: hearth_cuda_sm90a); the kernel bodies are guarded by
 * __CUDA_ARCH_FEAT_SM90_ALL, and gemm_wg_alive reports at init whether that code is what runs.
 */
#include "backend/cuda/gemm_q4.cuh"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define WG_ON 1
#else
#define WG_ON 0
#endif

#define WG_BK 64  /* k per stage: one 128-byte swizzle row of f16 per token */
#define WG_ST 4   /* pipeline stages at token tiles of 64 and 128 */
#define WG_ST32 8 /* and at 32 (decode batches of 9..32): a stage is 8 KB, so twice the bytes in flight */
/* the stages of a token tile */
#define WG_STAGES(nt) ((nt) == 32 ? WG_ST32 : WG_ST)

#if WG_ON
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory"); }
/* the accumulators are written by the tensor cores until the wait: keep the compiler from moving their reads */
__device__ __forceinline__ void fence_reg(float &r) { asm volatile("" : "+f"(r)::"memory"); }
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

/* the shared-memory matrix descriptor of a K-major tile in the 128-byte swizzle: start address >> 4 (bits 0-13),
 * leading byte offset (unused by this layout; 16 B), stride byte offset 1024 B (one 8-row group of 128-byte rows,
 * bits 32-45), layout type 1 = 128-byte swizzle (bits 62-63). A k16 step inside the 64-k row advances the start by
 * 32 bytes: the swizzle is applied to the address bits, so the tile base must be 1024-byte aligned. */
__device__ __forceinline__ uint64_t wg_desc(uint32_t saddr) {
  return (uint64_t)((saddr & 0x3FFFFu) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) |
         ((uint64_t)1 << 62);
}

/* d (+)= a · b: m64nNk16 f16 -> f32; a from registers (this warp's 16 rows, the m16n8k16 A fragment), b the
 * K-major shared tile desc describes; scale-d = 1 (accumulate: the accumulators start at zero) */
__device__ __forceinline__ void wgmma_m64n32k16(float (&d)[16], const uint32_t (&a)[4], uint64_t desc) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, "
      "{%16,%17,%18,%19}, %20, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(1));
}
__device__ __forceinline__ void wgmma_m64n64k16(float (&d)[32], const uint32_t (&a)[4], uint64_t desc) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, "
      "{%32,%33,%34,%35}, %36, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(1));
}
__device__ __forceinline__ void wgmma_m64n128k16(float (&d)[64], const uint32_t (&a)[4], uint64_t desc) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, "
      "{%64,%65,%66,%67}, %68, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(1));
}
#endif /* WG_ON */

/* SWI (WGS 2, f16 out, no split, bias or add): the SwiGLU form. Weight 0 is the gate, weight 1 the up projection, of
 * equal rows N; a block takes the same 64 rows of both (warpgroup 0 the gate's, 1 the up's), and the epilogue writes
 * out[m][r] = silu(g) * u for its rows r < N: g and u rounded to f16 as the plain GEMM's stores round them, then
 * silu_mul_kernel's expression (elementwise.cu), so out is the bits of the GEMM + silu_mul sequence. The up values
 * cross from warpgroup 1 to 0 through shared memory (the stages' space, free after the k loop). */
template <int NT, int WGS, typename TO, bool SWI>
__global__ __launch_bounds__(128 * WGS, WGS == 2 ? 2 : 1) void gemm_wg_kernel(const __grid_constant__ gemm_args a) {
#if WG_ON
  static_assert(!SWI || (WGS == 2 && sizeof(TO) == 2), "the SwiGLU form: 2 warpgroups, f16 out");
  static_assert(NT * 8 % (128 * WGS) == 0, "every thread copies whole 16-byte chunks of the x tile");
  constexpr int BM = 64 * WGS, TH = 128 * WGS, ST = WG_STAGES(NT); /* weight rows, threads, stages */
  extern __shared__ uint8_t wg_smem[];
  /* [ST][NT][128 B] x tiles (swizzled, 1024-aligned), [ST][BM][32 B] weight tiles, [BM][K/128] scales */
  const uint32_t s_raw = smem_u32(wg_smem), xs = (s_raw + 1023u) & ~1023u;
  uint8_t *Ws = wg_smem + (xs - s_raw) + ST * NT * 128;
  __half *Ss = (__half *)(Ws + ST * BM * 32);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, gid = lane / 4, tig = lane % 4;
  const int wi = SWI ? 0 : gemm_weight(a, blockIdx.x * BM);
  const int N = a.col0[wi + 1] - a.col0[wi], n0 = SWI ? blockIdx.x * 64 : blockIdx.x * BM - a.col0[wi];
  const int M = a.M, K = a.K, m0 = blockIdx.y * NT;
  const __half *__restrict__ x = a.x;
  const int64_t ldx = a.ldx;
  const uint8_t *__restrict__ wq = a.wq[wi];
  const __half *__restrict__ ws = a.ws[wi];
  const int gpr = K / 128;
  const int kt0 = blockIdx.z * a.kt_per, KT = min(K / WG_BK - kt0, a.kt_per);
  /* this thread's weight rows in the tile: rl and rl + 8 (warpgroup warp / 4 owns 64 rows, each warp 16) */
  const int rl = (warp / 4) * 64 + (warp % 4) * 16 + gid;

  auto load_x = [&](int stage, int kt) {
    const int k0 = (kt0 + kt) * WG_BK;
#pragma unroll
    for (int i = 0; i < NT * 8 / TH; i++) {
      int idx = tid + i * TH, r = idx / 8, c = idx % 8, gm = m0 + r;
      cp_async16_s(xs + (uint32_t)((stage * NT + r) * 128 + ((c ^ (r & 7)) << 4)),
                   x + (int64_t)(gm < M ? gm : 0) * ldx + k0 + c * 8, gm < M ? 16 : 0);
    }
  };
  auto load_w = [&](int stage, int kt) {
    const int k0 = (kt0 + kt) * WG_BK;
    int r = tid / 2, kc = tid % 2, gn = n0 + (SWI ? (r & 63) : r);
    const uint8_t *wr = SWI ? a.wq[r >> 6] : wq;
    cp_async16(Ws + ((size_t)stage * BM + r) * 32 + ((kc ^ ((r >> 2) & 1)) * 16),
               wr + q4_off(gn < N ? gn : 0, k0 / 128, gpr) + (k0 % 128) / 2 + kc * 16, gn < N ? 16 : 0);
  };

  float acc[NT / 2];
#pragma unroll
  for (int i = 0; i < NT / 2; i++) acc[i] = 0.0f;

  /* Everything before pdl_wait reads only the weights, which no kernel writes: launched with programmatic stream
   * serialization (cu_gemm_wg_launch), the block starts while the kernel before it (a norm, the attention, a split-K
   * finish) is still running, and its first weight copies and scales are under way when x is ready. The weights of
   * the first ST - 1 stages are one cp.async group, older than every x group, so the k loop's wait for stage kt's x
   * group covers them too. */
#pragma unroll
  for (int s = 0; s < ST - 1; s++)
    if (s < KT) load_w(s, s);
  cp_async_commit();
  /* the scales of this split's groups [gs, gs + ng) only, [BM][ng], read while the first stages are in flight (a
   * split of the down projection at K = 11,008 used to read all 86 groups of its rows before its first copy) */
  const int gs = kt0 * WG_BK / 128, ng = ((kt0 + KT) * WG_BK + 127) / 128 - gs;
  for (int i = tid; i < BM * ng; i += TH) {
    int r = i / ng, g = gs + i % ng;
    if constexpr (SWI) /* rows 64..127 of the tile are the up projection's */
      Ss[i] = n0 + (r & 63) < N ? a.ws[r >> 6][q4_soff(n0 + (r & 63), g, gpr)] : __float2half(0.0f);
    else
      Ss[i] = n0 + r < N ? ws[q4_soff(n0 + r, g, gpr)] : __float2half(0.0f);
  }
  pdl_wait();
#pragma unroll
  for (int s = 0; s < ST - 1; s++) {
    if (s < KT) load_x(s, s);
    cp_async_commit();
  }

  for (int kt = 0; kt < KT; kt++) {
    cp_async_wait<ST - 2>();
    fence_proxy_async();
    __syncthreads();
    if (kt + ST - 1 < KT) {
      load_x((kt + ST - 1) % ST, kt + ST - 1);
      load_w((kt + ST - 1) % ST, kt + ST - 1);
    }
    cp_async_commit();
    const int st = kt % ST;
    const int g = (kt0 + kt) * WG_BK / 128 - gs;
    const __half2 s0 = __half2half2(Ss[rl * ng + g]), s1 = __half2half2(Ss[(rl + 8) * ng + g]);
    uint32_t w0[2], w1[2];
#pragma unroll
    for (int kc = 0; kc < 2; kc++) {
      w0[kc] = *(const uint32_t *)(Ws + ((size_t)st * BM + rl) * 32 + ((kc ^ ((rl >> 2) & 1)) * 16) + tig * 4);
      w1[kc] = *(const uint32_t *)(Ws + ((size_t)st * BM + rl + 8) * 32 + ((kc ^ (((rl + 8) >> 2) & 1)) * 16) +
                                   tig * 4);
    }
    /* A fragment of k16 step s (k = 16 s .. 16 s + 15 of this stage): rows (rl, rl + 8) x k (2 tig, 2 tig + 1) and
     * (2 tig + 8, 2 tig + 9); word tig of the 32-run kc = s / 2 holds them as nibble pairs 2 (s % 2) and 2 (s % 2) + 1 */
    uint32_t af[4][4];
#pragma unroll
    for (int s = 0; s < 4; s++) {
      const int kc = s / 2, sh = 8 * (s % 2);
      af[s][0] = deq2(w0[kc] >> sh, s0);
      af[s][1] = deq2(w1[kc] >> sh, s1);
      af[s][2] = deq2(w0[kc] >> (sh + 4), s0);
      af[s][3] = deq2(w1[kc] >> (sh + 4), s1);
    }
    const uint32_t xb = xs + (uint32_t)(st * NT * 128);
#pragma unroll
    for (int i = 0; i < NT / 2; i++) fence_reg(acc[i]);
    wgmma_fence();
#pragma unroll
    for (int s = 0; s < 4; s++) {
      if constexpr (NT == 128) wgmma_m64n128k16(acc, af[s], wg_desc(xb + 32 * s));
      else if constexpr (NT == 64) wgmma_m64n64k16(acc, af[s], wg_desc(xb + 32 * s));
      else wgmma_m64n32k16(acc, af[s], wg_desc(xb + 32 * s));
    }
    wgmma_commit();
    wgmma_wait0();
#pragma unroll
    for (int i = 0; i < NT / 2; i++) fence_reg(acc[i]);
  }
  cp_async_wait<0>();

  /* acc[4 j + e] is (weight row rl, token 8 j + 2 tig + e), acc[4 j + 2 + e] the same token at row rl + 8 */
  TO *out = (TO *)a.out[wi];
  if constexpr (SWI) {
    /* up values as f16 pairs, [NT / 4][128 threads] words (a warp's 32 consecutive words: no bank conflict) */
    uint32_t *xch = (uint32_t *)(wg_smem + (xs - s_raw));
    __syncthreads(); /* both warpgroups' wgmmas are done with the stages */
    const int lt = tid & 127;
    if (tid >= 128) {
#pragma unroll
      for (int i = 0; i < NT / 4; i++) {
        __half2 h = __halves2half2(__float2half_rn(acc[2 * i] + 0.0f), __float2half_rn(acc[2 * i + 1] + 0.0f));
        xch[i * 128 + lt] = *(uint32_t *)&h;
      }
    }
    __syncthreads();
    if (tid >= 128) return;
    const int na = n0 + rl, nb = na + 8;
    const int64_t ldo = a.ldo[0];
#pragma unroll
    for (int j = 0; j < NT / 8; j++) {
#pragma unroll
      for (int h = 0; h < 2; h++) { /* h 0: row na (acc[4 j + e]), 1: row nb (acc[4 j + 2 + e]) */
        const int r = h ? nb : na;
        const uint32_t uw = xch[(2 * j + h) * 128 + lt];
        const __half2 u2 = *(const __half2 *)&uw;
#pragma unroll
        for (int e = 0; e < 2; e++) {
          const int m = m0 + 8 * j + 2 * tig + e;
          if (m >= M || r >= N) continue;
          const float gv = __half2float(__float2half_rn(acc[4 * j + 2 * h + e] + 0.0f));
          const float uv = __half2float(e ? __high2half(u2) : __low2half(u2));
          stf(out + (int64_t)m * ldo + r, gv / (1.0f + expf(-gv)) * uv);
        }
      }
    }
    return;
  }
  const float *bias = a.bias[wi];
  const int64_t ldo = a.ldo[wi];
  float *part = a.part ? a.part + (size_t)blockIdx.z * (size_t)M * a.n_total + a.col0[wi] : NULL;
  const int na = n0 + rl, nb = na + 8;
  const float ba = bias && na < N ? bias[na] : 0.0f, bb = bias && nb < N ? bias[nb] : 0.0f;
  if (part) {
#pragma unroll
    for (int j = 0; j < NT / 8; j++)
#pragma unroll
      for (int e = 0; e < 2; e++) {
        const int m = m0 + 8 * j + 2 * tig + e;
        if (m >= M) continue;
        if (na < N) part[(int64_t)m * a.n_total + na] = acc[4 * j + e];
        if (nb < N) part[(int64_t)m * a.n_total + nb] = acc[4 * j + 2 + e];
      }
    return;
  }
  /* With the residual added (o_proj, down: out += ...), the residuals of EJ row groups are loaded before any of their
   * stores: a load after a store to the same array cannot be moved above it, so one load-add-store per element made
   * 64 dependent round trips to memory a thread (ncu: the add GEMMs stalled on L1TEX, session 29). The sum is still
   * v + bias + residual, in that order. */
  constexpr int EJ = 4;
#pragma unroll
  for (int j0 = 0; j0 < NT / 8; j0 += EJ) {
    float res[EJ][4];
#pragma unroll
    for (int j = 0; j < EJ; j++)
#pragma unroll
      for (int e = 0; e < 2; e++) {
        const int m = m0 + 8 * (j0 + j) + 2 * tig + e;
        res[j][e] = a.add && m < M && na < N ? ldf(out + (int64_t)m * ldo + na) : 0.0f;
        res[j][2 + e] = a.add && m < M && nb < N ? ldf(out + (int64_t)m * ldo + nb) : 0.0f;
      }
#pragma unroll
    for (int j = 0; j < EJ; j++)
#pragma unroll
      for (int e = 0; e < 2; e++) {
        const int m = m0 + 8 * (j0 + j) + 2 * tig + e;
        if (m >= M) continue;
        if (na < N) stf(out + (int64_t)m * ldo + na, acc[4 * (j0 + j) + e] + ba + res[j][e]);
        if (nb < N) stf(out + (int64_t)m * ldo + nb, acc[4 * (j0 + j) + 2 + e] + bb + res[j][2 + e]);
      }
  }
#endif
}

/* writes 1 when the sm_90a code of this file is what the device runs */
__global__ void gemm_wg_alive(int *flag) {
#if WG_ON
  *flag = 1;
#else
  *flag = 0;
#endif
}

size_t cu_gemm_wg_smem(int64_t K, int nt, int wgs) {
  const size_t bm = 64 * (size_t)wgs;
  const size_t st = WG_STAGES(nt);
  return 1024 + st * nt * 128 + st * bm * 32 + bm * (size_t)(K / 128) * 2;
}

/* raises a kernel's dynamic shared memory limit; 1 on failure (the error cleared: the context is not marked) */
template <typename KERN>
static int wg_smem_attr(struct hb_ctx *ctx, KERN kern) {
  cudaFuncAttributes fa;
  if (cudaFuncGetAttributes(&fa, kern) != cudaSuccess ||
      cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           (int)(ctx->smem_optin - fa.sharedSizeBytes)) != cudaSuccess) {
    (void)cudaGetLastError();
    return 1;
  }
  return 0;
}

int cu_gemm_wg_init(struct hb_ctx *ctx) {
  if (ctx->cc_major != 9) return 0;
  int *d = NULL, h = 0;
  if (cudaMalloc(&d, sizeof(int)) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  gemm_wg_alive<<<1, 1, 0, ctx->stream>>>(d);
  const int ok = cudaGetLastError() == cudaSuccess &&
                 cudaMemcpyAsync(&h, d, sizeof h, cudaMemcpyDeviceToHost, ctx->stream) == cudaSuccess &&
                 cudaStreamSynchronize(ctx->stream) == cudaSuccess;
  (void)cudaGetLastError(); /* no kernel image for this device: not an error of the context */
  cudaFree(d);
  if (!ok || h != 1) return 0;
  if (wg_smem_attr(ctx, gemm_wg_kernel<128, 2, __half, false>) | wg_smem_attr(ctx, gemm_wg_kernel<128, 2, float, false>) |
      wg_smem_attr(ctx, gemm_wg_kernel<64, 2, __half, false>) | wg_smem_attr(ctx, gemm_wg_kernel<64, 2, float, false>) |
      wg_smem_attr(ctx, gemm_wg_kernel<128, 4, __half, false>) | wg_smem_attr(ctx, gemm_wg_kernel<128, 4, float, false>) |
      wg_smem_attr(ctx, gemm_wg_kernel<64, 4, __half, false>) | wg_smem_attr(ctx, gemm_wg_kernel<64, 4, float, false>) |
      wg_smem_attr(ctx, gemm_wg_kernel<32, 2, __half, false>) | wg_smem_attr(ctx, gemm_wg_kernel<32, 2, float, false>) |
      wg_smem_attr(ctx, gemm_wg_kernel<128, 2, __half, true>))
    return 0;
  return 1;
}

/* the plain (no SwiGLU) instance for a plan's token tile, warpgroups and output type: the launch and the residency
 * question (cu_gemm_wg_resident) take the same kernel */
typedef void (*wg_kernel_t)(const gemm_args);
static wg_kernel_t wg_kernel(int nt, int wgs, int out_f32) {
#define WGK(NT, W) (out_f32 ? gemm_wg_kernel<NT, W, float, false> : gemm_wg_kernel<NT, W, __half, false>)
  if (wgs == 4) return nt == 128 ? WGK(128, 4) : WGK(64, 4);
  return nt == 128 ? WGK(128, 2) : nt == 64 ? WGK(64, 2) : WGK(32, 2);
#undef WGK
}

/* launched with programmatic stream serialization: the kernel's weight prologue overlaps the kernel before it (x32
 * +2 % on the H200, bench/RESULTS.md "Session 36") */
void cu_gemm_wg_launch(struct hb_ctx *ctx, const gemm_args &a, int nt, int wgs, int out_f32, dim3 grid, size_t smem) {
  cu_launch_pdl(ctx, "gemm_wg", wg_kernel(nt, wgs, out_f32), grid, dim3(128 * wgs), smem, a);
  CU_LAUNCHED(ctx, a.part ? "gemm_wg split-K" : "gemm_wg");
}

int cu_gemm_wg_resident(int nt, int wgs, int out_f32, size_t smem) {
  int r = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&r, (const void *)wg_kernel(nt, wgs, out_f32), 128 * wgs, smem) !=
          cudaSuccess ||
      r < 1) {
    (void)cudaGetLastError();
    return 1;
  }
  return r;
}

void cu_gemm_wg_launch_swiglu(struct hb_ctx *ctx, const gemm_args &a, dim3 grid, size_t smem) {
  cu_launch_pdl(ctx, "gemm_wg", gemm_wg_kernel<128, 2, __half, true>, grid, dim3(256), smem, a);
  CU_LAUNCHED(ctx, "gemm_wg swiglu");
}
