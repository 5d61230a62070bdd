// Host launchers of the tune-gems CUDA kernels (gems G6/G10/G12, C51 target, projection and
// loss).
//
// Plain C++ on purpose: no torch headers, so every .cu compiles alone with
// `nvcc -std=c++17 -c -arch=sm_90` on a machine without CUDA-enabled torch. The torch binding
// (binding.cpp) allocates every output and scratch buffer and passes raw pointers here.
//
// Contract shared by every launcher (docs/design.md, "Ops and kernels"):
// - all pointers are device pointers to contiguous row-major buffers of the documented shape;
// - kernels are launched on `stream` only; no host sync, no allocation, no memset, no atomics;
// - every element of every output is written (overwrite, never accumulate), so outputs may be
//   uninitialised (at::empty) and a CUDA-graph replay gives the same bits as the first run;
// - a scalar per member [P] is a fixed-order reduction (one block per member, fixed tree);
// - the return value is cudaGetLastError() after the last launch (cudaSuccess when a size is 0).
// Templates are explicitly instantiated for float and double in the .cu files.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace tune_gems {

// Number of k<l branch pairs of G6 (0 when K < 2).
inline int64_t g6_num_pairs(int64_t K) { return K < 2 ? 0 : K * (K - 1) / 2; }

// ---------------------------------------------------------------- G6 branch independence
// f [P,K,B,D] -> value [P].
// Scratch (written here, read by nothing else): z [P,K,B,D] standardised features,
// sd [P,K,D] sqrt(var_B + eps), r [P,npairs,D,D] the pair correlations R_kl (k<l, triu order).
template <typename T>
cudaError_t g6_forward(const T* f, int64_t P, int64_t K, int64_t B, int64_t D,
                       T* z, T* sd, T* r, T* value, cudaStream_t stream);

// grad_value [P], f [P,K,B,D] -> grad_f [P,K,B,D]. Scratch z, sd, r as in g6_forward.
template <typename T>
cudaError_t g6_backward(const T* grad_value, const T* f, int64_t P, int64_t K, int64_t B,
                        int64_t D, T* z, T* sd, T* r, T* grad_f, cudaStream_t stream);

// ---------------------------------------------------------------- G10 temporal consistency
// q_t, q_tp1 [P,B,K,A] (KA = K*A), nd [P,B] -> per_sample [P,B], value [P].
template <typename T>
cudaError_t g10_forward(const T* q_t, const T* q_tp1, const T* nd, int64_t P, int64_t B,
                        int64_t KA, T* per_sample, T* value, cudaStream_t stream);

// grad_per_sample [P,B] (nullptr = zeros), grad_value [P] -> grad_q_t, grad_q_tp1 = -grad_q_t.
template <typename T>
cudaError_t g10_backward(const T* grad_per_sample, const T* grad_value, const T* q_t,
                         const T* q_tp1, const T* nd, int64_t P, int64_t B, int64_t KA,
                         T* grad_q_t, T* grad_q_tp1, cudaStream_t stream);

// ---------------------------------------------------------------- G12 predictive coding
// pred, target [P,B,D], nd [P,B] -> per_sample [P,B], value [P].
template <typename T>
cudaError_t g12_forward(const T* pred, const T* target, const T* nd, int64_t P, int64_t B,
                        int64_t D, T* per_sample, T* value, cudaStream_t stream);

// grad_per_sample [P,B] (nullptr = zeros), grad_value [P] -> grad_pred [P,B,D].
template <typename T>
cudaError_t g12_backward(const T* grad_per_sample, const T* grad_value, const T* pred,
                         const T* target, const T* nd, int64_t P, int64_t B, int64_t D,
                         T* grad_pred, cudaStream_t stream);

// ---------------------------------------------------------------- C51
// Gather-form projection. p [N,atoms], r [N], g [N] -> m [N,atoms] (atoms >= 2).
template <typename T>
cudaError_t c51_project(const T* p, const T* r, const T* g, int64_t N, int64_t atoms,
                        double v_min, double v_max, T* m, cudaStream_t stream);

// Double-DQN target. online_logits, target_logits [N,K,A,atoms], support [atoms]
//   -> p_next [N,K,atoms] = softmax(target_logits[n,k,a*]) with
//   a* = argmax_a sum_j softmax(online_logits[n,k,a])_j support_j (first maximum).
template <typename T>
cudaError_t c51_target(const T* online_logits, const T* target_logits, const T* support,
                       int64_t N, int64_t K, int64_t A, int64_t atoms, T* p_next,
                       cudaStream_t stream);

// logits, m [P,B,K,atoms] -> per_sample [P,B], value [P], and residual [P,B,K,atoms]
// = softmax(logits) * sum_j m_j - m (each row's gradient before the upstream weight; the
// backward reads only it).
template <typename T>
cudaError_t c51_loss_forward(const T* logits, const T* m, int64_t P, int64_t B, int64_t K,
                             int64_t atoms, T* per_sample, T* value, T* residual,
                             cudaStream_t stream);

// grad_per_sample [P,B] (nullptr = zeros), grad_value [P], residual [P,B,K,atoms]
//   -> grad_logits [P,B,K,atoms] = residual * (grad_per_sample + grad_value / B) / K.
template <typename T>
cudaError_t c51_loss_backward(const T* grad_per_sample, const T* grad_value, const T* residual,
                              int64_t P, int64_t B, int64_t K, int64_t atoms, T* grad_logits,
                              cudaStream_t stream);

// ---------------------------------------------------------------- fused dueling-C51 head
// value [P,N,atoms], adv [P,K,N,A,atoms], support [atoms], action [P,R,K] (int64, R <= N)
//   -> q [P,N,K,A] (expected Q of every sub-action), log_probs [P,R,K,atoms] (the taken
//   sub-action's log-softmax of l = v + adv - mean_a adv). kernels/dueling_head.cu.
template <typename T>
cudaError_t dueling_c51_forward(const T* value, const T* adv, const T* support, const int64_t* action,
                                int64_t P, int64_t N, int64_t K, int64_t A, int64_t atoms, int64_t R,
                                T* q, T* log_probs, cudaStream_t stream);

// grad_q [P,N,K,A] and grad_log_probs [P,R,K,atoms] (each nullptr = zeros) -> grad_value
// [P,N,atoms], grad_adv [P,K,N,A,atoms], every element written.
template <typename T>
cudaError_t dueling_c51_backward(const T* grad_q, const T* grad_log_probs, const T* value, const T* adv,
                                 const T* support, const int64_t* action, int64_t P, int64_t N,
                                 int64_t K, int64_t A, int64_t atoms, int64_t R, T* grad_value,
                                 T* grad_adv, cudaStream_t stream);

}  // namespace tune_gems
