// CUDA kernels of the fused dueling-C51 head (tune_gems::dueling_c51, issue 22): from the value
// logits v [P,N,atoms] and the advantage logits adv [P,K,N,A,atoms] (as the adv_out matmul
// writes them), per row n, branch k and sub-action a,
//   l[a,j] = v[j] + adv[a,j] - mean_a' adv[a',j],   p[a,:] = softmax(l[a,:]),
//   q[a] = sum_j p[a,j] z_j,   lp[j] = l[a*,j] - logsumexp(l[a*,:])   (rows n < R only),
// and the backward (grad_value, grad_adv) from (grad_q, grad_lp), recomputing l, p and the
// per-(k,a) statistics from v and adv: the [P,N,K,A,atoms] logits never reach global memory.
//
// Graph-safe and deterministic (docs/design.md, "Ops and kernels"): one warp per row (p, n)
// (grid-stride over the P*N rows, uniform across the warp), lane c owns the atoms j = c, c+32,
// ...; every sum is lane partials in increasing j, then an xor butterfly of the whole warp
// (fixed_order_reduce.cuh), or a loop in increasing a / k. Nothing depends on P or on the
// launch geometry (the arms invariant), there are no atomics and no memsets: every output
// element is written exactly once. Per-(k,a) statistics (max, sum of exponentials, q) live in
// the warp's slice of shared memory.
#include <cstdint>

#include <cuda_runtime.h>

#include "fixed_order_reduce.cuh"
#include "tune_gems_kernels.h"

