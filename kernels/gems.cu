// CUDA kernels of the gems G6 (branch independence), G10 (temporal consistency) and G12
// (predictive coding), forward and backward, with their host launchers.
//
// Graph-safe and deterministic (DESIGN.md "Kernels"): one thread per sample (or per output
// element) computes its value with a sequential loop and writes it once; scalars per member
// come from row_mean_kernel (one block per member, fixed tree). No atomics, no memset, no host
// sync, no allocation: scratch buffers are passed in by the torch binding.
#include <cstdint>

#include <cuda_runtime.h>

#include "fixed_order_reduce.cuh"
#include "tune_gems_kernels.h"

namespace tune_gems {
namespace {

// Variance floor of the G6 standardisation (the reference's G6_EPS).
constexpr double kG6Eps = 1e-5;

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

// Standardisation tiles: a block covers kColumnTile consecutive features d of one (p,k) (a
// warp wide, so loads are coalesced) and kRowGroups warps; warp y sums the samples
// b = y, y + kRowGroups, ... in order, and the kRowGroups partials are combined in a fixed
// order. The summation order depends only on B, so results are bitwise reproducible.
constexpr int kColumnTile = 32;
constexpr int kRowGroups = 8;

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

inline unsigned int g6_column_blocks(int64_t PK, int64_t D) {
  return static_cast<unsigned int>(PK * ((D + kColumnTile - 1) / kColumnTile));
}

// Per column (p,k,d): mean and variance (1/B) over the batch, then
// z = (f - mean) / sd with sd = sqrt(var + eps), two passes as in the reference.
template <typename T>
__global__ void __launch_bounds__(kColumnTile * kRowGroups)
    g6_standardise_kernel(const T* __restrict__ f, int64_t B, int64_t D, T* __restrict__ z,
                          T* __restrict__ sd) {
  __shared__ T partial[kRowGroups][kColumnTile];
  const int64_t tiles = (D + kColumnTile - 1) / kColumnTile;
  const int64_t pk = blockIdx.x / tiles;
  const int64_t d = (blockIdx.x % tiles) * kColumnTile + threadIdx.x;
  const bool active = d < D;
  const int64_t base = pk * B * D + d;
  T sum = T(0);
  if (active)
    for (int64_t b = threadIdx.y; b < B; b += kRowGroups) sum += f[base + b * D];
  const T mean = column_total(sum, partial) / static_cast<T>(B);
  T sq = T(0);
  if (active)
    for (int64_t b = threadIdx.y; b < B; b += kRowGroups) {
      const T x = f[base + b * D] - mean;
      sq += x * x;
    }
  const T s = dev_sqrt(column_total(sq, partial) / static_cast<T>(B) + static_cast<T>(kG6Eps));
  if (!active) return;
  if (threadIdx.y == 0) sd[pk * D + d] = s;
  for (int64_t b = threadIdx.y; b < B; b += kRowGroups) z[base + b * D] = (f[base + b * D] - mean) / s;
}

// One thread per (p, pair, i, j): R_kl[i,j] = sum_b z_k[b,i] z_l[b,j] / B.
template <typename T>
__global__ void g6_correlation_kernel(const T* __restrict__ z, int64_t P, int64_t K, int64_t B,
                                      int64_t D, int64_t npairs, T* __restrict__ r) {
  const int64_t DD = D * D;
  const int64_t items = P * npairs * DD;
  for (int64_t e = first_item(); e < items; e += item_stride()) {
    const int64_t j = e % D;
    const int64_t i = (e / D) % D;
    const int64_t pair = (e / DD) % npairs;
    const int64_t p = e / (DD * npairs);
    int64_t k, l;
    g6_pair_branches(pair, K, &k, &l);
    const T* zk = z + (p * K + k) * B * D + i;
    const T* zl = z + (p * K + l) * B * D + j;
    T acc = T(0);
    for (int64_t b = 0; b < B; ++b) acc += zk[b * D] * zl[b * D];
    r[e] = acc / static_cast<T>(B);
  }
}

// One thread per (p,k,b,i): dvalue/dz_k[b,i] times grad_value[p],
//   = grad_value[p] * 2 / (npairs*D*D*B) * sum_{l != k} sum_j R_kl[i,j] z_l[b,j],
// where R_kl = r[pair(k,l)][i][j] for k<l and R_kl = R_lk^T = r[pair(l,k)][j][i] for k>l.
template <typename T>
__global__ void g6_grad_z_kernel(const T* __restrict__ grad_value, const T* __restrict__ z,
                                 const T* __restrict__ r, int64_t P, int64_t K, int64_t B,
                                 int64_t D, int64_t npairs, T* __restrict__ grad_z) {
  const int64_t items = P * K * B * D;
  const int64_t DD = D * D;
  for (int64_t e = first_item(); e < items; e += item_stride()) {
    const int64_t i = e % D;
    const int64_t b = (e / D) % B;
    const int64_t k = (e / (D * B)) % K;
    const int64_t p = e / (D * B * K);
    T acc = T(0);
    for (int64_t l = 0; l < K; ++l) {
      if (l == k) continue;
      const T* zl = z + ((p * K + l) * B + b) * D;
      if (k < l) {
        const T* rkl = r + (p * npairs + g6_pair_index(k, l, K)) * DD + i * D;  // row i
        for (int64_t j = 0; j < D; ++j) acc += rkl[j] * zl[j];
      } else {
        const T* rlk = r + (p * npairs + g6_pair_index(l, k, K)) * DD + i;  // column i
        for (int64_t j = 0; j < D; ++j) acc += rlk[j * D] * zl[j];
      }
    }
    // No pair (K < 2): value is the constant 0 and so is its gradient.
    const T scale = npairs > 0 ? static_cast<T>(2) / (static_cast<T>(npairs) * static_cast<T>(DD) *
                                                      static_cast<T>(B))
                               : T(0);
    grad_z[e] = grad_value[p] * scale * acc;
  }
}

// Per column (p,k,d), in place on grad (which holds dL/dz on entry), tiled like
// g6_standardise_kernel:  dL/df_b = (g_b - mean_B g - z_b * mean_B(g z)) / sd.
template <typename T>
__global__ void __launch_bounds__(kColumnTile * kRowGroups)
    g6_standardise_backward_kernel(const T* __restrict__ z, const T* __restrict__ sd, int64_t B,
                                   int64_t D, T* __restrict__ grad) {
  __shared__ T partial[kRowGroups][kColumnTile];
  const int64_t tiles = (D + kColumnTile - 1) / kColumnTile;
  const int64_t pk = blockIdx.x / tiles;
  const int64_t d = (blockIdx.x % tiles) * kColumnTile + threadIdx.x;
  const bool active = d < D;
  const int64_t base = pk * B * D + d;
  T sum_g = T(0);
  T sum_gz = T(0);
  if (active)
    for (int64_t b = threadIdx.y; b < B; b += kRowGroups) {
      const T g = grad[base + b * D];
      sum_g += g;
      sum_gz += g * z[base + b * D];
    }
  const T mean_g = column_total(sum_g, partial) / static_cast<T>(B);
  const T mean_gz = column_total(sum_gz, partial) / static_cast<T>(B);
  if (!active) return;
  const T s = sd[pk * D + d];
  for (int64_t b = threadIdx.y; b < B; b += kRowGroups) {
    const int64_t at = base + b * D;
    grad[at] = (grad[at] - mean_g - z[at] * mean_gz) / s;
  }
}

// Shared by forward and backward: standardise, then the pair correlations (if any pair).
template <typename T>
cudaError_t g6_standardise_and_correlate(const T* f, int64_t P, int64_t K, int64_t B, int64_t D,
                                         T* z, T* sd, T* r, cudaStream_t stream) {
  const int64_t npairs = g6_num_pairs(K);
  const dim3 tile(kColumnTile, kRowGroups);
  g6_standardise_kernel<T><<<g6_column_blocks(P * K, D), tile, 0, stream>>>(f, B, D, z, sd);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess || npairs == 0) return err;
  const int64_t correlations = P * npairs * D * D;
  g6_correlation_kernel<T><<<blocks_for(correlations), kThreadsPerBlock, 0, stream>>>(z, P, K, B, D, npairs, r);
  return cudaGetLastError();
}

// ============================================================== G10 / G12 (same shape of math)
// per_sample[s] = nd[s] * mean_{e<width} (a[s,e] - b[s,e])^2, one thread per sample s.
template <typename T>
__global__ void masked_mse_per_sample_kernel(const T* __restrict__ a, const T* __restrict__ b,
                                             const T* __restrict__ nd, int64_t samples,
                                             int64_t width, T* __restrict__ per_sample) {
  for (int64_t s = first_item(); s < samples; s += item_stride()) {
    const T* as = a + s * width;
    const T* bs = b + s * width;
    T acc = T(0);
    for (int64_t e = 0; e < width; ++e) {
      const T d = as[e] - bs[e];
      acc += d * d;
    }
    per_sample[s] = nd[s] * (acc / static_cast<T>(width));
  }
}

// One thread per element (s, e): grad_a = w_s * nd[s] * 2 (a - b) / width, with w_s the
// sample weight; grad_b (when not null) = -grad_a.
template <typename T>
__global__ void masked_mse_backward_kernel(const T* __restrict__ grad_per_sample,
                                           const T* __restrict__ grad_value,
                                           const T* __restrict__ a, const T* __restrict__ b,
                                           const T* __restrict__ nd, int64_t P, int64_t B,
                                           int64_t width, T* __restrict__ grad_a,
                                           T* __restrict__ grad_b) {
  const int64_t items = P * B * width;
  for (int64_t e = first_item(); e < items; e += item_stride()) {
    const int64_t s = e / width;
    const int64_t p = s / B;
    const T w = sample_weight(grad_per_sample, grad_value, s, p, B);
    const T g = w * nd[s] * (static_cast<T>(2) * (a[e] - b[e]) / static_cast<T>(width));
    grad_a[e] = g;
    if (grad_b != nullptr) grad_b[e] = -g;
  }
}

template <typename T>
cudaError_t masked_mse_forward(const T* a, const T* b, const T* nd, int64_t P, int64_t B,
                               int64_t width, T* per_sample, T* value, cudaStream_t stream) {
  const int64_t samples = P * B;
  if (samples <= 0) return cudaSuccess;
  masked_mse_per_sample_kernel<T><<<blocks_for(samples), kThreadsPerBlock, 0, stream>>>(
      a, b, nd, samples, width, per_sample);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  return launch_row_mean<T, false>(per_sample, P, B, value, stream);
}

template <typename T>
cudaError_t masked_mse_backward(const T* grad_per_sample, const T* grad_value, const T* a,
                                const T* b, const T* nd, int64_t P, int64_t B, int64_t width,
                                T* grad_a, T* grad_b, cudaStream_t stream) {
  const int64_t items = P * B * width;
  if (items <= 0) return cudaSuccess;
  masked_mse_backward_kernel<T><<<blocks_for(items), kThreadsPerBlock, 0, stream>>>(
      grad_per_sample, grad_value, a, b, nd, P, B, width, grad_a, grad_b);
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
  g6_grad_z_kernel<T><<<blocks_for(items), kThreadsPerBlock, 0, stream>>>(
      grad_value, z, r, P, K, B, D, npairs, grad_f);
  err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  const dim3 tile(kColumnTile, kRowGroups);
  g6_standardise_backward_kernel<T><<<g6_column_blocks(P * K, D), tile, 0, stream>>>(
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
