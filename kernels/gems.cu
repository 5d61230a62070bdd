// CUDA kernels of the gems G6 (branch independence), G10 (temporal consistency) and G12
// (predictive coding), forward and backward, with their host launchers.
//
// Graph-safe and deterministic (docs/design.md, "Ops and kernels"): every output element has exactly one
// writer, computed with a summation order fixed by the shapes alone (a group of lanes may
// cooperate on one sample, with a fixed xor butterfly; a tile of a G6 product is a running
// sum in increasing index order); scalars per member come from one block per member with a
// fixed reduction order. No atomics, no memset, no host sync, no allocation: scratch buffers
// are passed in by the torch binding.
#include <cstdint>

#include <cuda_runtime.h>

#include "fixed_order_reduce.cuh"
#include "tune_gems_kernels.h"

namespace tune_gems {
namespace {

// Variance floor of the G6 standardisation (the reference's g6_eps): kG6EpsRel x the branch's
// mean feature variance over the batch, + kG6EpsFloor, so G6 of c x f equals G6 of f.
constexpr double kG6EpsRel = 1e-3;
constexpr double kG6EpsFloor = 1e-12;

// ============================================================== G6 branch independence
// Layouts: f, z [P,K,B,D]; sd [P,K,D]; r [P,npairs,D,D] with pairs (k<l) in row-major
// triu order: (0,1), (0,2), ..., (0,K-1), (1,2), ...

// Index of pair (k, l), k < l, in triu order.
__device__ __forceinline__ int64_t g6_pair_index(int64_t k, int64_t l, int64_t K) {
  // pairs before row k: sum_{r<k} (K-1-r) = k*(K-1) - k*(k-1)/2
  return k * (K - 1) - k * (k - 1) / 2 + (l - k - 1);
}

// Inverse of g6_pair_index: pair index -> (k, l).
__device__ __forceinline__ void g6_pair_branches(int64_t pair, int64_t K, int64_t* k_out,
                                                 int64_t* l_out) {
  int64_t k = 0;
  int64_t remaining = pair;
  while (remaining >= K - 1 - k) {
    remaining -= K - 1 - k;
    ++k;
  }
  *k_out = k;
  *l_out = k + 1 + remaining;
}

// Standardisation tiles: a block handles one (p,k) and walks its features in tiles of
// kColumnTile consecutive d (a warp wide, so loads are coalesced) with kRowGroups warps (one
// block per branch, because the variance floor is the branch's mean variance); warp y sums the samples
// b = y, y + kRowGroups, ... in order, and the kRowGroups partials are combined in a fixed
// order. The summation order depends only on B, so results are bitwise reproducible.
constexpr int kColumnTile = 32;
constexpr int kRowGroups = 16;

// Fixed-order total of one column's kRowGroups partials; every thread of the column gets it.
template <typename T>
__device__ __forceinline__ T column_total(T partial, T (*shared)[kColumnTile]) {
  shared[threadIdx.y][threadIdx.x] = partial;
  __syncthreads();
  T total = T(0);
  for (int y = 0; y < kRowGroups; ++y) total += shared[y][threadIdx.x];
  __syncthreads();  // the buffer is reused by the next call
  return total;
}

// One block per branch (p,k), walking its features in tiles of kColumnTile columns. Pass 1:
// per column the mean and variance (1/B) over the batch (sd holds the variance for now), and
// each lane's running sum of its columns' variances in increasing d; the lanes' sums are then
// added in lane order, giving the branch's floor eps = kG6EpsRel x mean_d var + kG6EpsFloor.
// Pass 2: per column z = (f - mean) / sd with sd = sqrt(var + eps) (the mean recomputed as in
// pass 1, so bitwise the same). Summation orders depend only on B and D.
// Fixed-order total of the lanes' values (row group 0's; every row group holds the same), in
// lane order; every thread of the block gets it.
template <typename T>
__device__ __forceinline__ T lane_total(T lane_value, T (*shared)[kColumnTile]) {
  if (threadIdx.y == 0) shared[0][threadIdx.x] = lane_value;
  __syncthreads();
  T total = T(0);
  for (int x = 0; x < kColumnTile; ++x) total += shared[0][x];
  __syncthreads();  // the buffer is reused by the next call
  return total;
}

template <typename T>
__device__ __forceinline__ T g6_column_mean(const T* __restrict__ f, int64_t base, int64_t B, int64_t D,
                                            bool active, T (*partial)[kColumnTile]) {
  T sum = T(0);
  if (active)
    for (int64_t b = threadIdx.y; b < B; b += kRowGroups) sum += f[base + b * D];
  return column_total(sum, partial) / static_cast<T>(B);
}

template <typename T>
__global__ void __launch_bounds__(kColumnTile * kRowGroups, 1)
    g6_standardise_kernel(const T* __restrict__ f, int64_t B, int64_t D, T* __restrict__ z,
                          T* __restrict__ sd) {
  __shared__ T partial[kRowGroups][kColumnTile];
  const int64_t tiles = (D + kColumnTile - 1) / kColumnTile;
  const int64_t pk = blockIdx.x;
  T lane_var = T(0);
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t d = t * kColumnTile + threadIdx.x;
    const bool active = d < D;
    const int64_t base = pk * B * D + d;
    const T mean = g6_column_mean(f, base, B, D, active, partial);
    T sq = T(0);
    if (active)
      for (int64_t b = threadIdx.y; b < B; b += kRowGroups) {
        const T x = f[base + b * D] - mean;
        sq += x * x;
      }
    const T var = column_total(sq, partial) / static_cast<T>(B);
    if (active) {
      lane_var += var;
      if (threadIdx.y == 0) sd[pk * D + d] = var;
    }
  }
  const T eps = static_cast<T>(kG6EpsRel) * (lane_total(lane_var, partial) / static_cast<T>(D)) +
                static_cast<T>(kG6EpsFloor);
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t d = t * kColumnTile + threadIdx.x;
    const bool active = d < D;
    const int64_t base = pk * B * D + d;
    const T var = active ? sd[pk * D + d] : T(0);  // read by every row group before any rewrite:
    const T mean = g6_column_mean(f, base, B, D, active, partial);  // (its column_total syncs)
    if (!active) continue;
    const T s = dev_sqrt(var + eps);
    if (threadIdx.y == 0) sd[pk * D + d] = s;
    for (int64_t b = threadIdx.y; b < B; b += kRowGroups) z[base + b * D] = (f[base + b * D] - mean) / s;
  }
}

