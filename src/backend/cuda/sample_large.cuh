/* backend/cuda/sample_large.cuh — the sample op (sample.cu) for rows whose filtered set may exceed SAMPLE_CAP:
 * top-k above the cap, or no top-k with top-p / min-p. runtime/sampler.c sorts its candidates by (c descending,
 * id ascending) and walks them; here nothing is sorted. Every position the host's walks reach is found by a radix
 * select over the candidates' keys (sample_key: 8 bits a pass, 4 passes) whose histogram holds, per bucket, the
 * count and the probability mass of the candidates in it:
 *   - the mass of a candidate is w = exp((double)c) in (0, 1] as the integer round(w * 2^52); the sums are
 *     integers (exact, independent of the order of the atomics: the same on every run) — a bucket keeps the high
 *     and low 26 bits of its candidates in two 64-bit sums, read as one 128-bit number;
 *   - "the first position whose running mass exceeds T" and "the r-th position" are then each one select: the
 *     bucket where the running sum from the top crosses, refined digit by digit to one key; candidates sharing
 *     that key share c (and w), and the host orders them by id, so the crossing is the j-th of them in id order.
 * The host's decisions are then repeated with the margin rule of sample_decide.h: its sums are sequential doubles
 * over glibc's exp, these are exact sums of CUDA's exp rounded to 2^-53: the two differ by at most
 * ~2 nc 2^-53 of the total (the total is >= 1: the top candidate's w is 1) plus a few ulps, so a decision is taken
 * only when its sides are further apart than SAMPLE_MARGIN + 4 nc 2^-52 (relative); closer, the host decides.
 * The pass over the whole row (the first digit) is made once and kept for every later select. With sl_src_pre
 * (sample_split.cuh: few rows) the keys and masses come from arrays filled by many blocks, and the first 16 bits of
 * every select come from a 65,536-bucket histogram they filled, so only the last two digits walk the row here.
 * Every function here is called by all threads of the block (they hold __syncthreads); results are in shared. */
#ifndef HEARTH_BACKEND_CUDA_SAMPLE_LARGE_CUH
#define HEARTH_BACKEND_CUDA_SAMPLE_LARGE_CUH

typedef unsigned long long sl_u64;
typedef unsigned __int128 sl_u128;

#define SL_FX_ONE 4503599627370496.0 /* 2^52: w = 1 as an integer */
#define SL_SPLIT 26                  /* w's integer = hi << 26 | lo, each part < 2^26 + 1 */

struct sl_hist { unsigned cnt[256]; sl_u64 hi[256], lo[256]; };
/* the first 16 bits of the key at once (sl_src_pre: filled by sl_keys_kernel in global memory) */
struct sl_hist16 { unsigned cnt[65536]; sl_u64 hi[65536], lo[65536]; };
struct sl_state {
  struct sl_hist first, cur; /* first: the first digit over every candidate (kept); cur: the later digits */
  int have_first;
  sl_u128 tot;               /* the mass of every candidate */
  /* the last select's answer: the key, the candidates before it (count, mass), those with it, one's mass */
  uint32_t key;
  int above_cnt, eq_cnt, ok;
  sl_u128 above;
  sl_u64 eq_fx;
  int pick;
  int scan[32];
  /* sl_src_pre: warp w's sums over the 16-bit buckets 65535 - 2048 w .. 63488 - 2048 w (made once a row), and the
   * warp whose range holds a select's crossing */
  sl_u128 wm[32];
  int wn[32], cw;
};

