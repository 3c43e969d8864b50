/* backend/cuda/sample_split.cuh — the sample op's large rows (sample_large.cuh) over many blocks when a launch has
 * few rows (issue 36 item 4: a decode step of one to a few sequences under top-p / min-p).
 * One block a row walked a 152k-entry row ~8 times, computing exp in double for every candidate on each walk, on
 * one SM: ~2 ms a step. With at most SL_SPLIT_ROWS rows a launch the op runs as three kernels instead:
 *   1. sample_kernel (sample.cu) as ever; a row that reaches step 5b stores its max, nc and K here, zeroes its
 *      first-digit histogram and stops;
 *   2. sl_keys_kernel, SL_G blocks a row: each candidate's key and integer mass computed once into scratch, and
 *      added into a histogram of the key's first 16 bits (65,536 buckets of count and mass, global integer atomics,
 *      zeroed by cu_sample: the sums, hence the decisions, do not depend on the order the blocks add in);
 *   3. sl_finish_kernel, one block a row: sample_large on those (sl_src_pre). Each select takes its first 16 bits
 *      from the histogram; only its last two digits and the final id search walk the row, reading 4-byte keys (and
 *      the masses of the few candidates in the chosen 16-bit bucket), without exp. The one-block path's costly
 *      pass was the second digit: every candidate of the first digit's bucket (most of a flat row) spread over
 *      256 buckets, 32 different ones a warp, serialising the warp's match / reduce / shared atomics.
 * The numbers are the ones the single-block path computes (sample_large.cuh, sl_src_*): both paths give the
 * same id (or -1) for a row, which test_cuda_ops.sample_split checks. Rows no later kernel is for (not sampled,
 * plain, top-k within the cap, non-finite) are finished by sample_kernel, as without the split, and their
 * `active` stays 0. Scratch is sized for SL_SPLIT_ROWS rows of the launch's vocab up front; no host sync. */
#ifndef HEARTH_BACKEND_CUDA_SAMPLE_SPLIT_CUH
#define HEARTH_BACKEND_CUDA_SAMPLE_SPLIT_CUH

#define SL_SPLIT_ROWS 8 /* above this, one block a row already spreads over the SMs */
#define SL_G 64         /* blocks a row in sl_keys_kernel: 8 rows x 64 = 512 blocks of SL_KT, ~4 a SM */
#define SL_KT 512

struct sl_split_row { float top; int nc, K, active; };

/* scratch layout for a launch of n rows: [n sl_split_row][n sl_hist16][n x vocab masses][n x vocab keys] (every
 * part starts on an 8-byte boundary: 16 n, 1,310,720 n and 8 n vocab bytes come before the keys) */
static __host__ __device__ __forceinline__ size_t sl_split_bytes(int n, int64_t vocab) {
  return (size_t)n * (sizeof(struct sl_split_row) + sizeof(struct sl_hist16)) + (size_t)n * (size_t)vocab * 12;
}
static __device__ __forceinline__ struct sl_split_row *sl_split_rows(unsigned char *sp, int) {
  return (struct sl_split_row *)sp;
}
static __host__ __device__ __forceinline__ struct sl_hist16 *sl_split_hist(unsigned char *sp, int n) {
  return (struct sl_hist16 *)(sp + (size_t)n * sizeof(struct sl_split_row));
}
static __device__ __forceinline__ sl_u64 *sl_split_fx(unsigned char *sp, int n) {
  return (sl_u64 *)(sp + (size_t)n * (sizeof(struct sl_split_row) + sizeof(struct sl_hist16)));
}
static __device__ __forceinline__ uint32_t *sl_split_keys(unsigned char *sp, int n, int64_t vocab) {
  return (uint32_t *)(sl_split_fx(sp, n) + (size_t)n * (size_t)vocab);
}

/* 2.: grid (n, SL_G); block y takes a contiguous slice of the row (a multiple of 32 entries: whole warps) */
__global__ __launch_bounds__(SL_KT) void sl_keys_kernel(const float *logits, int64_t vocab,
                                                        const struct hb_sample_row *rows, const float *work,
                                                        unsigned char *sp) {
  const int n = gridDim.x, r = blockIdx.x, tid = threadIdx.x, lane = tid % 32;
  const struct sl_split_row st = sl_split_rows(sp, n)[r];
  if (!st.active) return; /* uniform over the block */
  const struct hb_sample_row P = rows[r];
  /* the row sample_kernel worked on: its penalised copy when it made one */
  const struct sl_src_row src = {(P.n_pen > 0 ? work : logits) + (int64_t)r * vocab, st.top, P.temperature};
  sl_u64 *fxs = sl_split_fx(sp, n) + (int64_t)r * vocab;
  uint32_t *keys = sl_split_keys(sp, n, vocab) + (int64_t)r * vocab;
  const int64_t chunk = ((vocab + gridDim.y - 1) / gridDim.y + 31) / 32 * 32, lo = (int64_t)blockIdx.y * chunk,
                end = lo + chunk < vocab ? lo + chunk : vocab;
  struct sl_hist16 *g = sl_split_hist(sp, n) + r;
  for (int64_t base = lo; base < end; base += blockDim.x) { /* the same trip count in every lane: whole warps */
    const int64_t i = base + tid;
    unsigned b = 0xffffffffu, hi = 0, lw = 0;
    if (i < end) {
      const uint32_t k = src.key(i);
      const sl_u64 f = k ? src.fx(i, k) : 0;
      keys[i] = k;
      fxs[i] = f;
      if (k) {
        b = k >> 16;
        hi = (unsigned)(f >> SL_SPLIT);
        lw = (unsigned)(f & ((1ull << SL_SPLIT) - 1));
      }
    }
    /* as sl_pass: one add a bucket a warp (a row of equal keys would otherwise queue every lane on one address) */
    const unsigned peers = __match_any_sync(0xffffffffu, b);
    const unsigned hs = __reduce_add_sync(peers, hi), ls = __reduce_add_sync(peers, lw);
    if (b != 0xffffffffu && lane == __ffs(peers) - 1) {
      atomicAdd(&g->cnt[b], (unsigned)__popc(peers));
      atomicAdd(&g->hi[b], (sl_u64)hs);
      atomicAdd(&g->lo[b], (sl_u64)ls);
    }
  }
}

/* 3.: one block a row */
__global__ __launch_bounds__(SAMPLE_THREADS) void sl_finish_kernel(int64_t vocab, const struct hb_sample_row *rows,
                                                                   unsigned char *sp, int32_t *ids) {
  __shared__ struct sl_state s_large;
  __shared__ int s_i[33];
  const int n = gridDim.x, r = blockIdx.x;
  const struct sl_split_row st = sl_split_rows(sp, n)[r];
  if (!st.active) return; /* uniform over the block */
  const struct hb_sample_row P = rows[r];
  const struct sl_src_pre src = {sl_split_keys(sp, n, vocab) + (int64_t)r * vocab,
                                 sl_split_fx(sp, n) + (int64_t)r * vocab,
                                 sl_split_hist(sp, n) + r};
  const int pick = sample_large(src, vocab, st.K, st.nc, P.top_p, P.min_p, P.u, &s_large, s_i);
  if (threadIdx.x == 0) ids[r] = pick;
}

#endif