// ------------------------------------------------------------ G6 tiled products
// The pair correlations R_kl = z_k^T z_l / B (forward) and dL/dz_k = sum_{l!=k} z_l R_kl^T
// (backward) are small batched matrix products. A block of kG6Threads threads computes one
// kG6Tile x kG6Tile output tile, each thread a kG6Micro x kG6Micro register tile; the
// reduction index t runs in chunks of kG6Tile staged in shared memory, padded to kG6Pad
// columns so that both row- and column-wise staging stores are free of bank conflicts.
// Each output is one running sum over t = 0, 1, 2, ... in increasing order (zero padding of
// the last chunk adds exact zeros), so the bits depend only on the shapes.
constexpr int kG6Tile = 32;
constexpr int kG6Micro = 4;
constexpr int kG6Side = kG6Tile / kG6Micro;         // threads per tile side
constexpr int kG6Threads = kG6Side * kG6Side;       // 64
constexpr int kG6Pad = kG6Tile + 1;
constexpr int kG6Loads = kG6Tile * kG6Tile / kG6Threads;  // staged elements per thread

static_assert(kG6Tile % kG6Micro == 0, "tile must split into micro tiles");
static_assert(kG6Tile == kWarpSize, "staging maps one warp onto one tile row or column");
static_assert((kG6Tile * kG6Tile) % kG6Threads == 0, "staging must cover the tile evenly");

template <typename T>
struct G6Stage {
  T a[kG6Tile][kG6Pad];  // a[t][row]: operand of the tile's rows
  T b[kG6Tile][kG6Pad];  // b[t][col]: operand of the tile's columns
};

// dst[t][c] = src[t * t_stride + c * c_stride] for t < t_limit and c < c_limit, else 0
// (t, c < kG6Tile). When t_contiguous (t_stride == 1 in memory), consecutive lanes take
// consecutive t, else consecutive c: either way a warp reads one contiguous run of global
// memory, and the padded rows make its shared-memory stores hit distinct banks.
// Thread x stages fast index x % 32 and slow indices x / 32 + u * kG6SlowStep, u < kG6Loads.
constexpr int kG6SlowStep = kG6Threads / kWarpSize;
static_assert(kG6Threads % kWarpSize == 0 && kG6SlowStep * kG6Loads == kG6Tile,
              "staging must cover the tile exactly");

