// Device helpers shared by gems.cu and c51.cu: launch geometry, typed math, and the
// fixed-order per-member reduction that turns a [P,n] buffer into a [P] mean.
//
// Everything lives in an anonymous namespace so that each .cu gets its own copy and the two
// translation units never share a kernel symbol. Only cuda_runtime.h is used (no torch).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace tune_gems {
namespace {

// Threads per block of the elementwise / one-thread-per-item kernels.
constexpr int kThreadsPerBlock = 256;
// Threads per block of the per-member reduction; a power of two (the tree halves it).
constexpr int kReduceThreads = 256;
// Cap on the 1-D grid; a grid-stride loop covers any larger item count.
constexpr int64_t kMaxBlocks = int64_t(1) << 20;

static_assert((kReduceThreads & (kReduceThreads - 1)) == 0, "kReduceThreads must be a power of two");

// Blocks for `items` items, one thread per item (grid-stride beyond kMaxBlocks blocks).
inline unsigned int blocks_for(int64_t items) {
  int64_t blocks = (items + kThreadsPerBlock - 1) / kThreadsPerBlock;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  if (blocks < 1) blocks = 1;
  return static_cast<unsigned int>(blocks);
}

__device__ __forceinline__ int64_t first_item() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ int64_t item_stride() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

// Typed math: the float overloads keep float kernels in single precision.
__device__ __forceinline__ float dev_exp(float x) { return expf(x); }
__device__ __forceinline__ double dev_exp(double x) { return exp(x); }
__device__ __forceinline__ float dev_log(float x) { return logf(x); }
__device__ __forceinline__ double dev_log(double x) { return log(x); }
__device__ __forceinline__ float dev_sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double dev_sqrt(double x) { return sqrt(x); }
__device__ __forceinline__ float dev_abs(float x) { return fabsf(x); }
__device__ __forceinline__ double dev_abs(double x) { return fabs(x); }

// out[row] = mean of x[row, 0..n) (of its squares when kSquare); 0 when n == 0.
// One block per row; thread t sums items t, t+kReduceThreads, ... in order, then a fixed
// shared-memory tree combines the partials. The order depends only on n, never on timing,
// so every run and every graph replay gives the same bits. The output is overwritten.
template <typename T, bool kSquare>
__global__ void __launch_bounds__(kReduceThreads)
    row_mean_kernel(const T* __restrict__ x, int64_t n, T* __restrict__ out) {
  __shared__ T partial[kReduceThreads];
  const T* row = x + static_cast<int64_t>(blockIdx.x) * n;
  T acc = T(0);
  for (int64_t i = threadIdx.x; i < n; i += kReduceThreads) {
    const T v = row[i];
    acc += kSquare ? v * v : v;
  }
  partial[threadIdx.x] = acc;
  __syncthreads();
  for (int half = kReduceThreads / 2; half > 0; half >>= 1) {
    if (static_cast<int>(threadIdx.x) < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = n > 0 ? partial[0] / static_cast<T>(n) : T(0);
}

// Launches row_mean_kernel over `rows` rows of length n; returns the launch error.
template <typename T, bool kSquare>
cudaError_t launch_row_mean(const T* x, int64_t rows, int64_t n, T* out, cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  row_mean_kernel<T, kSquare><<<static_cast<unsigned int>(rows), kReduceThreads, 0, stream>>>(x, n, out);
  return cudaGetLastError();
}

// Weight of sample s of member p in a backward pass: the upstream gradient of per_sample[s]
// plus the share of grad_value[p] that reaches it through value = sum_b per_sample / B.
template <typename T>
__device__ __forceinline__ T sample_weight(const T* grad_per_sample, const T* grad_value,
                                           int64_t s, int64_t p, int64_t B) {
  const T from_sample = grad_per_sample != nullptr ? grad_per_sample[s] : T(0);
  return from_sample + grad_value[p] / static_cast<T>(B);
}

}  // namespace
}  // namespace tune_gems