__device__ __forceinline__ sl_u64 sl_fx(float c) { return __double2ull_rn(exp((double)c) * SL_FX_ONE); }
__device__ __forceinline__ sl_u128 sl_mass(const struct sl_hist *h, int b) {
  return ((sl_u128)h->hi[b] << SL_SPLIT) + (sl_u128)h->lo[b];
}
__device__ __forceinline__ sl_u128 sl_mass16(const struct sl_hist16 *h, int b) {
  return ((sl_u128)h->hi[b] << SL_SPLIT) + (sl_u128)h->lo[b];
}
__device__ __forceinline__ sl_u128 sl_shfl_up128(sl_u128 x, int o) {
  const sl_u64 lo = __shfl_up_sync(0xffffffffu, (sl_u64)x, o), hi = __shfl_up_sync(0xffffffffu, (sl_u64)(x >> 64), o);
  return ((sl_u128)hi << 64) | lo;
}
__device__ __forceinline__ sl_u128 sl_shfl128(sl_u128 x, int src) {
  const sl_u64 lo = __shfl_sync(0xffffffffu, (sl_u64)x, src), hi = __shfl_sync(0xffffffffu, (sl_u64)(x >> 64), src);
  return ((sl_u128)hi << 64) | lo;
}
/* inclusive scans over the lanes of a warp (lane 0 first) */
__device__ __forceinline__ void sl_warp_scan(sl_u128 &x, int &xn) {
  const int lane = threadIdx.x % 32;
  for (int o = 1; o < 32; o <<= 1) {
    const sl_u128 y = sl_shfl_up128(x, o);
    const int yn = __shfl_up_sync(0xffffffffu, xn, o);
    if (lane >= o) { x += y; xn += yn; }
  }
}
/* sample_key's inverse (the key of -0 is +0's: either gives w = 1) */
__device__ __forceinline__ float sl_key_c(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

/* Where the passes get each entry's key (0: not a candidate; sample_key is never 0) and a candidate's mass. Both
 * sources give the same numbers (w is a function of c, and c = sl_key_c(key) exactly), so a row's answer does not
 * depend on which one is used:
 *   sl_src_row: computed from the logits row on every pass (one block a row; many rows: sample_kernel);
 *   sl_src_pre: read from the key / mass arrays and the 16-bit histogram that sl_keys_kernel (sample_split.cuh)
 *   filled with many blocks a row, so exp runs once a candidate and on every SM (few rows: issue 36 item 4). */
struct sl_src_row {
  const float *lg;
  float top, temp;
  __device__ __forceinline__ uint32_t key(int64_t i) const {
    const float l = lg[i];
    return l > -INFINITY ? sample_key(sample_c(l, top, temp)) : 0u;
  }
  __device__ __forceinline__ sl_u64 fx(int64_t, uint32_t k) const { return sl_fx(sl_key_c(k)); }
  __device__ __forceinline__ const struct sl_hist16 *first16(void) const { return NULL; }
};
struct sl_src_pre {
  const uint32_t *keys;
  const sl_u64 *fxs;
  const struct sl_hist16 *hist; /* the first 16 bits (key >> 16) over every candidate */
  __device__ __forceinline__ uint32_t key(int64_t i) const { return keys[i]; }
  __device__ __forceinline__ sl_u64 fx(int64_t i, uint32_t) const { return fxs[i]; }
  __device__ __forceinline__ const struct sl_hist16 *first16(void) const { return hist; }
};

/* the histogram of digit (key >> shift) & 255 over the candidates whose key & mask == prefix. Lanes of a warp that
 * fall in one bucket add their part once (__match_any_sync, __reduce_add_sync: sm_80+), so a flat row, whose keys
 * share their first digits, does not queue 1,024 threads on one shared-memory counter */
template <typename Src>
__device__ void sl_pass(const Src &src, int64_t vocab, uint32_t prefix, uint32_t mask, int shift, struct sl_hist *h) {
  const int tid = threadIdx.x, lane = tid % 32, nthr = blockDim.x;
  for (int b = tid; b < 256; b += nthr) { h->cnt[b] = 0; h->hi[b] = 0; h->lo[b] = 0; }
  __syncthreads();
  for (int64_t base = 0; base < vocab; base += nthr) { /* the same trip count in every lane: whole warps below */
    const int64_t i = base + tid;
    unsigned b = 0xffffffffu, hi = 0, lo = 0;
    if (i < vocab) {
      const uint32_t k = src.key(i);
      if (k && (k & mask) == prefix) {
        const sl_u64 f = src.fx(i, k);
        b = (k >> shift) & 255u;
        hi = (unsigned)(f >> SL_SPLIT);
        lo = (unsigned)(f & ((1ull << SL_SPLIT) - 1));
      }
    }
    const unsigned peers = __match_any_sync(0xffffffffu, b);
    /* each group reduces over its own mask (redux.sync waits for the lanes its mask names); sums < 32 * 2^26 */
    const unsigned hs = __reduce_add_sync(peers, hi), ls = __reduce_add_sync(peers, lo);
    if (b != 0xffffffffu && lane == __ffs(peers) - 1) {
      atomicAdd(&h->cnt[b], (unsigned)__popc(peers));
      atomicAdd(&h->hi[b], (sl_u64)hs);
      atomicAdd(&h->lo[b], (sl_u64)ls);
    }
  }
  __syncthreads();
}

/* the first digit over every candidate, once, and the total mass */
template <typename Src>
__device__ void sl_first(const Src &src, int64_t vocab, struct sl_state *S) {
  if (S->have_first) return; /* (uniform: shared, written before a barrier) */
  const struct sl_hist16 *g = src.first16();
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (g) { /* sl_keys_kernel's, in global memory (an earlier launch): each warp sums its 2,048 buckets, coalesced */
    sl_u128 m = 0;
    int c = 0;
    if (warp < 32)
      for (int j = lane; j < 2048; j += 32) {
        const int b = 65535 - 2048 * warp - j;
        m += sl_mass16(g, b);
        c += (int)g->cnt[b];
      }
    for (int o = 16; o > 0; o >>= 1) {
      m += ((sl_u128)__shfl_xor_sync(0xffffffffu, (sl_u64)(m >> 64), o) << 64) |
           (sl_u128)__shfl_xor_sync(0xffffffffu, (sl_u64)m, o);
      c += __shfl_xor_sync(0xffffffffu, c, o);
    }
    if (lane == 0 && warp < 32) { S->wm[warp] = m; S->wn[warp] = c; }
    __syncthreads();
  } else sl_pass(src, vocab, 0u, 0u, 24, &S->first);
  if (threadIdx.x == 0) {
    sl_u128 t = 0;
    if (g) for (int w = 0; w < 32; w++) t += S->wm[w];
    else for (int b = 0; b < 256; b++) t += sl_mass(&S->first, b);
    S->tot = t;
    S->have_first = 1;
  }
  __syncthreads();
}

/* sl_select's first 16 bits from the 16-bit histogram (sl_src_pre; 1,024 threads: the 32 warp sums of sl_first):
 * warp 0 scans the warps' sums from the top, and the warp whose range crosses walks it 32 buckets at a time. Sets
 * S->key (the bucket << 16), above, above_cnt, eq_cnt, or S->ok = 0 */
__device__ void sl_top16(const struct sl_hist16 *g, int by_mass, sl_u128 tgt, int rank, struct sl_state *S) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (warp == 0) {
    const sl_u128 own = S->wm[lane];
    const int own_n = S->wn[lane];
    sl_u128 x = own;
    int xn = own_n;
    sl_warp_scan(x, xn);
    const bool crossed = by_mass ? x > tgt : xn >= rank; /* nothing above the first digit yet */
    const unsigned bal = __ballot_sync(0xffffffffu, crossed);
    if (!bal) {
      if (lane == 0) S->ok = 0;
    } else if (lane == __ffs(bal) - 1) {
      S->cw = lane;
      S->above = x - own;
      S->above_cnt = xn - own_n;
    }
  }
  __syncthreads();
  if (!S->ok) return; /* uniform */
  if (warp == S->cw) {
    sl_u128 acc = S->above;
    int acc_n = S->above_cnt;
    for (int j0 = 0; j0 < 2048; j0 += 32) { /* the crossing lies in this range: the loop ends by the break */
      const int b = 65535 - 2048 * warp - j0 - lane;
      const sl_u128 m = sl_mass16(g, b);
      const int n = (int)g->cnt[b];
      sl_u128 x = m;
      int xn = n;
      sl_warp_scan(x, xn);
      const bool crossed = by_mass ? acc + x > tgt : acc_n + xn >= rank;
      const unsigned bal = __ballot_sync(0xffffffffu, crossed);
      if (bal) { /* uniform over the warp */
        if (lane == __ffs(bal) - 1) {
          S->key = (uint32_t)b << 16;
          S->above = acc + (x - m);
          S->above_cnt = acc_n + (xn - n);
          S->eq_cnt = n;
        }
        break;
      }
      acc += sl_shfl128(x, 31);
      acc_n += __shfl_sync(0xffffffffu, xn, 31);
    }
  }
  __syncthreads();
}