template <typename T>
__device__ __forceinline__ void g6_stage(T (*dst)[kG6Pad], const T* __restrict__ src,
                                         int64_t t_stride, int64_t c_stride, int64_t t_limit,
                                         int64_t c_limit, bool t_contiguous) {
  const int fast = static_cast<int>(threadIdx.x) % kWarpSize;
  const int slow0 = static_cast<int>(threadIdx.x) / kWarpSize;
  const int64_t fast_stride = t_contiguous ? t_stride : c_stride;
  const int64_t slow_stride = t_contiguous ? c_stride : t_stride;
  const int64_t fast_limit = t_contiguous ? t_limit : c_limit;
  const int64_t slow_limit = t_contiguous ? c_limit : t_limit;
  const bool fast_ok = fast < fast_limit;
  const T* at = src + fast * fast_stride + slow0 * slow_stride;
  const int64_t step = kG6SlowStep * slow_stride;
  T v[kG6Loads];
#pragma unroll
  for (int u = 0; u < kG6Loads; ++u) {
    const int slow = slow0 + u * kG6SlowStep;
    v[u] = (fast_ok && slow < slow_limit) ? at[u * step] : T(0);
  }
#pragma unroll
  for (int u = 0; u < kG6Loads; ++u) {
    const int slow = slow0 + u * kG6SlowStep;
    if (t_contiguous)
      dst[fast][slow] = v[u];
    else
      dst[slow][fast] = v[u];
  }
}

template <typename T>
__device__ __forceinline__ void g6_zero_tile(T (&acc)[kG6Micro][kG6Micro]) {
#pragma unroll
  for (int rr = 0; rr < kG6Micro; ++rr)
#pragma unroll
    for (int q = 0; q < kG6Micro; ++q) acc[rr][q] = T(0);
}

// acc[r][q] += sum_{t < kG6Tile} a[t][ty*kG6Micro + r] * b[t][tx*kG6Micro + q], t ascending.
template <typename T>
__device__ __forceinline__ void g6_tile_accumulate(const G6Stage<T>& stage, int tx, int ty,
                                                   T (&acc)[kG6Micro][kG6Micro]) {
#pragma unroll 8
  for (int t = 0; t < kG6Tile; ++t) {
    T av[kG6Micro];
    T bv[kG6Micro];
#pragma unroll
    for (int r = 0; r < kG6Micro; ++r) av[r] = stage.a[t][ty * kG6Micro + r];
#pragma unroll
    for (int q = 0; q < kG6Micro; ++q) bv[q] = stage.b[t][tx * kG6Micro + q];
#pragma unroll
    for (int r = 0; r < kG6Micro; ++r)
#pragma unroll
      for (int q = 0; q < kG6Micro; ++q) acc[r][q] += av[r] * bv[q];
  }
}

__host__ __device__ __forceinline__ int64_t g6_tiles(int64_t n) { return (n + kG6Tile - 1) / kG6Tile; }

