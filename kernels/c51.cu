// CUDA kernels of the C51 distributional head: the categorical projection (gather form) and
// the cross-entropy loss (forward and backward), with their host launchers.
//
// Graph-safe and deterministic (docs/design.md, "Ops and kernels"): the projection computes each output
// atom m_j by gathering over the input atoms i in increasing order (no scatter, no atomics);
// the loss gives each sample (forward) or row (backward) to a group of lanes that reduces
// with a fixed xor butterfly, one lane writes each per-sample value, and the per-member value
// is a fixed-order reduction of them (fixed_order_reduce.cuh).
#include <cstdint>

#include <cuda_runtime.h>

#include "fixed_order_reduce.cuh"
#include "tune_gems_kernels.h"

namespace tune_gems {
namespace {

// Warps per block of the projection (one row per warp at a time).
constexpr int kProjectWarps = kThreadsPerBlock / kWarpSize;

// One warp per row n (grid-stride over rows, uniform across the warp); lane c computes the
// output atoms j = c, c + 32, ...:
//   m[n,j] = sum_i p[n,i] * max(0, 1 - |Tz_i - z_j| / dz),
//   Tz_i = clamp(r[n] + g[n] * z_i, v_min, v_max),  z_i = v_min + i * dz.
// Tz_i and p_i are computed once per 32 input atoms by lane i % 32 and staged in the warp's
// shared slice; every lane then sums over i in increasing order. 1/dz is a multiplication by
// inv_dz (the host's double reciprocal, rounded to T).
template <typename T>
__global__ void __launch_bounds__(kThreadsPerBlock, 1)
    c51_project_kernel(const T* __restrict__ p, const T* __restrict__ r,
                       const T* __restrict__ g, int64_t N, int64_t atoms, T v_min, T v_max,
                       T dz, T inv_dz, T* __restrict__ m) {
  __shared__ T stage_tz[kProjectWarps][kWarpSize];
  __shared__ T stage_p[kProjectWarps][kWarpSize];
  const int lane = static_cast<int>(threadIdx.x) & (kWarpSize - 1);
  const int warp_in_block = static_cast<int>(threadIdx.x) / kWarpSize;
  T* tz_s = stage_tz[warp_in_block];
  T* p_s = stage_p[warp_in_block];
  const int64_t warps = item_stride() / kWarpSize;
  for (int64_t n = first_item() / kWarpSize; n < N; n += warps) {
    const T r_n = r[n];
    const T g_n = g[n];
    const T* p_n = p + n * atoms;
    T* m_n = m + n * atoms;
    for (int64_t j0 = 0; j0 < atoms; j0 += kWarpSize) {
      const int64_t j = j0 + lane;
      const T z_j = v_min + dz * static_cast<T>(j);
      T acc = T(0);
      for (int64_t i0 = 0; i0 < atoms; i0 += kWarpSize) {
        const int64_t i = i0 + lane;
        __syncwarp();  // the previous chunk's readers are done
        if (i < atoms) {
          const T z_i = v_min + dz * static_cast<T>(i);
          T tz = r_n + g_n * z_i;
          tz = tz < v_min ? v_min : (tz > v_max ? v_max : tz);
          tz_s[lane] = tz;
          p_s[lane] = p_n[i];
        }
        __syncwarp();
        const int count = atoms - i0 < kWarpSize ? static_cast<int>(atoms - i0) : kWarpSize;
        for (int ii = 0; ii < count; ++ii) {
          T w = T(1) - dev_abs(tz_s[ii] - z_j) * inv_dz;
          w = w > T(0) ? w : T(0);
          acc += p_s[ii] * w;
        }
      }
      if (j < atoms) m_n[j] = acc;
    }
  }
}

// Loss of sample s = (p,b) by an aligned group of `lanes` lanes:
//   per_sample[s] = mean_k -sum_j m_j log_softmax(l)_j
//                 = mean_k [ sum_m * log(sum_exp) + sum_j m_j (max - l_j) ],
// a sum of non-negative terms for m >= 0 (no cancellation). Rows k in increasing order; lane
// g takes atoms j = g, g + lanes, ...; group_max / group_sum combine the lanes.
template <typename T>
struct C51LossSample {
  const T* __restrict__ logits;
  const T* __restrict__ m;
  int64_t K;
  int64_t atoms;

