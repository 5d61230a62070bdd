// Device helpers shared by gems.cu and c51.cu: launch geometry, typed math, fixed-order
// warp/block reductions, the per-member mean of a [P,n] buffer, and the two generic
// "one value per sample" drivers (a group of lanes cooperates on one sample).
//
// Everything lives in an anonymous namespace so that each .cu gets its own copy and the two
// translation units never share a kernel symbol. Only cuda_runtime.h is used (no torch).
//
// Determinism: every sum below has an order fixed by the shapes alone (lane partials in
// increasing index order, then an xor butterfly of a fixed width, then warps in increasing
// order), never by timing, so every run and every CUDA-graph replay gives the same bits.
// There are no atomics anywhere.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace tune_gems {
namespace {

constexpr int kWarpSize = 32;
constexpr unsigned int kFullMask = 0xffffffffu;
// Threads per block of the elementwise / grouped per-sample kernels (a multiple of 32).
constexpr int kThreadsPerBlock = 256;
// Threads per block of the per-member reduction (a multiple of 32).
constexpr int kReduceThreads = 256;
// Most threads of a fused "one block per member" kernel (a multiple of 32, <= 1024).
constexpr int kFusedMaxThreads = 1024;
// Cap on the 1-D grid; grid-stride loops cover any larger item count.
constexpr int64_t kMaxBlocks = int64_t(1) << 20;

static_assert(kThreadsPerBlock % kWarpSize == 0, "kThreadsPerBlock must be whole warps");
static_assert(kReduceThreads % kWarpSize == 0, "kReduceThreads must be whole warps");
static_assert(kFusedMaxThreads % kWarpSize == 0 && kFusedMaxThreads <= 1024,
              "kFusedMaxThreads must be whole warps and at most 1024");

inline unsigned int clamp_blocks(int64_t blocks) {
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  if (blocks < 1) blocks = 1;
  return static_cast<unsigned int>(blocks);
}

// Blocks for `items` items, one thread per item (grid-stride beyond kMaxBlocks blocks).
inline unsigned int blocks_for(int64_t items) {
  return clamp_blocks((items + kThreadsPerBlock - 1) / kThreadsPerBlock);
}

// Lanes that cooperate on one item of `width` elements: the smallest power of two >= width,
// at most a warp. A group of that many lanes is aligned inside its warp.
inline int lanes_for(int64_t width) {
  int lanes = 1;
  while (lanes < kWarpSize && lanes < width) lanes <<= 1;
  return lanes;
}

// Blocks of kThreadsPerBlock threads for `items` items handled by groups of `lanes` lanes.
inline unsigned int grouped_blocks_for(int64_t items, int lanes) {
  const int64_t groups_per_block = kThreadsPerBlock / lanes;
  return clamp_blocks((items + groups_per_block - 1) / groups_per_block);
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

template <typename T>
__device__ __forceinline__ T lowest_value();
template <>
__device__ __forceinline__ float lowest_value<float>() { return __int_as_float(0xff800000); }  // -inf
template <>
__device__ __forceinline__ double lowest_value<double>() {
  return __longlong_as_double(static_cast<long long>(0xfff0000000000000ull));  // -inf
}

// Sum over an aligned group of `lanes` lanes (a power of two <= 32) by an xor butterfly.
// Every lane of the warp must call it (full mask). Lane a adds v_a + v_{a^off} and its
// partner v_{a^off} + v_a: addition commutes, so every lane of the group ends with the same
// bits, and the order depends only on `lanes`.
template <typename T>
__device__ __forceinline__ T group_sum(T v, int lanes) {
  for (int offset = lanes >> 1; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

// Maximum over an aligned group of `lanes` lanes (exact, so order-free); full mask as above.
template <typename T>
__device__ __forceinline__ T group_max(T v, int lanes) {
  for (int offset = lanes >> 1; offset > 0; offset >>= 1) {
    const T other = __shfl_xor_sync(kFullMask, v, offset);
    v = other > v ? other : v;
  }
  return v;
}

// Sum of v over the whole block (blockDim.x a multiple of 32), returned in thread 0 (other
// threads get an unspecified value). Order: warp butterfly, then the warp totals in warp
// order. `warp_sums` is shared memory of at least blockDim.x / 32 elements; every thread of
// the block must call this (it synchronises twice, so the buffer can be reused right after).
template <typename T>
__device__ __forceinline__ T block_sum_to_thread0(T v, T* warp_sums) {
  v = group_sum(v, kWarpSize);
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  if ((threadIdx.x & (kWarpSize - 1)) == 0) warp_sums[warp] = v;
  __syncthreads();
  T total = T(0);
  if (threadIdx.x == 0) {
    const int warps = static_cast<int>(blockDim.x) / kWarpSize;
    for (int w = 0; w < warps; ++w) total += warp_sums[w];
  }
  __syncthreads();
  return total;
}

// out[row] = mean of x[row, 0..n) (of its squares when kSquare); 0 when n == 0.
// One block per row (grid-stride over rows); thread t sums items t, t+kReduceThreads, ... in
// order, then block_sum_to_thread0 combines the partials in a fixed order. The output is
// overwritten, never accumulated.
template <typename T, bool kSquare>
__global__ void __launch_bounds__(kReduceThreads, 1)
    row_mean_kernel(const T* __restrict__ x, int64_t rows, int64_t n, T* __restrict__ out) {
  __shared__ T warp_sums[kReduceThreads / kWarpSize];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* row = x + r * n;
    T acc = T(0);
    for (int64_t i = threadIdx.x; i < n; i += kReduceThreads) {
      const T v = row[i];
      acc += kSquare ? v * v : v;
    }
    const T total = block_sum_to_thread0(acc, warp_sums);
    if (threadIdx.x == 0) out[r] = n > 0 ? total / static_cast<T>(n) : T(0);
  }
}

// Launches row_mean_kernel over `rows` rows of length n; returns the launch error.
template <typename T, bool kSquare>
cudaError_t launch_row_mean(const T* x, int64_t rows, int64_t n, T* out, cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  row_mean_kernel<T, kSquare><<<clamp_blocks(rows), kReduceThreads, 0, stream>>>(x, rows, n, out);
  return cudaGetLastError();
}

// This thread's place among the aligned groups of `lanes` lanes (a power of two <= 32) that
// tile the grid: item `base + group` for base = first, first + stride, ... is this group's.
// The loop bound built from these is uniform across each warp, so group_sum / group_max may
// be called inside the loop.
struct LaneGroups {
  int group;       // group index within the warp
  int group_lane;  // lane index within the group
  int64_t first;   // first item of this warp's groups
  int64_t stride;  // items covered by all warps of the grid per step
  __device__ explicit LaneGroups(int lanes) {
    const int lane = static_cast<int>(threadIdx.x) & (kWarpSize - 1);
    const int groups_per_warp = kWarpSize / lanes;
    group = lane / lanes;
    group_lane = lane & (lanes - 1);
    first = (first_item() / kWarpSize) * groups_per_warp;
    stride = (item_stride() / kWarpSize) * groups_per_warp;
  }
};

// max_j row[j] over a row of n elements, combined across an aligned group of `lanes` lanes
// (lane g reads j = g, g + lanes, ...); every lane of the group gets the result. Lanes of an
// invalid item read nothing and contribute the lowest value.
template <typename T>
__device__ __forceinline__ T group_row_max(const T* row, int64_t n, int group_lane, int lanes, bool valid) {
  T max = lowest_value<T>();
  if (valid)
    for (int64_t j = group_lane; j < n; j += lanes) max = row[j] > max ? row[j] : max;
  return group_max(max, lanes);
}

// Weight of sample s of member p in a backward pass: the upstream gradient of per_sample[s]
// plus the share of grad_value[p] that reaches it through value = sum_b per_sample / B.
template <typename T>
__device__ __forceinline__ T sample_weight(const T* grad_per_sample, const T* grad_value,
                                           int64_t s, int64_t p, int64_t B) {
  const T from_sample = grad_per_sample != nullptr ? grad_per_sample[s] : T(0);
  return from_sample + grad_value[p] / static_cast<T>(B);
}

// ---------------------------------------------------------------- per-sample drivers
// A SampleFn is a functor with
//   __device__ T operator()(int64_t s, int group_lane, int lanes, bool valid) const
// called by every lane of an aligned group of `lanes` lanes (all 32 lanes of each warp call
// it together, so it may use group_sum / group_max); it returns the value of sample s in
// every lane of the group when valid (and anything, without touching memory of s, when not).

// per_sample[s] for every s < samples: one group of `lanes` lanes per sample, lane 0 of the
// group writes it (one writer per sample). The loop bound is uniform across each warp.
template <typename T, class SampleFn>
__global__ void __launch_bounds__(kThreadsPerBlock, 1)
    grouped_per_sample_kernel(SampleFn fn, int64_t samples, int lanes, T* __restrict__ per_sample) {
  const LaneGroups g(lanes);
  for (int64_t base = g.first; base < samples; base += g.stride) {
    const int64_t s = base + g.group;
    const bool valid = s < samples;
    const T v = fn(s, g.group_lane, lanes, valid);
    if (valid && g.group_lane == 0) per_sample[s] = v;
  }
}

// One block per member p (grid-stride over members): groups of `lanes` lanes take the
// member's samples b = group, group + groups, ... in order; lane 0 of a group writes
// per_sample[p*B + b] (one writer per sample) and adds it to its running sum; then the block
// sums those running sums in a fixed order and thread 0 overwrites value[p] = sum / B.
// blockDim.x must be a multiple of 32 (and so of lanes).
template <typename T, class SampleFn>
__global__ void __launch_bounds__(kFusedMaxThreads, 1)
    member_fused_kernel(SampleFn fn, int64_t P, int64_t B, int lanes, T* __restrict__ per_sample,
                        T* __restrict__ value) {
  __shared__ T warp_sums[kFusedMaxThreads / kWarpSize];
  const int groups = static_cast<int>(blockDim.x) / lanes;
  const int group = static_cast<int>(threadIdx.x) / lanes;
  const int group_lane = static_cast<int>(threadIdx.x) & (lanes - 1);
  for (int64_t p = blockIdx.x; p < P; p += gridDim.x) {
    T acc = T(0);
    for (int64_t base = 0; base < B; base += groups) {
      const int64_t b = base + group;
      const bool valid = b < B;
      const int64_t s = p * B + b;
      const T v = fn(s, group_lane, lanes, valid);
      if (valid && group_lane == 0) {
        per_sample[s] = v;
        acc += v;
      }
    }
    const T total = block_sum_to_thread0(acc, warp_sums);
    if (threadIdx.x == 0) value[p] = total / static_cast<T>(B);
  }
}

// Threads of member_fused_kernel for B samples of `lanes` lanes each.
inline unsigned int fused_threads_for(int64_t B, int lanes) {
  int64_t threads = B * lanes;
  threads = (threads + kWarpSize - 1) / kWarpSize * kWarpSize;
  if (threads > kFusedMaxThreads) threads = kFusedMaxThreads;
  if (threads < kWarpSize) threads = kWarpSize;
  return static_cast<unsigned int>(threads);
}

// A member's elements (B * width) up to which one block per member does per_sample and value
// in one kernel; above it, a grid of groups writes per_sample and row_mean_kernel reduces.
// The choice depends only on the shapes, so a given shape always gives the same bits.
constexpr int64_t kFusedMaxElements = 8192;

// per_sample [P,B] and value [P] of SampleFn (groups of `lanes` lanes, a power of two <= 32,
// per sample; `elements` input elements per sample), by the fused or the two-kernel path.
template <typename T, class SampleFn>
cudaError_t launch_per_sample_and_mean(SampleFn fn, int64_t P, int64_t B, int64_t elements,
                                       int lanes, T* per_sample, T* value, cudaStream_t stream) {
  if (P <= 0 || B <= 0) return cudaSuccess;
  if (B * elements <= kFusedMaxElements) {
    member_fused_kernel<T, SampleFn><<<clamp_blocks(P), fused_threads_for(B, lanes), 0, stream>>>(
        fn, P, B, lanes, per_sample, value);
    return cudaGetLastError();
  }
  const int64_t samples = P * B;
  grouped_per_sample_kernel<T, SampleFn>
      <<<grouped_blocks_for(samples, lanes), kThreadsPerBlock, 0, stream>>>(fn, samples, lanes,
                                                                              per_sample);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  return launch_row_mean<T, false>(per_sample, P, B, value, stream);
}

}  // namespace
}  // namespace tune_gems