// R_kl[i,j] = sum_b z_k[b,i] z_l[b,j] / B for every (p, pair, i, j): one block per 32 x 32
// tile (i, j) of one (p, pair), tiles in the order (p, pair, i-tile, j-tile).
template <typename T>
__global__ void __launch_bounds__(kG6Threads, 1)
    g6_correlation_kernel(const T* __restrict__ z, int64_t P, int64_t K, int64_t B, int64_t D,
                          int64_t npairs, T* __restrict__ r) {
  __shared__ G6Stage<T> stage;
  const int tx = static_cast<int>(threadIdx.x) % kG6Side;
  const int ty = static_cast<int>(threadIdx.x) / kG6Side;
  const int64_t tiles_d = g6_tiles(D);
  const int64_t tiles = P * npairs * tiles_d * tiles_d;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t tile_j = tile % tiles_d;
    const int64_t tile_i = (tile / tiles_d) % tiles_d;
    const int64_t pair = (tile / (tiles_d * tiles_d)) % npairs;
    const int64_t p = tile / (tiles_d * tiles_d * npairs);
    int64_t k, l;
    g6_pair_branches(pair, K, &k, &l);
    const T* zk = z + (p * K + k) * B * D;
    const T* zl = z + (p * K + l) * B * D;
    const int64_t i0 = tile_i * kG6Tile;
    const int64_t j0 = tile_j * kG6Tile;
    T acc[kG6Micro][kG6Micro];
    g6_zero_tile(acc);
    for (int64_t b0 = 0; b0 < B; b0 += kG6Tile) {
      // a[t][c] = z_k[b0+t, i0+c], b[t][c] = z_l[b0+t, j0+c]: contiguous along c.
      g6_stage(stage.a, zk + b0 * D + i0, D, 1, B - b0, D - i0, false);
      g6_stage(stage.b, zl + b0 * D + j0, D, 1, B - b0, D - j0, false);
      __syncthreads();
      g6_tile_accumulate(stage, tx, ty, acc);
      __syncthreads();
    }
    T* out = r + (p * npairs + pair) * D * D;
#pragma unroll
    for (int rr = 0; rr < kG6Micro; ++rr) {
      const int64_t i = i0 + ty * kG6Micro + rr;
#pragma unroll
      for (int q = 0; q < kG6Micro; ++q) {
        const int64_t j = j0 + tx * kG6Micro + q;
        if (i < D && j < D) out[i * D + j] = acc[rr][q] / static_cast<T>(B);
      }
    }
  }
}

// dL/dz_k[b,i] = grad_value[p] * 2 / (npairs*D*D*B) * sum_{l != k} sum_j z_l[b,j] R_kl[i,j],
// where R_kl = r[pair(k,l)][i][j] for k<l and R_kl = R_lk^T = r[pair(l,k)][j][i] for k>l.
// One block per 32 x 32 tile (b, i) of one (p, k), tiles in the order (p, k, b-tile, i-tile);
// the sum runs over l ascending, then j ascending.
template <typename T>
__global__ void __launch_bounds__(kG6Threads, 1)
    g6_grad_z_kernel(const T* __restrict__ grad_value, const T* __restrict__ z,
                     const T* __restrict__ r, int64_t P, int64_t K, int64_t B, int64_t D,
                     int64_t npairs, T* __restrict__ grad_z) {
  __shared__ G6Stage<T> stage;
  const int tx = static_cast<int>(threadIdx.x) % kG6Side;
  const int ty = static_cast<int>(threadIdx.x) / kG6Side;
  const int64_t tiles_d = g6_tiles(D);
  const int64_t tiles_b = g6_tiles(B);
  const int64_t tiles = P * K * tiles_b * tiles_d;
  const int64_t DD = D * D;
  // No pair (K < 2): value is the constant 0 and so is its gradient.
  const T scale = npairs > 0 ? static_cast<T>(2) / (static_cast<T>(npairs) * static_cast<T>(DD) *
                                                    static_cast<T>(B))
                             : T(0);
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t tile_i = tile % tiles_d;
    const int64_t tile_b = (tile / tiles_d) % tiles_b;
    const int64_t k = (tile / (tiles_d * tiles_b)) % K;
    const int64_t p = tile / (tiles_d * tiles_b * K);
    const int64_t b0 = tile_b * kG6Tile;
    const int64_t i0 = tile_i * kG6Tile;
    T acc[kG6Micro][kG6Micro];
    g6_zero_tile(acc);
    for (int64_t l = 0; l < K; ++l) {
      if (l == k) continue;
      const T* zl = z + (p * K + l) * B * D;
      const bool k_first = k < l;
      const T* rkl = r + (p * npairs + (k_first ? g6_pair_index(k, l, K) : g6_pair_index(l, k, K))) * DD;
      for (int64_t j0 = 0; j0 < D; j0 += kG6Tile) {
        // a[t][c] = z_l[b0+c, j0+t]: contiguous along t.
        g6_stage(stage.a, zl + b0 * D + j0, 1, D, D - j0, B - b0, true);
        // b[t][c] = R_kl[i0+c, j0+t]: for k<l that is r[pair(k,l)][i0+c][j0+t], contiguous
        // along t; for k>l it is r[pair(l,k)][j0+t][i0+c], contiguous along c.
        if (k_first)
          g6_stage(stage.b, rkl + i0 * D + j0, 1, D, D - j0, D - i0, true);
        else
          g6_stage(stage.b, rkl + j0 * D + i0, D, 1, D - j0, D - i0, false);
        __syncthreads();
        g6_tile_accumulate(stage, tx, ty, acc);
        __syncthreads();
      }
    }
    const T factor = grad_value[p] * scale;
    T* out = grad_z + (p * K + k) * B * D;
#pragma unroll
    for (int rr = 0; rr < kG6Micro; ++rr) {
      const int64_t b = b0 + ty * kG6Micro + rr;
#pragma unroll
      for (int q = 0; q < kG6Micro; ++q) {
        const int64_t i = i0 + tx * kG6Micro + q;
        if (b < B && i < D) out[b * D + i] = factor * acc[rr][q];
      }
    }
  }
}