/* by_mass: the first candidate in the host's order whose running mass (itself included) exceeds tgt; else the
 * rank-th (1-based). Fills S->key, above_cnt, above, eq_cnt, eq_fx and S->pick = its position among the
 * candidates with that key (1-based, id order); S->ok = 0 when there is none (tgt >= the total, rank > nc).
 * Each digit's 256 buckets are scanned by warp 0: lane L sums buckets 255 - 8L .. 248 - 8L, the lanes' sums are
 * scanned (from the top), and the first lane whose running sum crosses walks its 8 buckets. */
template <typename Src>
__device__ __noinline__ void sl_select(const Src &src, int64_t vocab, int by_mass, sl_u128 tgt, int rank,
                                      struct sl_state *S) {
  sl_first(src, vocab, S);
  const int lane = threadIdx.x % 32;
  uint32_t prefix = 0, mask = 0;
  __syncthreads(); /* every thread has read the previous select's answer */
  if (threadIdx.x == 0) { S->above = 0; S->above_cnt = 0; S->ok = 1; }
  __syncthreads();
  int shift0 = 24;
  if (src.first16()) { /* the first two digits at once */
    sl_top16(src.first16(), by_mass, tgt, rank, S);
    if (!S->ok) return; /* uniform */
    prefix = S->key;
    mask = 0xffff0000u;
    shift0 = 8;
  }
  for (int shift = shift0; shift >= 0; shift -= 8) {
    const struct sl_hist *h = &S->first;
    if (shift != 24) {
      sl_pass(src, vocab, prefix, mask, shift, &S->cur);
      h = &S->cur;
    }
    if (threadIdx.x < 32) {
      sl_u128 m8 = 0;
      int n8 = 0;
      for (int t = 0; t < 8; t++) { const int b = 255 - 8 * lane - t; m8 += sl_mass(h, b); n8 += (int)h->cnt[b]; }
      sl_u128 x = m8;
      int xn = n8;
      for (int o = 1; o < 32; o <<= 1) {
        const sl_u64 ylo = __shfl_up_sync(0xffffffffu, (sl_u64)x, o), yhi = __shfl_up_sync(0xffffffffu, (sl_u64)(x >> 64), o);
        const int yn = __shfl_up_sync(0xffffffffu, xn, o);
        if (lane >= o) { x += ((sl_u128)yhi << 64) | ylo; xn += yn; }
      }
      const sl_u128 base = S->above;
      const int base_n = S->above_cnt;
      const bool crossed = by_mass ? base + x > tgt : base_n + xn >= rank;
      const unsigned bal = __ballot_sync(0xffffffffu, crossed);
      if (!bal) {
        if (lane == 0) S->ok = 0;
      } else if (lane == __ffs(bal) - 1) {
        sl_u128 acc = base + (x - m8);
        int acc_n = base_n + (xn - n8), b = 255 - 8 * lane, t = 0;
        for (; t < 7; t++, b--) { /* the crossing is in this lane's 8: the 8th needs no test */
          const sl_u128 m = sl_mass(h, b);
          const int n = (int)h->cnt[b];
          if (by_mass ? acc + m > tgt : acc_n + n >= rank) break;
          acc += m;
          acc_n += n;
        }
        S->key = prefix | ((uint32_t)b << shift);
        S->above = acc;
        S->above_cnt = acc_n;
        S->eq_cnt = (int)h->cnt[b];
      }
    }
    __syncthreads();
    if (!S->ok) return; /* uniform */
    prefix = S->key;
    mask |= 255u << shift;
  }
  if (threadIdx.x == 0) {
    const sl_u64 f = sl_fx(sl_key_c(S->key));
    S->eq_fx = f;
    int j;
    if (by_mass) j = f ? (int)((tgt - S->above) / f) + 1 : 0; /* above <= tgt < above + eq_cnt * f */
    else j = rank - S->above_cnt;
    if (j < 1 || j > S->eq_cnt) S->ok = 0;
    S->pick = j;
  }
  __syncthreads();
}

