// CUDA kernels of the C51 distributional head: the double-DQN target, the categorical
// projection (gather form) and the cross-entropy loss (forward and backward), with their host
// launchers.
//
// Graph-safe and deterministic (docs/design.md, "Ops and kernels"): the projection computes each output
// atom m_j by gathering over the input atoms i in increasing order (no scatter, no atomics);
// the target and the loss give each row of atoms to one thread that walks it in order (rows
// staged through shared memory for coalesced loads), one thread writes each per-sample value,
// and the per-member value is a fixed-order reduction of them (in the same kernel when a
// member fits in one tile, else fixed_order_reduce.cuh's row mean). The loss forward saves
// its residual (softmax * sum m - m), so the backward is elementwise.
#include <cstdint>
#include <climits>

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

// ---------------------------------------------------------------- row tiles in shared memory
// The C51 loss and target kernels give each row (one distribution of `atoms` logits) to one
// thread, which walks it in increasing j: every sum has an order fixed by the row alone, so a
// row's bits never depend on the launch geometry or on the number of rows (the arms invariant).
// For coalesced, latency-hiding loads a block first stages a tile of whole rows (contiguous in
// memory) into shared memory, kStageBatch independent loads per thread in flight, and writes
// its outputs back the same way. A tile whose rows do not fit in kTileSmemBytes is read and
// written in place in global memory instead (same arithmetic, same bits, slower).

// Threads per block of the row-tile kernels.
constexpr int kTileThreads = 128;
// Dynamic shared memory per block of the row-tile kernels: the default limit (no opt-in).
constexpr int64_t kTileSmemBytes = 48 * 1024;
// Loads each thread has in flight while staging a tile (and elements per thread of the
// elementwise backward).
constexpr int kStageBatch = 8;

static_assert(kTileThreads % kWarpSize == 0, "kTileThreads must be whole warps");

extern __shared__ __align__(16) unsigned char c51_tile_smem[];

// dst_a[i] = src_a[i] and dst_b[i] = src_b[i] (if src_b) for i < n, by all threads of the block.
template <typename T>
__device__ __forceinline__ void stage_in(T* dst_a, const T* __restrict__ src_a, T* dst_b,
                                         const T* __restrict__ src_b, int n) {
  const int step = static_cast<int>(blockDim.x);
  for (int base = static_cast<int>(threadIdx.x); base < n; base += kStageBatch * step) {
    T a[kStageBatch];
    T b[kStageBatch];
#pragma unroll
    for (int c = 0; c < kStageBatch; ++c) {
      const int i = base + c * step;
      if (i < n) {
        a[c] = src_a[i];
        if (src_b != nullptr) b[c] = src_b[i];
      }
    }
#pragma unroll
    for (int c = 0; c < kStageBatch; ++c) {
      const int i = base + c * step;
      if (i < n) {
        dst_a[i] = a[c];
        if (src_b != nullptr) dst_b[i] = b[c];
      }
    }
  }
}

// dst[i] = src[i] for i < n (shared -> global), by all threads of the block.
template <typename T>
__device__ __forceinline__ void copy_out(T* __restrict__ dst, const T* src, int n) {
  for (int i = static_cast<int>(threadIdx.x); i < n; i += static_cast<int>(blockDim.x)) dst[i] = src[i];
}

// n / divisor for 0 <= n < 2^31 by a multiply-high (the magic-number division of PyTorch's
// IntegerDivider): a few instructions instead of a 64-bit division per element.
struct NarrowDivider {
  uint32_t divisor;
  uint32_t magic;
  uint32_t shift;
  explicit NarrowDivider(int64_t d) : divisor(static_cast<uint32_t>(d)), magic(0), shift(0) {
    while (shift < 32 && (uint64_t(1) << shift) < divisor) ++shift;
    const uint64_t one = 1;
    magic = static_cast<uint32_t>(((one << 32) * ((one << shift) - divisor)) / divisor + 1);
  }
  __device__ __forceinline__ int64_t div(int64_t n) const {
    const uint32_t n32 = static_cast<uint32_t>(n);
    return static_cast<int64_t>((__umulhi(n32, magic) + n32) >> shift);
  }
};

// n / divisor for any n >= 0 (the fallback when an index may reach 2^31).
struct WideDivider {
  int64_t divisor;
  explicit WideDivider(int64_t d) : divisor(d) {}
  __device__ __forceinline__ int64_t div(int64_t n) const { return n / divisor; }
};