// Per branch (p,k), in place on grad (which holds dL/dz on entry), one block walking the
// columns like g6_standardise_kernel. Per column: dL/df_b = (g_b - mean_B g - z_b mean_B(g z)) / sd,
// plus the path through the branch's floor eps = kG6EpsRel mean_d var_d:
// + G z_b sd with G = -(kG6EpsRel / D) sum_d mean_B(g z)_d / sd_d^2. Pass 1 forms G (lane sums
// in increasing d, then in lane order); pass 2 recomputes each column's means and writes.
template <typename T>
__device__ __forceinline__ void g6_column_grad_means(const T* __restrict__ z, const T* grad, int64_t base,
                                                     int64_t B, int64_t D, bool active,
                                                     T (*partial)[kColumnTile], T* mean_g, T* mean_gz) {
  T sum_g = T(0);
  T sum_gz = T(0);
  if (active)
    for (int64_t b = threadIdx.y; b < B; b += kRowGroups) {
      const T g = grad[base + b * D];
      sum_g += g;
      sum_gz += g * z[base + b * D];
    }
  *mean_g = column_total(sum_g, partial) / static_cast<T>(B);
  *mean_gz = column_total(sum_gz, partial) / static_cast<T>(B);
}

template <typename T>
__global__ void __launch_bounds__(kColumnTile * kRowGroups, 1)
    g6_standardise_backward_kernel(const T* __restrict__ z, const T* __restrict__ sd, int64_t B,
                                   int64_t D, T* __restrict__ grad) {
  __shared__ T partial[kRowGroups][kColumnTile];
  const int64_t tiles = (D + kColumnTile - 1) / kColumnTile;
  const int64_t pk = blockIdx.x;
  T lane_sum = T(0);
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t d = t * kColumnTile + threadIdx.x;
    const bool active = d < D;
    T mean_g, mean_gz;
    g6_column_grad_means(z, grad, pk * B * D + d, B, D, active, partial, &mean_g, &mean_gz);
    if (active) {
      const T s = sd[pk * D + d];
      lane_sum += mean_gz / (s * s);
    }
  }
  const T G = -(static_cast<T>(kG6EpsRel) / static_cast<T>(D)) * lane_total(lane_sum, partial);
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t d = t * kColumnTile + threadIdx.x;
    const bool active = d < D;
    const int64_t base = pk * B * D + d;
    T mean_g, mean_gz;  // the column's sums read its grad before any of it is rewritten (syncs)
    g6_column_grad_means(z, grad, base, B, D, active, partial, &mean_g, &mean_gz);
    if (!active) continue;
    const T s = sd[pk * D + d];
    for (int64_t b = threadIdx.y; b < B; b += kRowGroups) {
      const int64_t at = base + b * D;
      grad[at] = (grad[at] - mean_g - z[at] * mean_gz) / s + G * z[at] * s;
    }
  }
}

// Shared by forward and backward: standardise, then the pair correlations (if any pair).
template <typename T>
cudaError_t g6_standardise_and_correlate(const T* f, int64_t P, int64_t K, int64_t B, int64_t D,
                                         T* z, T* sd, T* r, cudaStream_t stream) {
  const int64_t npairs = g6_num_pairs(K);
  const dim3 tile(kColumnTile, kRowGroups);
  g6_standardise_kernel<T><<<static_cast<unsigned int>(P * K), tile, 0, stream>>>(f, B, D, z, sd);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess || npairs == 0) return err;
  const int64_t tiles_d = g6_tiles(D);
  g6_correlation_kernel<T><<<clamp_blocks(P * npairs * tiles_d * tiles_d), kG6Threads, 0, stream>>>(
      z, P, K, B, D, npairs, r);
  return cudaGetLastError();
}