/* the mass of the first n candidates in the host's order (n >= 1), or 0 when it cannot be had */
template <typename Src>
__device__ sl_u128 sl_prefix_mass(const Src &src, int64_t vocab, int n, struct sl_state *S) {
  sl_select(src, vocab, 0, 0, n, S);
  return S->ok ? S->above + (sl_u128)S->pick * S->eq_fx : (sl_u128)0;
}

/* the id of the j-th candidate (1-based, id order) whose key is key: contiguous id chunks per thread, the counts
 * scanned, and the thread whose chunk holds it walks it */
template <typename Src>
__device__ int sl_nth_id(const Src &src, int64_t vocab, uint32_t key, int j, struct sl_state *S) {
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, nthr = blockDim.x;
  const int64_t chunk = (vocab + nthr - 1) / nthr, i0 = tid * chunk, i1 = i0 + chunk < vocab ? i0 + chunk : vocab;
  int mine = 0;
  for (int64_t i = i0; i < i1; i++) mine += src.key(i) == key; /* key != 0 */
  int x = mine;
  for (int o = 1; o < 32; o <<= 1) { const int y = __shfl_up_sync(0xffffffffu, x, o); if (lane >= o) x += y; }
  __syncthreads();
  if (lane == 31) S->scan[warp] = x;
  if (tid == 0) S->pick = -1;
  __syncthreads();
  if (tid == 0) { int a = 0; for (int w = 0; w < nthr / 32; w++) { const int t = S->scan[w]; S->scan[w] = a; a += t; } }
  __syncthreads();
  int before = S->scan[warp] + x - mine;
  if (before < j && j <= before + mine)
    for (int64_t i = i0; i < i1; i++)
      if (src.key(i) == key && ++before == j) { S->pick = (int)i; break; }
  __syncthreads();
  return S->pick;
}