// ---------------------------------------------------------------- C51 loss

// One row's cross-entropy -sum_j m_j log softmax(l)_j
//   = sum_m * log(sum_exp) + sum_j m_j (max - l_j)
// (non-negative terms for m >= 0: no cancellation), and its residual
//   out_j = softmax(l)_j * sum_m - m_j = exp(l_j - max) / sum_exp * sum_m - m_j,
// the row's gradient before the upstream weight, which the backward only scales. `out` may
// alias `l` (in-place in shared memory): element j is read before it is written.
template <typename T>
__device__ __forceinline__ T c51_loss_row(const T* l, const T* m, int atoms, T* out) {
  T max = lowest_value<T>();
  for (int j = 0; j < atoms; ++j) max = l[j] > max ? l[j] : max;
  T sum_exp = T(0);
  T sum_m = T(0);
  T sum_m_gap = T(0);
  for (int j = 0; j < atoms; ++j) {
    const T lj = l[j];
    const T mj = m[j];
    const T e = dev_exp(lj - max);
    out[j] = e;
    sum_exp += e;
    sum_m += mj;
    sum_m_gap += mj * (max - lj);
  }
  for (int j = 0; j < atoms; ++j) out[j] = out[j] / sum_exp * sum_m - m[j];
  return sum_m * dev_log(sum_exp) + sum_m_gap;
}

// Rows r < rows of a tile: row_loss[r] and the residual rows, one thread per row.
template <typename T>
__device__ __forceinline__ void c51_loss_rows(const T* l, const T* m, T* out, int64_t rows, int atoms,
                                              T* row_loss) {
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x)
    row_loss[r] = c51_loss_row(l + r * atoms, m + r * atoms, atoms, out + r * atoms);
}

// Tiles of tile_samples consecutive samples s (rows s*K .. s*K+K-1), grid-stride over tiles:
//   residual [P,B,K,atoms], per_sample[s] = (sum_k row_loss_k, k in order) / K,
// and, when `fused` (a tile is one member: tile_samples == B, tile index = p),
//   value[p] = (sum_b per_sample[p,b], b in order) / B.
// Shared memory: [staged: logits tile | m tile] [row_loss: tile rows] [sample_loss: tile].
template <typename T>
__global__ void __launch_bounds__(kTileThreads)
    c51_loss_tile_kernel(const T* __restrict__ logits, const T* __restrict__ m, int64_t samples,
                         int64_t K, int atoms, int64_t tile_samples, bool staged, bool fused,
                         int64_t B, T* __restrict__ per_sample, T* __restrict__ value,
                         T* __restrict__ residual) {
  T* smem = reinterpret_cast<T*>(c51_tile_smem);
  const int64_t tile_rows = tile_samples * K;
  const int64_t staged_elements = staged ? tile_rows * atoms : 0;
  T* l_s = smem;
  T* m_s = smem + staged_elements;
  T* row_loss = smem + 2 * staged_elements;
  T* sample_loss = row_loss + tile_rows;
  for (int64_t tile = blockIdx.x; tile * tile_samples < samples; tile += gridDim.x) {
    const int64_t s0 = tile * tile_samples;
    const int64_t n_samples = samples - s0 < tile_samples ? samples - s0 : tile_samples;
    const int64_t rows = n_samples * K;
    const int64_t offset = s0 * K * atoms;
    if (staged) {
      const int elements = static_cast<int>(rows * atoms);
      stage_in(l_s, logits + offset, m_s, m + offset, elements);
      __syncthreads();
      c51_loss_rows(static_cast<const T*>(l_s), static_cast<const T*>(m_s), l_s, rows, atoms, row_loss);
      __syncthreads();
      copy_out(residual + offset, l_s, elements);
    } else {
      c51_loss_rows(logits + offset, m + offset, residual + offset, rows, atoms, row_loss);
      __syncthreads();
    }
    for (int64_t i = threadIdx.x; i < n_samples; i += blockDim.x) {
      T total = T(0);
      for (int64_t k = 0; k < K; ++k) total += row_loss[i * K + k];
      const T loss = total / static_cast<T>(K);
      per_sample[s0 + i] = loss;
      sample_loss[i] = loss;
    }
    if (fused) {
      __syncthreads();
      if (threadIdx.x == 0) {
        T acc = T(0);
        for (int64_t i = 0; i < n_samples; ++i) acc += sample_loss[i];
        value[tile] = acc / static_cast<T>(B);
      }
    }
    __syncthreads();  // the next tile overwrites the shared buffers
  }
}

