// Torch binding of the tune-gems CUDA kernels: the only file with torch headers.
//
// Each function validates its tensors (CUDA, float32/float64, one dtype, contiguous, shapes),
// allocates outputs and scratch with torch's caching allocator (at::empty: never
// zeros-then-accumulate, the kernels overwrite every element), and launches on torch's current
// stream of the tensors' device. Nothing here syncs with the host, so each call can be
// captured in a CUDA graph. The Python side (tune_gems/ops/custom_ops.py) makes inputs
// contiguous and wraps these functions as torch.library custom ops.
#include <cstdint>
#include <optional>
#include <tuple>

// c10's stream and guard headers, not ATen/cuda/CUDAContext.h: the latter pulls in cuBLAS and
// cuSPARSE headers, which a minimal CUDA toolkit (nvcc + runtime) may lack.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/extension.h>

#include "tune_gems_kernels.h"

namespace {

using at::Tensor;

void check_input(const Tensor& t, const char* name, const Tensor& like) {
  TORCH_CHECK(t.is_cuda(), "tune_gems: ", name, " must be a CUDA tensor");
  TORCH_CHECK(t.scalar_type() == at::kFloat || t.scalar_type() == at::kDouble, "tune_gems: ", name,
              " must be float32 or float64, got ", t.scalar_type());
  TORCH_CHECK(t.scalar_type() == like.scalar_type(), "tune_gems: ", name, " has dtype ",
              t.scalar_type(), " but the op's first input has ", like.scalar_type());
  TORCH_CHECK(t.device() == like.device(), "tune_gems: ", name, " is on ", t.device(),
              " but the op's first input is on ", like.device());
  TORCH_CHECK(t.is_contiguous(), "tune_gems: ", name, " must be contiguous");
}

void check_shape(const Tensor& t, const char* name, at::IntArrayRef expected) {
  TORCH_CHECK(t.sizes() == expected, "tune_gems: ", name, " must have shape ", expected, ", got ",
              t.sizes());
}

void check_positive(int64_t size, const char* what) {
  TORCH_CHECK(size >= 1, "tune_gems: ", what, " must be >= 1, got ", size);
}

void check_launch(cudaError_t err, const char* op) {
  TORCH_CHECK(err == cudaSuccess, "tune_gems: CUDA kernel of ", op, " failed: ",
              cudaGetErrorString(err));
}

// The optional upstream gradient of per_sample: nullptr when absent.
template <typename T>
const T* optional_data(const std::optional<Tensor>& t) {
  return t.has_value() ? t->data_ptr<T>() : nullptr;
}

void check_optional_grad(const std::optional<Tensor>& grad, const char* name, const Tensor& like,
                         at::IntArrayRef expected) {
  if (!grad.has_value()) return;
  check_input(*grad, name, like);
  check_shape(*grad, name, expected);
}

// torch's current stream of the current device (set by the CUDAGuard of each caller); the
// same stream as at::cuda::getCurrentCUDAStream(), so graph capture records the launches.
cudaStream_t current_stream() { return c10::cuda::getCurrentCUDAStream().stream(); }

// ------------------------------------------------------------------------ G6

Tensor g6_forward(const Tensor& f) {
  check_input(f, "f", f);
  TORCH_CHECK(f.dim() == 4, "tune_gems: g6 f must be [P,K,B,D], got ", f.sizes());
  const int64_t P = f.size(0), K = f.size(1), B = f.size(2), D = f.size(3);
  check_positive(P, "P");
  check_positive(K, "K");
  check_positive(B, "B");
  check_positive(D, "D");
  const c10::cuda::CUDAGuard guard(f.device());
  const auto options = f.options();
  Tensor z = at::empty({P, K, B, D}, options);
  Tensor sd = at::empty({P, K, D}, options);
  Tensor r = at::empty({P, tune_gems::g6_num_pairs(K), D, D}, options);
  Tensor value = at::empty({P}, options);
  AT_DISPATCH_FLOATING_TYPES(f.scalar_type(), "g6_forward", [&] {
    check_launch(tune_gems::g6_forward<scalar_t>(f.data_ptr<scalar_t>(), P, K, B, D,
                                                 z.data_ptr<scalar_t>(), sd.data_ptr<scalar_t>(),
                                                 r.data_ptr<scalar_t>(), value.data_ptr<scalar_t>(),
                                                 current_stream()),
                 "g6_branch_indep");
  });
  return value;
}

Tensor g6_backward(const Tensor& grad_value, const Tensor& f) {
  check_input(f, "f", f);
  TORCH_CHECK(f.dim() == 4, "tune_gems: g6 f must be [P,K,B,D], got ", f.sizes());
  const int64_t P = f.size(0), K = f.size(1), B = f.size(2), D = f.size(3);
  check_positive(P, "P");
  check_positive(K, "K");
  check_positive(B, "B");
  check_positive(D, "D");
  check_input(grad_value, "grad_value", f);
  check_shape(grad_value, "grad_value", {P});
  const c10::cuda::CUDAGuard guard(f.device());
  const auto options = f.options();
  Tensor z = at::empty({P, K, B, D}, options);
  Tensor sd = at::empty({P, K, D}, options);
  Tensor r = at::empty({P, tune_gems::g6_num_pairs(K), D, D}, options);
  Tensor grad_f = at::empty({P, K, B, D}, options);
  AT_DISPATCH_FLOATING_TYPES(f.scalar_type(), "g6_backward", [&] {
    check_launch(tune_gems::g6_backward<scalar_t>(
                     grad_value.data_ptr<scalar_t>(), f.data_ptr<scalar_t>(), P, K, B, D,
                     z.data_ptr<scalar_t>(), sd.data_ptr<scalar_t>(), r.data_ptr<scalar_t>(),
                     grad_f.data_ptr<scalar_t>(), current_stream()),
                 "g6_branch_indep_backward");
  });
  return grad_f;
}

// ------------------------------------------------------------------------ G10

std::tuple<Tensor, Tensor> g10_forward(const Tensor& q_t, const Tensor& q_tp1, const Tensor& nd) {
  check_input(q_t, "q_t", q_t);
  TORCH_CHECK(q_t.dim() == 4, "tune_gems: g10 q_t must be [P,B,K,A], got ", q_t.sizes());
  const int64_t P = q_t.size(0), B = q_t.size(1), KA = q_t.size(2) * q_t.size(3);
  check_positive(P, "P");
  check_positive(B, "B");
  check_positive(KA, "K*A");
  check_input(q_tp1, "q_tp1", q_t);
  check_shape(q_tp1, "q_tp1", q_t.sizes());
  check_input(nd, "nd", q_t);
  check_shape(nd, "nd", {P, B});
  const c10::cuda::CUDAGuard guard(q_t.device());
  Tensor per_sample = at::empty({P, B}, q_t.options());
  Tensor value = at::empty({P}, q_t.options());
  AT_DISPATCH_FLOATING_TYPES(q_t.scalar_type(), "g10_forward", [&] {
    check_launch(tune_gems::g10_forward<scalar_t>(
                     q_t.data_ptr<scalar_t>(), q_tp1.data_ptr<scalar_t>(), nd.data_ptr<scalar_t>(),
                     P, B, KA, per_sample.data_ptr<scalar_t>(), value.data_ptr<scalar_t>(),
                     current_stream()),
                 "g10_temporal");
  });
  return {per_sample, value};
}

std::tuple<Tensor, Tensor> g10_backward(const std::optional<Tensor>& grad_per_sample,
                                        const Tensor& grad_value, const Tensor& q_t,
                                        const Tensor& q_tp1, const Tensor& nd) {
  check_input(q_t, "q_t", q_t);
  TORCH_CHECK(q_t.dim() == 4, "tune_gems: g10 q_t must be [P,B,K,A], got ", q_t.sizes());
  const int64_t P = q_t.size(0), B = q_t.size(1), KA = q_t.size(2) * q_t.size(3);
  check_positive(P, "P");
  check_positive(B, "B");
  check_positive(KA, "K*A");
  check_input(q_tp1, "q_tp1", q_t);
  check_shape(q_tp1, "q_tp1", q_t.sizes());
  check_input(nd, "nd", q_t);
  check_shape(nd, "nd", {P, B});
  check_input(grad_value, "grad_value", q_t);
  check_shape(grad_value, "grad_value", {P});
  check_optional_grad(grad_per_sample, "grad_per_sample", q_t, {P, B});
  const c10::cuda::CUDAGuard guard(q_t.device());
  Tensor grad_q_t = at::empty(q_t.sizes(), q_t.options());
  Tensor grad_q_tp1 = at::empty(q_t.sizes(), q_t.options());
  AT_DISPATCH_FLOATING_TYPES(q_t.scalar_type(), "g10_backward", [&] {
    check_launch(tune_gems::g10_backward<scalar_t>(
                     optional_data<scalar_t>(grad_per_sample), grad_value.data_ptr<scalar_t>(),
                     q_t.data_ptr<scalar_t>(), q_tp1.data_ptr<scalar_t>(), nd.data_ptr<scalar_t>(),
                     P, B, KA, grad_q_t.data_ptr<scalar_t>(), grad_q_tp1.data_ptr<scalar_t>(),
                     current_stream()),
                 "g10_temporal_backward");
  });
  return {grad_q_t, grad_q_tp1};
}

// ------------------------------------------------------------------------ G12

std::tuple<Tensor, Tensor> g12_forward(const Tensor& pred, const Tensor& target, const Tensor& nd) {
  check_input(pred, "pred", pred);
  TORCH_CHECK(pred.dim() == 3, "tune_gems: g12 pred must be [P,B,D], got ", pred.sizes());
  const int64_t P = pred.size(0), B = pred.size(1), D = pred.size(2);
  check_positive(P, "P");
  check_positive(B, "B");
  check_positive(D, "D");
  check_input(target, "target", pred);
  check_shape(target, "target", pred.sizes());
  check_input(nd, "nd", pred);
  check_shape(nd, "nd", {P, B});
  const c10::cuda::CUDAGuard guard(pred.device());
  Tensor per_sample = at::empty({P, B}, pred.options());
  Tensor value = at::empty({P}, pred.options());
  AT_DISPATCH_FLOATING_TYPES(pred.scalar_type(), "g12_forward", [&] {
    check_launch(tune_gems::g12_forward<scalar_t>(
                     pred.data_ptr<scalar_t>(), target.data_ptr<scalar_t>(), nd.data_ptr<scalar_t>(),
                     P, B, D, per_sample.data_ptr<scalar_t>(), value.data_ptr<scalar_t>(),
                     current_stream()),
                 "g12_predictive");
  });
  return {per_sample, value};
}

Tensor g12_backward(const std::optional<Tensor>& grad_per_sample, const Tensor& grad_value,
                    const Tensor& pred, const Tensor& target, const Tensor& nd) {
  check_input(pred, "pred", pred);
  TORCH_CHECK(pred.dim() == 3, "tune_gems: g12 pred must be [P,B,D], got ", pred.sizes());
  const int64_t P = pred.size(0), B = pred.size(1), D = pred.size(2);
  check_positive(P, "P");
  check_positive(B, "B");
  check_positive(D, "D");
  check_input(target, "target", pred);
  check_shape(target, "target", pred.sizes());
  check_input(nd, "nd", pred);
  check_shape(nd, "nd", {P, B});
  check_input(grad_value, "grad_value", pred);
  check_shape(grad_value, "grad_value", {P});
  check_optional_grad(grad_per_sample, "grad_per_sample", pred, {P, B});
  const c10::cuda::CUDAGuard guard(pred.device());
  Tensor grad_pred = at::empty(pred.sizes(), pred.options());
  AT_DISPATCH_FLOATING_TYPES(pred.scalar_type(), "g12_backward", [&] {
    check_launch(tune_gems::g12_backward<scalar_t>(
                     optional_data<scalar_t>(grad_per_sample), grad_value.data_ptr<scalar_t>(),
                     pred.data_ptr<scalar_t>(), target.data_ptr<scalar_t>(), nd.data_ptr<scalar_t>(),
                     P, B, D, grad_pred.data_ptr<scalar_t>(), current_stream()),
                 "g12_predictive_backward");
  });
  return grad_pred;
}

// ------------------------------------------------------------------------ C51

Tensor c51_project(const Tensor& p, const Tensor& r, const Tensor& g, double v_min, double v_max) {
  check_input(p, "p", p);
  TORCH_CHECK(p.dim() == 2, "tune_gems: c51_project p must be [N,atoms], got ", p.sizes());
  const int64_t N = p.size(0), atoms = p.size(1);
  check_positive(N, "N");
  TORCH_CHECK(atoms >= 2, "tune_gems: c51_project needs atoms >= 2, got ", atoms);
  TORCH_CHECK(v_max > v_min, "tune_gems: c51_project needs v_max > v_min, got ", v_min, ", ", v_max);
  check_input(r, "r", p);
  check_shape(r, "r", {N});
  check_input(g, "g", p);
  check_shape(g, "g", {N});
  const c10::cuda::CUDAGuard guard(p.device());
  Tensor m = at::empty(p.sizes(), p.options());
  AT_DISPATCH_FLOATING_TYPES(p.scalar_type(), "c51_project", [&] {
    check_launch(tune_gems::c51_project<scalar_t>(p.data_ptr<scalar_t>(), r.data_ptr<scalar_t>(),
                                                  g.data_ptr<scalar_t>(), N, atoms, v_min, v_max,
                                                  m.data_ptr<scalar_t>(), current_stream()),
                 "c51_project");
  });
  return m;
}

void check_c51_loss_inputs(const Tensor& logits, const Tensor& m) {
  check_input(logits, "logits", logits);
  TORCH_CHECK(logits.dim() == 4, "tune_gems: c51_loss logits must be [P,B,K,atoms], got ",
              logits.sizes());
  for (int64_t dim = 0; dim < 4; ++dim) check_positive(logits.size(dim), "every c51_loss dim");
  check_input(m, "m", logits);
  check_shape(m, "m", logits.sizes());
}

std::tuple<Tensor, Tensor, Tensor> c51_loss_forward(const Tensor& logits, const Tensor& m) {
  check_c51_loss_inputs(logits, m);
  const int64_t P = logits.size(0), B = logits.size(1), K = logits.size(2), atoms = logits.size(3);
  TORCH_CHECK(atoms <= INT32_MAX, "tune_gems: c51_loss needs atoms < 2^31, got ", atoms);
  const c10::cuda::CUDAGuard guard(logits.device());
  Tensor per_sample = at::empty({P, B}, logits.options());
  Tensor value = at::empty({P}, logits.options());
  Tensor residual = at::empty(logits.sizes(), logits.options());
  AT_DISPATCH_FLOATING_TYPES(logits.scalar_type(), "c51_loss_forward", [&] {
    check_launch(tune_gems::c51_loss_forward<scalar_t>(
                     logits.data_ptr<scalar_t>(), m.data_ptr<scalar_t>(), P, B, K, atoms,
                     per_sample.data_ptr<scalar_t>(), value.data_ptr<scalar_t>(),
                     residual.data_ptr<scalar_t>(), current_stream()),
                 "c51_loss");
  });
  return {per_sample, value, residual};
}

Tensor c51_loss_backward(const std::optional<Tensor>& grad_per_sample, const Tensor& grad_value,
                         const Tensor& residual) {
  check_input(residual, "residual", residual);
  TORCH_CHECK(residual.dim() == 4, "tune_gems: c51_loss residual must be [P,B,K,atoms], got ",
              residual.sizes());
  for (int64_t dim = 0; dim < 4; ++dim) check_positive(residual.size(dim), "every c51_loss dim");
  const int64_t P = residual.size(0), B = residual.size(1), K = residual.size(2),
                atoms = residual.size(3);
  check_input(grad_value, "grad_value", residual);
  check_shape(grad_value, "grad_value", {P});
  check_optional_grad(grad_per_sample, "grad_per_sample", residual, {P, B});
  const c10::cuda::CUDAGuard guard(residual.device());
  Tensor grad_logits = at::empty(residual.sizes(), residual.options());
  AT_DISPATCH_FLOATING_TYPES(residual.scalar_type(), "c51_loss_backward", [&] {
    check_launch(tune_gems::c51_loss_backward<scalar_t>(
                     optional_data<scalar_t>(grad_per_sample), grad_value.data_ptr<scalar_t>(),
                     residual.data_ptr<scalar_t>(), P, B, K, atoms,
                     grad_logits.data_ptr<scalar_t>(), current_stream()),
                 "c51_loss_backward");
  });
  return grad_logits;
}

Tensor c51_target(const Tensor& online_logits, const Tensor& target_logits, const Tensor& support) {
  check_input(online_logits, "online_logits", online_logits);
  TORCH_CHECK(online_logits.dim() == 4, "tune_gems: c51_target online_logits must be [N,K,A,atoms], got ",
              online_logits.sizes());
  for (int64_t dim = 0; dim < 4; ++dim) check_positive(online_logits.size(dim), "every c51_target dim");
  const int64_t N = online_logits.size(0), K = online_logits.size(1), A = online_logits.size(2),
                atoms = online_logits.size(3);
  TORCH_CHECK(A <= INT32_MAX && atoms <= INT32_MAX,
              "tune_gems: c51_target needs A and atoms < 2^31, got ", A, ", ", atoms);
  check_input(target_logits, "target_logits", online_logits);
  check_shape(target_logits, "target_logits", online_logits.sizes());
  check_input(support, "support", online_logits);
  check_shape(support, "support", {atoms});
  const c10::cuda::CUDAGuard guard(online_logits.device());
  Tensor p_next = at::empty({N, K, atoms}, online_logits.options());
  AT_DISPATCH_FLOATING_TYPES(online_logits.scalar_type(), "c51_target", [&] {
    check_launch(tune_gems::c51_target<scalar_t>(
                     online_logits.data_ptr<scalar_t>(), target_logits.data_ptr<scalar_t>(),
                     support.data_ptr<scalar_t>(), N, K, A, atoms, p_next.data_ptr<scalar_t>(),
                     current_stream()),
                 "c51_target");
  });
  return p_next;
}

// ------------------------------------------------------------------------ dueling-C51 head

struct HeadDims {
  int64_t P, N, K, A, atoms, R;
};

HeadDims check_dueling_c51_inputs(const Tensor& value, const Tensor& adv, const Tensor& support,
                                  const Tensor& action) {
  check_input(value, "value", value);
  TORCH_CHECK(value.dim() == 3, "tune_gems: dueling_c51 value must be [P,N,atoms], got ", value.sizes());
  check_input(adv, "adv", value);
  TORCH_CHECK(adv.dim() == 5, "tune_gems: dueling_c51 adv must be [P,K,N,A,atoms], got ", adv.sizes());
  TORCH_CHECK(action.dim() == 3, "tune_gems: dueling_c51 action must be [P,R,K], got ", action.sizes());
  const HeadDims d{adv.size(0), adv.size(2), adv.size(1), adv.size(3), adv.size(4), action.size(1)};
  for (int64_t dim = 0; dim < 5; ++dim) check_positive(adv.size(dim), "every dueling_c51 adv dim");
  check_shape(value, "value", {d.P, d.N, d.atoms});
  check_input(support, "support", value);
  check_shape(support, "support", {d.atoms});
  TORCH_CHECK(action.is_cuda() && action.device() == value.device(), "tune_gems: action must be on ",
              value.device());
  TORCH_CHECK(action.scalar_type() == at::kLong && action.is_contiguous(),
              "tune_gems: dueling_c51 action must be contiguous int64");
  TORCH_CHECK(action.size(0) == d.P && action.size(2) == d.K && d.R <= d.N,
              "tune_gems: dueling_c51 action must be [P,R,K] with R <= N, got ", action.sizes());
  return d;
}

std::tuple<Tensor, Tensor> dueling_c51_forward(const Tensor& value, const Tensor& adv,
                                               const Tensor& support, const Tensor& action) {
  const HeadDims d = check_dueling_c51_inputs(value, adv, support, action);
  const c10::cuda::CUDAGuard guard(value.device());
  Tensor q = at::empty({d.P, d.N, d.K, d.A}, value.options());
  Tensor log_probs = at::empty({d.P, d.R, d.K, d.atoms}, value.options());
  AT_DISPATCH_FLOATING_TYPES(value.scalar_type(), "dueling_c51_forward", [&] {
    check_launch(tune_gems::dueling_c51_forward<scalar_t>(
                     value.data_ptr<scalar_t>(), adv.data_ptr<scalar_t>(), support.data_ptr<scalar_t>(),
                     action.data_ptr<int64_t>(), d.P, d.N, d.K, d.A, d.atoms, d.R,
                     q.data_ptr<scalar_t>(), log_probs.data_ptr<scalar_t>(), current_stream()),
                 "dueling_c51");
  });
  return {q, log_probs};
}

std::tuple<Tensor, Tensor> dueling_c51_backward(const std::optional<Tensor>& grad_q,
                                                const std::optional<Tensor>& grad_log_probs,
                                                const Tensor& value, const Tensor& adv,
                                                const Tensor& support, const Tensor& action) {
  const HeadDims d = check_dueling_c51_inputs(value, adv, support, action);
  check_optional_grad(grad_q, "grad_q", value, {d.P, d.N, d.K, d.A});
  check_optional_grad(grad_log_probs, "grad_log_probs", value, {d.P, d.R, d.K, d.atoms});
  const c10::cuda::CUDAGuard guard(value.device());
  Tensor grad_value = at::empty({d.P, d.N, d.atoms}, value.options());
  Tensor grad_adv = at::empty({d.P, d.K, d.N, d.A, d.atoms}, value.options());
  AT_DISPATCH_FLOATING_TYPES(value.scalar_type(), "dueling_c51_backward", [&] {
    check_launch(tune_gems::dueling_c51_backward<scalar_t>(
                     optional_data<scalar_t>(grad_q), optional_data<scalar_t>(grad_log_probs),
                     value.data_ptr<scalar_t>(), adv.data_ptr<scalar_t>(), support.data_ptr<scalar_t>(),
                     action.data_ptr<int64_t>(), d.P, d.N, d.K, d.A, d.atoms, d.R,
                     grad_value.data_ptr<scalar_t>(), grad_adv.data_ptr<scalar_t>(), current_stream()),
                 "dueling_c51_backward");
  });
  return {grad_value, grad_adv};
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, module) {
  module.doc() = "tune-gems CUDA kernels (graph-safe, deterministic); see kernels/tune_gems_kernels.h";
  module.def("g6_forward", &g6_forward, "G6 value [P] of f [P,K,B,D]", pybind11::arg("f"));
  module.def("g6_backward", &g6_backward, "G6 grad_f from grad_value [P]",
             pybind11::arg("grad_value"), pybind11::arg("f"));
  module.def("g10_forward", &g10_forward, "G10 (per_sample [P,B], value [P])", pybind11::arg("q_t"),
             pybind11::arg("q_tp1"), pybind11::arg("nd"));
  module.def("g10_backward", &g10_backward, "G10 (grad_q_t, grad_q_tp1)",
             pybind11::arg("grad_per_sample"), pybind11::arg("grad_value"), pybind11::arg("q_t"),
             pybind11::arg("q_tp1"), pybind11::arg("nd"));
  module.def("g12_forward", &g12_forward, "G12 (per_sample [P,B], value [P])",
             pybind11::arg("pred"), pybind11::arg("target"), pybind11::arg("nd"));
  module.def("g12_backward", &g12_backward, "G12 grad_pred", pybind11::arg("grad_per_sample"),
             pybind11::arg("grad_value"), pybind11::arg("pred"), pybind11::arg("target"),
             pybind11::arg("nd"));
  module.def("c51_project", &c51_project, "C51 projection m [N,atoms]", pybind11::arg("p"),
             pybind11::arg("r"), pybind11::arg("g"), pybind11::arg("v_min"), pybind11::arg("v_max"));
  module.def("c51_target", &c51_target, "C51 double-DQN target p_next [N,K,atoms]",
             pybind11::arg("online_logits"), pybind11::arg("target_logits"), pybind11::arg("support"));
  module.def("c51_loss_forward", &c51_loss_forward,
             "C51 loss (per_sample [P,B], value [P], residual [P,B,K,atoms])",
             pybind11::arg("logits"), pybind11::arg("m"));
  module.def("c51_loss_backward", &c51_loss_backward, "C51 loss grad_logits from the residual",
             pybind11::arg("grad_per_sample"), pybind11::arg("grad_value"), pybind11::arg("residual"));
  module.def("dueling_c51_forward", &dueling_c51_forward,
             "fused dueling-C51 head (q [P,N,K,A], taken log-probs [P,R,K,atoms])", pybind11::arg("value"),
             pybind11::arg("adv"), pybind11::arg("support"), pybind11::arg("action"));
  module.def("dueling_c51_backward", &dueling_c51_backward, "dueling-C51 head (grad_value, grad_adv)",
             pybind11::arg("grad_q"), pybind11::arg("grad_log_probs"), pybind11::arg("value"),
             pybind11::arg("adv"), pybind11::arg("support"), pybind11::arg("action"));
}