namespace tune_gems {
namespace {

// Threads per block of the head kernels (whole warps; one row per warp at a time).
constexpr int kHeadThreads = 128;
constexpr int kHeadWarps = kHeadThreads / kWarpSize;
// Dynamic shared memory a block may use without an opt-in.
constexpr int64_t kHeadSmemBytes = 48 * 1024;

static_assert(kHeadThreads % kWarpSize == 0, "kHeadThreads must be whole warps");

extern __shared__ __align__(16) unsigned char head_smem[];

struct HeadShape {
  int64_t P, N, K, A, atoms, R;
};

// Statistics slots of one warp: max[K*A], sum of exponentials[K*A], q[K*A], sum of the
// upstream log-prob gradient[K].
__host__ __device__ inline int64_t head_slots(const HeadShape& s) { return 3 * s.K * s.A + s.K; }

// mean_a adv[a,j] of one branch (sum in increasing a, then one division).
template <typename T>
__device__ __forceinline__ T adv_mean(const T* adv_k, int64_t j, int64_t A, int64_t atoms) {
  T sum = T(0);
  for (int64_t a = 0; a < A; ++a) sum += adv_k[a * atoms + j];
  return sum / static_cast<T>(A);
}

// Fills the warp's statistics of row (p, n): for every (k, a) the max over j of l[a,j], the
// sum of exp(l - max) and q = sum exp(l - max) z / sum exp(l - max). Every lane of the warp
// calls it; on return every lane may read the slots (after the __syncwarp inside).
template <typename T>
__device__ void row_statistics(const T* v_row, const T* adv, const T* support, const HeadShape& s,
                               int64_t p, int64_t n, int lane, T* stat_max, T* stat_sum, T* stat_q) {
  for (int64_t k = 0; k < s.K; ++k) {
    const T* adv_k = adv + ((p * s.K + k) * s.N + n) * s.A * s.atoms;
    for (int64_t a = 0; a < s.A; ++a) {
      T max = lowest_value<T>();
      for (int64_t j = lane; j < s.atoms; j += kWarpSize) {
        const T l = v_row[j] + adv_k[a * s.atoms + j] - adv_mean(adv_k, j, s.A, s.atoms);
        max = l > max ? l : max;
      }
      max = group_max(max, kWarpSize);
      T sum = T(0), sum_z = T(0);
      for (int64_t j = lane; j < s.atoms; j += kWarpSize) {
        const T e = dev_exp(v_row[j] + adv_k[a * s.atoms + j] - adv_mean(adv_k, j, s.A, s.atoms) - max);
        sum += e;
        sum_z += e * support[j];
      }
      sum = group_sum(sum, kWarpSize);
      sum_z = group_sum(sum_z, kWarpSize);
      if (lane == 0) {
        stat_max[k * s.A + a] = max;
        stat_sum[k * s.A + a] = sum;
        stat_q[k * s.A + a] = sum_z / sum;
      }
    }
  }
  __syncwarp();
}

// The taken sub-action of (p, n, k) for a row with log-probabilities, or -1 (none / invalid).
__device__ __forceinline__ int64_t taken_action(const int64_t* action, const HeadShape& s, int64_t p,
                                                int64_t n, int64_t k) {
  if (n >= s.R) return -1;
  const int64_t a = action[(p * s.R + n) * s.K + k];
  return (a >= 0 && a < s.A) ? a : -1;
}

template <typename T>
__global__ void __launch_bounds__(kHeadThreads)
    dueling_c51_forward_kernel(const T* __restrict__ value, const T* __restrict__ adv,
                               const T* __restrict__ support, const int64_t* __restrict__ action,
                               HeadShape s, T* __restrict__ q, T* __restrict__ log_probs) {
  const int lane = static_cast<int>(threadIdx.x) & (kWarpSize - 1);
  const int warp_in_block = static_cast<int>(threadIdx.x) / kWarpSize;
  T* slots = reinterpret_cast<T*>(head_smem) + warp_in_block * head_slots(s);
  T* stat_max = slots;
  T* stat_sum = slots + s.K * s.A;
  T* stat_q = slots + 2 * s.K * s.A;
  const int64_t warps = item_stride() / kWarpSize;
  for (int64_t row = first_item() / kWarpSize; row < s.P * s.N; row += warps) {
    const int64_t p = row / s.N, n = row % s.N;
    const T* v_row = value + row * s.atoms;
    __syncwarp();  // the previous row's readers of the slots are done
    row_statistics(v_row, adv, support, s, p, n, lane, stat_max, stat_sum, stat_q);
    for (int64_t i = lane; i < s.K * s.A; i += kWarpSize) q[row * s.K * s.A + i] = stat_q[i];
    if (n >= s.R) continue;
    for (int64_t k = 0; k < s.K; ++k) {
      const T* adv_k = adv + ((p * s.K + k) * s.N + n) * s.A * s.atoms;
      T* lp = log_probs + ((p * s.R + n) * s.K + k) * s.atoms;
      const int64_t a = taken_action(action, s, p, n, k);
      if (a < 0) {  // an invalid action: NaN, visible, with no host sync
        for (int64_t j = lane; j < s.atoms; j += kWarpSize) lp[j] = dev_log(T(-1));
        continue;
      }
      const T lse = stat_max[k * s.A + a] + dev_log(stat_sum[k * s.A + a]);
      for (int64_t j = lane; j < s.atoms; j += kWarpSize)
        lp[j] = v_row[j] + adv_k[a * s.atoms + j] - adv_mean(adv_k, j, s.A, s.atoms) - lse;
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kHeadThreads)
    dueling_c51_backward_kernel(const T* __restrict__ grad_q, const T* __restrict__ grad_lp,
                                const T* __restrict__ value, const T* __restrict__ adv,
                                const T* __restrict__ support, const int64_t* __restrict__ action,
                                HeadShape s, T* __restrict__ grad_value, T* __restrict__ grad_adv) {
  const int lane = static_cast<int>(threadIdx.x) & (kWarpSize - 1);
  const int warp_in_block = static_cast<int>(threadIdx.x) / kWarpSize;
  T* slots = reinterpret_cast<T*>(head_smem) + warp_in_block * head_slots(s);
  T* stat_max = slots;
  T* stat_sum = slots + s.K * s.A;
  T* stat_q = slots + 2 * s.K * s.A;
  T* lp_sum = slots + 3 * s.K * s.A;
  const int64_t warps = item_stride() / kWarpSize;
  for (int64_t row = first_item() / kWarpSize; row < s.P * s.N; row += warps) {
    const int64_t p = row / s.N, n = row % s.N;
    const T* v_row = value + row * s.atoms;
    __syncwarp();
    row_statistics(v_row, adv, support, s, p, n, lane, stat_max, stat_sum, stat_q);
    const bool with_lp = grad_lp != nullptr && n < s.R;
    for (int64_t k = 0; k < s.K; ++k) {  // sum_j of the upstream log-prob gradient per branch
      T g = T(0);
      if (with_lp) {
        const T* glp = grad_lp + ((p * s.R + n) * s.K + k) * s.atoms;
        for (int64_t j = lane; j < s.atoms; j += kWarpSize) g += glp[j];
      }
      g = group_sum(g, kWarpSize);
      if (lane == 0) lp_sum[k] = g;
    }
    __syncwarp();
    for (int64_t j = lane; j < s.atoms; j += kWarpSize) {
      const T v_j = v_row[j], z_j = support[j];
      T dv = T(0);
      for (int64_t k = 0; k < s.K; ++k) {
        const T* adv_k = adv + ((p * s.K + k) * s.N + n) * s.A * s.atoms;
        T* gadv_k = grad_adv + ((p * s.K + k) * s.N + n) * s.A * s.atoms;
        const T mean_j = adv_mean(adv_k, j, s.A, s.atoms);
        const int64_t taken = with_lp ? taken_action(action, s, p, n, k) : -1;
        const T glp_j = with_lp ? grad_lp[((p * s.R + n) * s.K + k) * s.atoms + j] : T(0);
        // dl[a,j] for every a, twice: once for their sum, once to write dl - mean_a dl
        T dl_sum = T(0);
        for (int pass = 0; pass < 2; ++pass) {
          for (int64_t a = 0; a < s.A; ++a) {
            const int64_t ka = k * s.A + a;
            const T pa = dev_exp(v_j + adv_k[a * s.atoms + j] - mean_j - stat_max[ka]) / stat_sum[ka];
            T dl = T(0);
            if (grad_q != nullptr) dl = pa * (z_j - stat_q[ka]) * grad_q[row * s.K * s.A + ka];
            if (a == taken) dl += glp_j - pa * lp_sum[k];
            if (pass == 0)
              dl_sum += dl;
            else
              gadv_k[a * s.atoms + j] = dl - dl_sum / static_cast<T>(s.A);
          }
        }
        dv += dl_sum;
      }
      grad_value[row * s.atoms + j] = dv;
    }
  }
}

// Warps per block so that the statistics fit the shared-memory limit (0: they never fit).
template <typename T>
int head_warps_per_block(const HeadShape& s) {
  const int64_t per_warp = head_slots(s) * static_cast<int64_t>(sizeof(T));
  int warps = kHeadWarps;
  while (warps > 0 && warps * per_warp > kHeadSmemBytes) warps >>= 1;
  return warps;
}

template <typename T>
unsigned int head_blocks(const HeadShape& s, int warps) {
  return clamp_blocks((s.P * s.N + warps - 1) / warps);
}

}  // namespace

template <typename T>
cudaError_t dueling_c51_forward(const T* value, const T* adv, const T* support, const int64_t* action,
                                int64_t P, int64_t N, int64_t K, int64_t A, int64_t atoms, int64_t R,
                                T* q, T* log_probs, cudaStream_t stream) {
  const HeadShape s{P, N, K, A, atoms, R};
  if (P * N <= 0) return cudaSuccess;
  const int warps = head_warps_per_block<T>(s);
  if (warps == 0) return cudaErrorInvalidValue;
  const size_t smem = static_cast<size_t>(warps) * head_slots(s) * sizeof(T);
  dueling_c51_forward_kernel<T><<<head_blocks<T>(s, warps), warps * kWarpSize, smem, stream>>>(
      value, adv, support, action, s, q, log_probs);
  return cudaGetLastError();
}

template <typename T>
cudaError_t dueling_c51_backward(const T* grad_q, const T* grad_log_probs, const T* value, const T* adv,
                                 const T* support, const int64_t* action, int64_t P, int64_t N,
                                 int64_t K, int64_t A, int64_t atoms, int64_t R, T* grad_value,
                                 T* grad_adv, cudaStream_t stream) {
  const HeadShape s{P, N, K, A, atoms, R};
  if (P * N <= 0) return cudaSuccess;
  const int warps = head_warps_per_block<T>(s);
  if (warps == 0) return cudaErrorInvalidValue;
  const size_t smem = static_cast<size_t>(warps) * head_slots(s) * sizeof(T);
  dueling_c51_backward_kernel<T><<<head_blocks<T>(s, warps), warps * kWarpSize, smem, stream>>>(
      grad_q, grad_log_probs, value, adv, support, action, s, grad_value, grad_adv);
  return cudaGetLastError();
}

#define TUNE_GEMS_INSTANTIATE_HEAD(T)                                                             \
  template cudaError_t dueling_c51_forward<T>(const T*, const T*, const T*, const int64_t*,       \
                                              int64_t, int64_t, int64_t, int64_t, int64_t,        \
                                              int64_t, T*, T*, cudaStream_t);                     \
  template cudaError_t dueling_c51_backward<T>(const T*, const T*, const T*, const T*, const T*,  \
                                               const int64_t*, int64_t, int64_t, int64_t, int64_t, \
                                               int64_t, int64_t, T*, T*, cudaStream_t);

TUNE_GEMS_INSTANTIATE_HEAD(float)
TUNE_GEMS_INSTANTIATE_HEAD(double)

#undef TUNE_GEMS_INSTANTIATE_HEAD

}  // namespace tune_gems