// Elementwise backward from the saved residual: for element i of sample s = i / (K*atoms) of
// member p = s / B,
//   grad_logits[i] = w_s / K * residual[i],  w_s = grad_per_sample[s] + grad_value[p] / B.
// kStageBatch elements per thread (coalesced, loads in flight together), grid-stride.
template <typename T, class Divider>
__global__ void __launch_bounds__(kThreadsPerBlock)
    c51_loss_backward_kernel(const T* __restrict__ grad_per_sample, const T* __restrict__ grad_value,
                             const T* __restrict__ residual, int64_t total, Divider per_sample_of,
                             Divider member_of, int64_t B, int64_t K, T* __restrict__ grad_logits) {
  const int64_t step = blockDim.x;
  const int64_t chunk = step * kStageBatch;
  for (int64_t base = blockIdx.x * chunk + threadIdx.x; base < total; base += gridDim.x * chunk) {
    T r[kStageBatch];
    T w[kStageBatch];
#pragma unroll
    for (int c = 0; c < kStageBatch; ++c) {
      const int64_t i = base + c * step;
      if (i < total) {
        const int64_t s = per_sample_of.div(i);
        r[c] = residual[i];
        w[c] = sample_weight(grad_per_sample, grad_value, s, member_of.div(s), B) / static_cast<T>(K);
      }
    }
#pragma unroll
    for (int c = 0; c < kStageBatch; ++c) {
      const int64_t i = base + c * step;
      if (i < total) grad_logits[i] = w[c] * r[c];
    }
  }
}

// ---------------------------------------------------------------- C51 double-DQN target

// Expected value sum_j softmax(l)_j * z_j of one row, j in increasing order.
template <typename T>
__device__ __forceinline__ T c51_expected_value(const T* l, const T* __restrict__ z, int atoms) {
  T max = lowest_value<T>();
  for (int j = 0; j < atoms; ++j) max = l[j] > max ? l[j] : max;
  T sum_exp = T(0);
  for (int j = 0; j < atoms; ++j) sum_exp += dev_exp(l[j] - max);
  T q = T(0);
  for (int j = 0; j < atoms; ++j) q += dev_exp(l[j] - max) / sum_exp * z[j];
  return q;
}

// row <- softmax(row), j in increasing order.
template <typename T>
__device__ __forceinline__ void c51_softmax_in_place(T* row, int atoms) {
  T max = lowest_value<T>();
  for (int j = 0; j < atoms; ++j) max = row[j] > max ? row[j] : max;
  T sum_exp = T(0);
  for (int j = 0; j < atoms; ++j) {
    const T e = dev_exp(row[j] - max);
    row[j] = e;
    sum_exp += e;
  }
  for (int j = 0; j < atoms; ++j) row[j] = row[j] / sum_exp;
}

// Index of the largest of q[0..A): the first on a tie, and the first NaN if any (torch.argmax).
template <typename T>
__device__ __forceinline__ int c51_argmax(const T* q, int A) {
  int best = 0;
  T best_q = q[0];
  for (int a = 1; a < A; ++a) {
    const T v = q[a];
    if (v > best_q || (v != v && best_q == best_q)) {
      best = a;
      best_q = v;
    }
  }
  return best;
}