  __device__ __forceinline__ T operator()(int64_t s, int group_lane, int lanes, bool valid) const {
    T total = T(0);
    for (int64_t k = 0; k < K; ++k) {
      const T* l = valid ? logits + (s * K + k) * atoms : logits;
      const T* mk = valid ? m + (s * K + k) * atoms : m;
      const T max = group_row_max(l, atoms, group_lane, lanes, valid);
      T sum_exp = T(0);
      T sum_m = T(0);
      T sum_m_gap = T(0);
      if (valid)
        for (int64_t j = group_lane; j < atoms; j += lanes) {
          const T lj = l[j];
          const T mj = mk[j];
          sum_exp += dev_exp(lj - max);
          sum_m += mj;
          sum_m_gap += mj * (max - lj);
        }
      sum_exp = group_sum(sum_exp, lanes);
      sum_m = group_sum(sum_m, lanes);
      sum_m_gap = group_sum(sum_m_gap, lanes);
      if (valid) total += sum_m * dev_log(sum_exp) + sum_m_gap;
    }
    return total / static_cast<T>(K);
  }
};

// One aligned group of `lanes` lanes per row (p,b,k) (loop bound uniform across each warp):
//   dL/dl_j = w_s / K * (softmax(l)_j * sum_m - m_j),
// with w_s = grad_per_sample[s] + grad_value[p] / B; lane g writes j = g, g + lanes, ...
template <typename T>
__global__ void __launch_bounds__(kThreadsPerBlock, 1)
    c51_loss_backward_kernel(const T* __restrict__ grad_per_sample,
                             const T* __restrict__ grad_value, const T* __restrict__ logits,
                             const T* __restrict__ m, int64_t P, int64_t B, int64_t K,
                             int64_t atoms, int lanes, T* __restrict__ grad_logits) {
  const int64_t rows = P * B * K;
  const LaneGroups g(lanes);
  const int group_lane = g.group_lane;
  for (int64_t base = g.first; base < rows; base += g.stride) {
    const int64_t row_index = base + g.group;
    const bool valid = row_index < rows;
    const int64_t row_start = valid ? row_index * atoms : 0;
    const T* l = logits + row_start;
    const T* mk = m + row_start;
    const T max = group_row_max(l, atoms, group_lane, lanes, valid);
    T sum_exp = T(0);
    T sum_m = T(0);
    if (valid)
      for (int64_t j = group_lane; j < atoms; j += lanes) {
        sum_exp += dev_exp(l[j] - max);
        sum_m += mk[j];
      }
    sum_exp = group_sum(sum_exp, lanes);
    sum_m = group_sum(sum_m, lanes);
    if (!valid) continue;
    const int64_t s = row_index / K;
    const int64_t p = s / B;
    const T coef = sample_weight(grad_per_sample, grad_value, s, p, B) / static_cast<T>(K);
    T* out = grad_logits + row_start;
    for (int64_t j = group_lane; j < atoms; j += lanes)
      out[j] = coef * (dev_exp(l[j] - max) / sum_exp * sum_m - mk[j]);
  }
}

}  // namespace

// ============================================================== launchers

template <typename T>
cudaError_t c51_project(const T* p, const T* r, const T* g, int64_t N, int64_t atoms,
                        double v_min, double v_max, T* m, cudaStream_t stream) {
  if (N <= 0 || atoms < 2) return cudaSuccess;
  // dz is formed in double then rounded, as the reference's Python-float dz is.
  const double dz = (v_max - v_min) / static_cast<double>(atoms - 1);
  const double inv_dz = static_cast<double>(atoms - 1) / (v_max - v_min);
  const int64_t warps_per_block = kThreadsPerBlock / kWarpSize;
  c51_project_kernel<T><<<clamp_blocks((N + warps_per_block - 1) / warps_per_block),
                          kThreadsPerBlock, 0, stream>>>(
      p, r, g, N, atoms, static_cast<T>(v_min), static_cast<T>(v_max), static_cast<T>(dz),
      static_cast<T>(inv_dz), m);
  return cudaGetLastError();
}

template <typename T>
cudaError_t c51_loss_forward(const T* logits, const T* m, int64_t P, int64_t B, int64_t K,
                             int64_t atoms, T* per_sample, T* value, cudaStream_t stream) {
  if (P * B <= 0 || K <= 0 || atoms <= 0) return cudaSuccess;
  // A group spans one row's atoms and walks the K rows of its sample in order.
  return launch_per_sample_and_mean<T>(C51LossSample<T>{logits, m, K, atoms}, P, B, K * atoms,
                                       lanes_for(atoms), per_sample, value, stream);
}

template <typename T>
cudaError_t c51_loss_backward(const T* grad_per_sample, const T* grad_value, const T* logits,
                              const T* m, int64_t P, int64_t B, int64_t K, int64_t atoms,
                              T* grad_logits, cudaStream_t stream) {
  const int64_t rows = P * B * K;
  if (rows <= 0 || atoms <= 0) return cudaSuccess;
  const int lanes = lanes_for(atoms);
  c51_loss_backward_kernel<T><<<grouped_blocks_for(rows, lanes), kThreadsPerBlock, 0, stream>>>(
      grad_per_sample, grad_value, logits, m, P, B, K, atoms, lanes, grad_logits);
  return cudaGetLastError();
}

#define TUNE_GEMS_INSTANTIATE_C51(T)                                                            \
  template cudaError_t c51_project<T>(const T*, const T*, const T*, int64_t, int64_t, double,   \
                                      double, T*, cudaStream_t);                                \
  template cudaError_t c51_loss_forward<T>(const T*, const T*, int64_t, int64_t, int64_t,       \
                                           int64_t, T*, T*, cudaStream_t);                      \
  template cudaError_t c51_loss_backward<T>(const T*, const T*, const T*, const T*, int64_t,    \
                                            int64_t, int64_t, int64_t, T*, cudaStream_t);

TUNE_GEMS_INSTANTIATE_C51(float)
TUNE_GEMS_INSTANTIATE_C51(double)

#undef TUNE_GEMS_INSTANTIATE_C51

}  // namespace tune_gems