// ============================================================== G10 / G12 (same shape of math)
// per_sample[s] = nd[s] * mean_{e<width} (a[s,e] - b[s,e])^2. A group of lanes_for(width)
// lanes cooperates on one sample: lane g sums e = g, g + lanes, ... in order (coalesced
// across the group), then a fixed xor butterfly; lane 0 of the group writes the sample.
template <typename T>
struct MaskedMseSample {
  const T* __restrict__ a;
  const T* __restrict__ b;
  const T* __restrict__ nd;
  int64_t width;

  __device__ __forceinline__ T operator()(int64_t s, int group_lane, int lanes, bool valid) const {
    T acc = T(0);
    if (valid) {
      const T* as = a + s * width;
      const T* bs = b + s * width;
      for (int64_t e = group_lane; e < width; e += lanes) {
        const T d = as[e] - bs[e];
        acc += d * d;
      }
    }
    acc = group_sum(acc, lanes);
    return valid ? nd[s] * (acc / static_cast<T>(width)) : T(0);
  }
};

// grad_a = w_s * nd[s] * 2 (a - b) / width, with w_s the sample weight; grad_b (when not
// null) = -grad_a. A group of `lanes` lanes per sample s (weight computed once per sample),
// lane g writes the elements e = g, g + lanes, ... (coalesced across the group).
template <typename T>
__global__ void __launch_bounds__(kThreadsPerBlock, 1)
    masked_mse_backward_kernel(const T* __restrict__ grad_per_sample,
                               const T* __restrict__ grad_value, const T* __restrict__ a,
                               const T* __restrict__ b, const T* __restrict__ nd, int64_t P,
                               int64_t B, int64_t width, int lanes, T* __restrict__ grad_a,
                               T* __restrict__ grad_b) {
  const int64_t samples = P * B;
  const LaneGroups g(lanes);
  const int group_lane = g.group_lane;
  for (int64_t base = g.first; base < samples; base += g.stride) {
    const int64_t s = base + g.group;
    if (s >= samples) continue;
    const int64_t p = s / B;
    const T coef = sample_weight(grad_per_sample, grad_value, s, p, B) * nd[s];
    const int64_t row = s * width;
    for (int64_t e = group_lane; e < width; e += lanes) {
      const T g = coef * (static_cast<T>(2) * (a[row + e] - b[row + e]) / static_cast<T>(width));
      grad_a[row + e] = g;
      if (grad_b != nullptr) grad_b[row + e] = -g;
    }
  }
}

template <typename T>
cudaError_t masked_mse_forward(const T* a, const T* b, const T* nd, int64_t P, int64_t B,
                               int64_t width, T* per_sample, T* value, cudaStream_t stream) {
  if (P * B <= 0 || width <= 0) return cudaSuccess;
  return launch_per_sample_and_mean<T>(MaskedMseSample<T>{a, b, nd, width}, P, B, width,
                                       lanes_for(width), per_sample, value, stream);
}

template <typename T>
cudaError_t masked_mse_backward(const T* grad_per_sample, const T* grad_value, const T* a,
                                const T* b, const T* nd, int64_t P, int64_t B, int64_t width,
                                T* grad_a, T* grad_b, cudaStream_t stream) {
  const int64_t samples = P * B;
  if (samples <= 0 || width <= 0) return cudaSuccess;
  const int lanes = lanes_for(width);
  masked_mse_backward_kernel<T><<<grouped_blocks_for(samples, lanes), kThreadsPerBlock, 0, stream>>>(
      grad_per_sample, grad_value, a, b, nd, P, B, width, lanes, grad_a, grad_b);
  return cudaGetLastError();
}

}  // namespace

// ============================================================== launchers

template <typename T>
cudaError_t g6_forward(const T* f, int64_t P, int64_t K, int64_t B, int64_t D, T* z, T* sd, T* r,
                       T* value, cudaStream_t stream) {
  if (P <= 0) return cudaSuccess;
  const int64_t npairs = g6_num_pairs(K);
  if (K > 0 && B > 0 && D > 0) {
    const cudaError_t err = g6_standardise_and_correlate(f, P, K, B, D, z, sd, r, stream);
    if (err != cudaSuccess) return err;
  }
  // value[p] = mean over pairs and i,j of R^2 (0 when there is no pair): one block per member.
  return launch_row_mean<T, true>(r, P, npairs * D * D, value, stream);
}