// Tiles of tile_pairs consecutive pairs (n,k), grid-stride over tiles. Per pair:
//   q_a = expected value of online[n,k,a,:] (one thread per (pair, a) row),
//   a* = argmax_a q_a (one thread per pair),
//   p_next[n,k,:] = softmax(target[n,k,a*,:]) (the chosen rows gathered, kStageBatch loads in
//   flight per thread, then one thread per pair).
// Shared memory: [q: tile*A] [staged: online tile | chosen target rows] [a*: tile ints].
template <typename T>
__global__ void __launch_bounds__(kTileThreads)
    c51_target_kernel(const T* __restrict__ online, const T* __restrict__ target,
                      const T* __restrict__ support, int64_t pairs, int A, int atoms,
                      int64_t tile_pairs, bool staged, NarrowDivider row_of,
                      T* __restrict__ p_next) {
  T* smem = reinterpret_cast<T*>(c51_tile_smem);
  T* q_s = smem;
  T* online_s = q_s + tile_pairs * A;
  T* chosen_s = online_s + (staged ? tile_pairs * A * atoms : 0);
  int* choice_s = reinterpret_cast<int*>(chosen_s + (staged ? tile_pairs * atoms : 0));
  const int step = static_cast<int>(blockDim.x);
  for (int64_t tile = blockIdx.x; tile * tile_pairs < pairs; tile += gridDim.x) {
    const int64_t pair0 = tile * tile_pairs;
    const int64_t n_pairs = pairs - pair0 < tile_pairs ? pairs - pair0 : tile_pairs;
    const int64_t q_rows = n_pairs * A;
    const T* online_tile = online + pair0 * A * atoms;
    if (staged) {
      stage_in(online_s, online_tile, static_cast<T*>(nullptr), static_cast<const T*>(nullptr),
               static_cast<int>(q_rows * atoms));
      __syncthreads();
      for (int64_t r = threadIdx.x; r < q_rows; r += step)
        q_s[r] = c51_expected_value(static_cast<const T*>(online_s) + r * atoms, support, atoms);
    } else {
      for (int64_t r = threadIdx.x; r < q_rows; r += step)
        q_s[r] = c51_expected_value(online_tile + r * atoms, support, atoms);
    }
    __syncthreads();
    for (int64_t i = threadIdx.x; i < n_pairs; i += step) choice_s[i] = c51_argmax(q_s + i * A, A);
    __syncthreads();
    T* out_tile = p_next + pair0 * atoms;
    T* chosen = staged ? chosen_s : out_tile;  // unstaged: gathered and normalised in place
    const int elements = static_cast<int>(n_pairs * atoms);
    for (int base = static_cast<int>(threadIdx.x); base < elements; base += kStageBatch * step) {
      T v[kStageBatch];
#pragma unroll
      for (int c = 0; c < kStageBatch; ++c) {
        const int e = base + c * step;
        if (e < elements) {
          const int64_t i = row_of.div(e);
          const int64_t j = e - i * atoms;
          v[c] = target[((pair0 + i) * A + choice_s[i]) * atoms + j];
        }
      }
#pragma unroll
      for (int c = 0; c < kStageBatch; ++c) {
        const int e = base + c * step;
        if (e < elements) chosen[e] = v[c];
      }
    }
    __syncthreads();
    for (int64_t i = threadIdx.x; i < n_pairs; i += step) c51_softmax_in_place(chosen + i * atoms, atoms);
    __syncthreads();
    if (staged) {
      copy_out(out_tile, static_cast<const T*>(chosen_s), elements);
      __syncthreads();  // the next tile overwrites the shared buffers
    }
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

namespace {

// Tile geometry of the loss forward. It depends on (B, K, atoms, T) only, never on P, so a
// member's bits do not depend on the population either.
struct LossTiles {
  int64_t tile_samples;
  bool staged;  // the tile's logits and m rows fit in shared memory
  bool fused;   // one tile is one whole member: per_sample and value in one kernel
  size_t smem_bytes;
};

template <typename T>
LossTiles loss_tiles(int64_t B, int64_t K, int64_t atoms) {
  // Staged bytes per sample: logits and m rows, K row losses, one sample loss.
  const int64_t staged_sample = static_cast<int64_t>(sizeof(T)) * (2 * K * atoms + K + 1);
  if (B * staged_sample <= kTileSmemBytes)
    return {B, true, true, static_cast<size_t>(B * staged_sample)};
  const int64_t by_threads = K < kTileThreads ? kTileThreads / K : 1;  // about a row per thread
  if (staged_sample <= kTileSmemBytes) {
    const int64_t by_memory = kTileSmemBytes / staged_sample;
    const int64_t tile = by_memory < by_threads ? by_memory : by_threads;
    return {tile, true, false, static_cast<size_t>(tile * staged_sample)};
  }
  const int64_t unstaged_sample = static_cast<int64_t>(sizeof(T)) * (K + 1);
  return {by_threads, false, false, static_cast<size_t>(by_threads * unstaged_sample)};
}

// Tile geometry of the double-DQN target; depends on (A, atoms, T) only.
struct TargetTiles {
  int64_t tile_pairs;
  bool staged;  // the tile's online rows and chosen target rows fit in shared memory
  size_t smem_bytes;
};

template <typename T>
TargetTiles target_tiles(int64_t A, int64_t atoms) {
  const int64_t small = static_cast<int64_t>(sizeof(T)) * A + static_cast<int64_t>(sizeof(int));
  const int64_t staged_pair = small + static_cast<int64_t>(sizeof(T)) * (A * atoms + atoms);
  const int64_t by_threads = A < kTileThreads ? kTileThreads / A : 1;  // about a row per thread
  if (staged_pair <= kTileSmemBytes) {
    const int64_t by_memory = kTileSmemBytes / staged_pair;
    const int64_t tile = by_memory < by_threads ? by_memory : by_threads;
    return {tile, true, static_cast<size_t>(tile * staged_pair)};
  }
  return {by_threads, false, static_cast<size_t>(by_threads * small)};
}

}  // namespace

template <typename T>
cudaError_t c51_target(const T* online_logits, const T* target_logits, const T* support,
                       int64_t N, int64_t K, int64_t A, int64_t atoms, T* p_next,
                       cudaStream_t stream) {
  const int64_t pairs = N * K;
  if (pairs <= 0 || A <= 0 || atoms <= 0) return cudaSuccess;
  const TargetTiles t = target_tiles<T>(A, atoms);
  const int64_t tiles = (pairs + t.tile_pairs - 1) / t.tile_pairs;
  c51_target_kernel<T><<<clamp_blocks(tiles), kTileThreads, t.smem_bytes, stream>>>(
      online_logits, target_logits, support, pairs, static_cast<int>(A), static_cast<int>(atoms),
      t.tile_pairs, t.staged, NarrowDivider(atoms), p_next);
  return cudaGetLastError();
}

template <typename T>
cudaError_t c51_loss_forward(const T* logits, const T* m, int64_t P, int64_t B, int64_t K,
                             int64_t atoms, T* per_sample, T* value, T* residual,
                             cudaStream_t stream) {
  const int64_t samples = P * B;
  if (samples <= 0 || K <= 0 || atoms <= 0) return cudaSuccess;
  const LossTiles t = loss_tiles<T>(B, K, atoms);
  const int64_t tiles = (samples + t.tile_samples - 1) / t.tile_samples;  // fused: P
  c51_loss_tile_kernel<T><<<clamp_blocks(tiles), kTileThreads, t.smem_bytes, stream>>>(
      logits, m, samples, K, static_cast<int>(atoms), t.tile_samples, t.staged, t.fused, B,
      per_sample, value, residual);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess || t.fused) return err;
  return launch_row_mean<T, false>(per_sample, P, B, value, stream);
}

template <typename T>
cudaError_t c51_loss_backward(const T* grad_per_sample, const T* grad_value, const T* residual,
                              int64_t P, int64_t B, int64_t K, int64_t atoms, T* grad_logits,
                              cudaStream_t stream) {
  const int64_t total = P * B * K * atoms;
  if (total <= 0) return cudaSuccess;
  const int64_t chunk = static_cast<int64_t>(kThreadsPerBlock) * kStageBatch;
  const unsigned int blocks = clamp_blocks((total + chunk - 1) / chunk);
  if (total <= INT32_MAX) {
    c51_loss_backward_kernel<T, NarrowDivider><<<blocks, kThreadsPerBlock, 0, stream>>>(
        grad_per_sample, grad_value, residual, total, NarrowDivider(K * atoms), NarrowDivider(B),
        B, K, grad_logits);
  } else {
    c51_loss_backward_kernel<T, WideDivider><<<blocks, kThreadsPerBlock, 0, stream>>>(
        grad_per_sample, grad_value, residual, total, WideDivider(K * atoms), WideDivider(B), B,
        K, grad_logits);
  }
  return cudaGetLastError();
}

#define TUNE_GEMS_INSTANTIATE_C51(T)                                                            \
  template cudaError_t c51_project<T>(const T*, const T*, const T*, int64_t, int64_t, double,   \
                                      double, T*, cudaStream_t);                                \
  template cudaError_t c51_target<T>(const T*, const T*, const T*, int64_t, int64_t, int64_t,   \
                                     int64_t, T*, cudaStream_t);                                \
  template cudaError_t c51_loss_forward<T>(const T*, const T*, int64_t, int64_t, int64_t,       \
                                           int64_t, T*, T*, T*, cudaStream_t);                  \
  template cudaError_t c51_loss_backward<T>(const T*, const T*, const T*, int64_t, int64_t,     \
                                            int64_t, int64_t, T*, cudaStream_t);

TUNE_GEMS_INSTANTIATE_C51(float)
TUNE_GEMS_INSTANTIATE_C51(double)

#undef TUNE_GEMS_INSTANTIATE_C51

}  // namespace tune_gems