/* the block's count of candidates with (double)c - thr above m (gt) and at or above -m (ge) */
template <typename Src>
__device__ void sl_count_thr(const Src &src, int64_t vocab, double thr, double m, int *gt, int *ge, int *s_i) {
  int a = 0, b = 0;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
    const uint32_t k = src.key(i);
    if (!k) continue;
    const double d = (double)sl_key_c(k) - thr; /* c itself (a -0 comes back +0: the same difference) */
    a += d > m;
    b += d >= -m;
  }
  *gt = blk_sum_i(a, s_i);
  *ge = blk_sum_i(b, s_i);
}

/* The host's top-p, min-p and draw over the K (> SAMPLE_CAP) first of nc candidates: the drawn id, or -1 where a
 * decision is too close to call (the host samples the row). Steps as runtime/sampler.c's pick:
 *   n = K; S = the mass of the first K (K = nc: every candidate; the host's `total` leaves out c <= -60, whose
 *   integer is 0 here);
 *   top-p: the first position i whose running mass / S reaches top_p: n = i + 1;
 *   min-p: n = min(n, max(1, #{c >= log(min_p)})) (a prefix of the order: c descends);
 *   the draw: the first position whose running mass exceeds u * (mass of the first n). */
template <typename Src>
__device__ __noinline__ int sample_large(const Src &src, int64_t vocab, int K, int nc, float top_p, float min_p, double u,
                                         struct sl_state *S, int *s_i) {
  if (threadIdx.x == 0) S->have_first = 0;
  __syncthreads();
  const double mg = SAMPLE_MARGIN + 4.0 * (double)nc / SL_FX_ONE;
  sl_first(src, vocab, S);
  int n = K;
  sl_u128 mass_n = K < nc ? sl_prefix_mass(src, vocab, K, S) : S->tot;
  if (mass_n == 0) return -1;
  if (top_p < 1.0f) {
    const double s = (double)mass_n;
    sl_select(src, vocab, 1, (sl_u128)(s * (double)top_p), 0, S);
    if (!S->ok) return -1;
    const sl_u128 f = S->above + (sl_u128)S->pick * S->eq_fx;
    const double d = (double)f / s, dp = (double)(f - S->eq_fx) / s;
    if (!(d >= (double)top_p + mg && dp < (double)top_p - mg)) return -1; /* the host's cum could cross elsewhere */
    n = S->above_cnt + S->pick;
    mass_n = f;
  }
  if (min_p > 0.0f) {
    const double thr = log((double)min_p), m = SAMPLE_MARGIN * (1.0 + fabs(thr));
    int gt, ge;
    sl_count_thr(src, vocab, thr, m, &gt, &ge, s_i);
    const int lo = min(n, max(1, gt)), hi = min(n, max(1, ge));
    if (lo != hi) return -1; /* a candidate too close to log(min_p) decides */
    if (lo < n) {
      n = lo;
      mass_n = sl_prefix_mass(src, vocab, n, S);
      if (mass_n == 0) return -1;
    }
  }
  const double s = (double)mass_n;
  sl_select(src, vocab, 1, (sl_u128)(u * s), 0, S);
  if (!S->ok || S->above_cnt + S->pick > n) return -1;
  const sl_u128 f = S->above + (sl_u128)S->pick * S->eq_fx;
  const double d = (double)f / s, dp = (double)(f - S->eq_fx) / s;
  if (!(d - u >= mg && u - dp >= mg)) return -1; /* u * sum too close to a boundary */
  return sl_nth_id(src, vocab, S->key, S->pick, S);
}

#endif