template <typename T>
cudaError_t g6_backward(const T* grad_value, const T* f, int64_t P, int64_t K, int64_t B,
                        int64_t D, T* z, T* sd, T* r, T* grad_f, cudaStream_t stream) {
  const int64_t items = P * K * B * D;
  if (items <= 0) return cudaSuccess;
  const int64_t npairs = g6_num_pairs(K);
  cudaError_t err = g6_standardise_and_correlate(f, P, K, B, D, z, sd, r, stream);
  if (err != cudaSuccess) return err;
  // dL/dz into grad_f (all zeros when there is no pair), then through the standardisation.
  g6_grad_z_kernel<T><<<clamp_blocks(P * K * g6_tiles(B) * g6_tiles(D)), kG6Threads, 0, stream>>>(
      grad_value, z, r, P, K, B, D, npairs, grad_f);
  err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  const dim3 tile(kColumnTile, kRowGroups);
  g6_standardise_backward_kernel<T><<<static_cast<unsigned int>(P * K), tile, 0, stream>>>(
      z, sd, B, D, grad_f);
  return cudaGetLastError();
}

template <typename T>
cudaError_t g10_forward(const T* q_t, const T* q_tp1, const T* nd, int64_t P, int64_t B,
                        int64_t KA, T* per_sample, T* value, cudaStream_t stream) {
  return masked_mse_forward(q_t, q_tp1, nd, P, B, KA, per_sample, value, stream);
}

template <typename T>
cudaError_t g10_backward(const T* grad_per_sample, const T* grad_value, const T* q_t,
                         const T* q_tp1, const T* nd, int64_t P, int64_t B, int64_t KA,
                         T* grad_q_t, T* grad_q_tp1, cudaStream_t stream) {
  return masked_mse_backward(grad_per_sample, grad_value, q_t, q_tp1, nd, P, B, KA, grad_q_t,
                             grad_q_tp1, stream);
}

template <typename T>
cudaError_t g12_forward(const T* pred, const T* target, const T* nd, int64_t P, int64_t B,
                        int64_t D, T* per_sample, T* value, cudaStream_t stream) {
  return masked_mse_forward(pred, target, nd, P, B, D, per_sample, value, stream);
}

template <typename T>
cudaError_t g12_backward(const T* grad_per_sample, const T* grad_value, const T* pred,
                         const T* target, const T* nd, int64_t P, int64_t B, int64_t D,
                         T* grad_pred, cudaStream_t stream) {
  return masked_mse_backward<T>(grad_per_sample, grad_value, pred, target, nd, P, B, D,
                                grad_pred, nullptr, stream);
}

#define TUNE_GEMS_INSTANTIATE_GEMS(T)                                                          \
  template cudaError_t g6_forward<T>(const T*, int64_t, int64_t, int64_t, int64_t, T*, T*, T*, \
                                     T*, cudaStream_t);                                        \
  template cudaError_t g6_backward<T>(const T*, const T*, int64_t, int64_t, int64_t, int64_t,  \
                                      T*, T*, T*, T*, cudaStream_t);                           \
  template cudaError_t g10_forward<T>(const T*, const T*, const T*, int64_t, int64_t, int64_t, \
                                      T*, T*, cudaStream_t);                                   \
  template cudaError_t g10_backward<T>(const T*, const T*, const T*, const T*, const T*,       \
                                       int64_t, int64_t, int64_t, T*, T*, cudaStream_t);       \
  template cudaError_t g12_forward<T>(const T*, const T*, const T*, int64_t, int64_t, int64_t, \
                                      T*, T*, cudaStream_t);                                   \
  template cudaError_t g12_backward<T>(const T*, const T*, const T*, const T*, const T*,       \
                                       int64_t, int64_t, int64_t, T*, cudaStream_t);

TUNE_GEMS_INSTANTIATE_GEMS(float)
TUNE_GEMS_INSTANTIATE_GEMS(double)

#undef TUNE_GEMS_INSTANTIATE_GEMS

}  // namespace tune_gems
