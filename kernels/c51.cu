// CUDA kernels of the C51 distributional head: the categorical projection (gather form) and
// the cross-entropy loss (forward and backward), with their host launchers.
//
// Graph-safe and deterministic (DESIGN.md "Kernels"): the projection computes each output
// atom m_j by gathering over the input atoms i (no scatter, no atomics); the loss writes one
// per-sample value per thread and reduces it per member with row_mean_kernel (fixed order).
#include <cstdint>

#include <cuda_runtime.h>

#include "fixed_order_reduce.cuh"
#include "tune_gems_kernels.h"

namespace tune_gems {
namespace {

// One thread per output element (n, j):
//   m[n,j] = sum_i p[n,i] * max(0, 1 - |Tz_i - z_j| / dz),
//   Tz_i = clamp(r[n] + g[n] * z_i, v_min, v_max),  z_i = v_min + i * dz.
template <typename T>
__global__ void c51_project_kernel(const T* __restrict__ p, const T* __restrict__ r,
                                   const T* __restrict__ g, int64_t N, int64_t atoms, T v_min,
                                   T v_max, T dz, T* __restrict__ m) {
  const int64_t items = N * atoms;
  for (int64_t e = first_item(); e < items; e += item_stride()) {
    const int64_t n = e / atoms;
    const int64_t j = e - n * atoms;
    const T z_j = v_min + dz * static_cast<T>(j);
    const T r_n = r[n];
    const T g_n = g[n];
    const T* p_n = p + n * atoms;
    T acc = T(0);
    for (int64_t i = 0; i < atoms; ++i) {
      const T z_i = v_min + dz * static_cast<T>(i);
      T tz = r_n + g_n * z_i;
      tz = tz < v_min ? v_min : (tz > v_max ? v_max : tz);
      T w = T(1) - dev_abs(tz - z_j) / dz;
      w = w > T(0) ? w : T(0);
      acc += p_n[i] * w;
    }
    m[e] = acc;
  }
}

// Statistics of one softmax row: its max, sum_j exp(l_j - max) and sum_j m_j.
template <typename T>
struct SoftmaxRow {
  T max;
  T sum_exp;
  T sum_m;
};

template <typename T>
__device__ __forceinline__ SoftmaxRow<T> softmax_row(const T* logits, const T* m, int64_t atoms) {
  SoftmaxRow<T> row;
  row.max = logits[0];
  for (int64_t j = 1; j < atoms; ++j) row.max = logits[j] > row.max ? logits[j] : row.max;
  row.sum_exp = T(0);
  row.sum_m = T(0);
  for (int64_t j = 0; j < atoms; ++j) {
    row.sum_exp += dev_exp(logits[j] - row.max);
    row.sum_m += m[j];
  }
  return row;
}

// One thread per sample s = (p,b):
//   per_sample[s] = mean_k -sum_j m_j log_softmax(l)_j
//                 = mean_k [ sum_m * log(sum_exp) + sum_j m_j (max - l_j) ],
// a sum of non-negative terms for m >= 0 (no cancellation).
template <typename T>
__global__ void c51_loss_per_sample_kernel(const T* __restrict__ logits, const T* __restrict__ m,
                                           int64_t samples, int64_t K, int64_t atoms,
                                           T* __restrict__ per_sample) {
  for (int64_t s = first_item(); s < samples; s += item_stride()) {
    T acc = T(0);
    for (int64_t k = 0; k < K; ++k) {
      const int64_t row_start = (s * K + k) * atoms;
      const T* l = logits + row_start;
      const T* mk = m + row_start;
      T max = l[0];
      for (int64_t j = 1; j < atoms; ++j) max = l[j] > max ? l[j] : max;
      T sum_exp = T(0);
      T sum_m = T(0);
      T sum_m_gap = T(0);
      for (int64_t j = 0; j < atoms; ++j) {
        sum_exp += dev_exp(l[j] - max);
        sum_m += mk[j];
        sum_m_gap += mk[j] * (max - l[j]);
      }
      acc += sum_m * dev_log(sum_exp) + sum_m_gap;
    }
    per_sample[s] = acc / static_cast<T>(K);
  }
}

// One thread per row (p,b,k):
//   dL/dl_j = w_s / K * (softmax(l)_j * sum_m - m_j),
// with w_s = grad_per_sample[s] + grad_value[p] / B.
template <typename T>
__global__ void c51_loss_backward_kernel(const T* __restrict__ grad_per_sample,
                                         const T* __restrict__ grad_value,
                                         const T* __restrict__ logits, const T* __restrict__ m,
                                         int64_t P, int64_t B, int64_t K, int64_t atoms,
                                         T* __restrict__ grad_logits) {
  const int64_t rows = P * B * K;
  for (int64_t row_index = first_item(); row_index < rows; row_index += item_stride()) {
    const int64_t s = row_index / K;
    const int64_t p = s / B;
    const int64_t row_start = row_index * atoms;
    const T* l = logits + row_start;
    const T* mk = m + row_start;
    const SoftmaxRow<T> row = softmax_row(l, mk, atoms);
    const T coef = sample_weight(grad_per_sample, grad_value, s, p, B) / static_cast<T>(K);
    T* out = grad_logits + row_start;
    for (int64_t j = 0; j < atoms; ++j)
      out[j] = coef * (dev_exp(l[j] - row.max) / row.sum_exp * row.sum_m - mk[j]);
  }
}

}  // namespace

// ============================================================== launchers

template <typename T>
cudaError_t c51_project(const T* p, const T* r, const T* g, int64_t N, int64_t atoms,
                        double v_min, double v_max, T* m, cudaStream_t stream) {
  const int64_t items = N * atoms;
  if (items <= 0 || atoms < 2) return cudaSuccess;
  // dz is formed in double then rounded, as the reference's Python-float dz is.
  const double dz = (v_max - v_min) / static_cast<double>(atoms - 1);
  c51_project_kernel<T><<<blocks_for(items), kThreadsPerBlock, 0, stream>>>(
      p, r, g, N, atoms, static_cast<T>(v_min), static_cast<T>(v_max), static_cast<T>(dz), m);
  return cudaGetLastError();
}

template <typename T>
cudaError_t c51_loss_forward(const T* logits, const T* m, int64_t P, int64_t B, int64_t K,
                             int64_t atoms, T* per_sample, T* value, cudaStream_t stream) {
  const int64_t samples = P * B;
  if (samples <= 0) return cudaSuccess;
  c51_loss_per_sample_kernel<T><<<blocks_for(samples), kThreadsPerBlock, 0, stream>>>(
      logits, m, samples, K, atoms, per_sample);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  return launch_row_mean<T, false>(per_sample, P, B, value, stream);
}

template <typename T>
cudaError_t c51_loss_backward(const T* grad_per_sample, const T* grad_value, const T* logits,
                              const T* m, int64_t P, int64_t B, int64_t K, int64_t atoms,
                              T* grad_logits, cudaStream_t stream) {
  const int64_t rows = P * B * K;
  if (rows <= 0 || atoms <= 0) return cudaSuccess;
  c51_loss_backward_kernel<T><<<blocks_for(rows), kThreadsPerBlock, 0, stream>>>(
      grad_per_sample, grad_value, logits, m, P, B, K, atoms, grad_logits);
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
