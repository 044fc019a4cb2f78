// Op schemas and their CPU/CUDA registrations, through the LibTorch stable ABI
// so that one binary serves every torch >= 2.10 (TORCH_TARGET_VERSION).
//
// This file owns argument checking, output allocation (always through torch,
// so CUDA memory comes from the caching allocator) and the choice of backend.
// Autograd, fake (meta) kernels and the CompositeImplicitAutograd body of the
// user-facing `align` live in Python (src/softsw/_ops.py).
#include <Python.h>  // limited API: only for the module init below

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/csrc/stable/device.h>
#include <torch/csrc/stable/accelerator.h>
#include <torch/headeronly/core/ScalarType.h>
#include <torch/headeronly/util/Exception.h>

#include <torch/csrc/inductor/aoti_torch/c/shim.h>

#include <cmath>
#include <optional>
#include <tuple>
#include <vector>

#include "kernels/problem.h"

namespace softsw {
namespace {

using torch::headeronly::ScalarType;
using torch::stable::Tensor;
using OptTensor = std::optional<Tensor>;

Dtype dtype_of(const Tensor& t, const char* what) {
  switch (t.scalar_type()) {
    case ScalarType::Half: return Dtype::Float16;
    case ScalarType::BFloat16: return Dtype::BFloat16;
    case ScalarType::Float: return Dtype::Float32;
    case ScalarType::Double: return Dtype::Float64;
    default:
      STD_TORCH_CHECK(false, "softsw: `", what,
                      "` must be float16, bfloat16, float32 or float64");
  }
  return Dtype::Float32;
}

ScalarType accumulate_type(const Tensor& scores) {
  return scores.scalar_type() == ScalarType::Double ? ScalarType::Double : ScalarType::Float;
}

void check_same_device(const Tensor& a, const Tensor& b, const char* what) {
  STD_TORCH_CHECK(a.is_cuda() == b.is_cuda() && a.get_device_index() == b.get_device_index(),
                  "softsw: `", what, "` must be on the same device as `scores`");
}

int32_t shim_dtype(ScalarType t) {
  switch (t) {
    case ScalarType::Half: return aoti_torch_dtype_float16();
    case ScalarType::BFloat16: return aoti_torch_dtype_bfloat16();
    case ScalarType::Float: return aoti_torch_dtype_float32();
    case ScalarType::Double: return aoti_torch_dtype_float64();
    case ScalarType::Long: return aoti_torch_dtype_int64();
    default: return aoti_torch_dtype_uint8();
  }
}

// An uninitialised contiguous tensor on `like`'s device, from torch's
// allocator (the caching allocator on CUDA). aoti_torch_empty_strided is a
// plain C shim call: much cheaper per call than a trip through the dispatcher,
// which matters for small batches where the host is the bottleneck.
Tensor new_tensor(const Tensor& like, std::vector<int64_t> shape, ScalarType dtype) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int64_t d = static_cast<int64_t>(shape.size()) - 2; d >= 0; --d)
    strides[d] = strides[d + 1] * shape[d + 1];
  AtenTensorHandle handle = nullptr;
  STD_TORCH_CHECK(
      aoti_torch_empty_strided(static_cast<int64_t>(shape.size()), shape.data(), strides.data(),
                               shim_dtype(dtype),
                               like.is_cuda() ? aoti_torch_device_type_cuda()
                                              : aoti_torch_device_type_cpu(),
                               like.get_device_index(), &handle) == AOTI_TORCH_SUCCESS,
      "softsw: could not allocate an output tensor");
  return Tensor(handle);
}

Tensor as_contiguous(const Tensor& t) {
  return t.is_contiguous() ? t : torch::stable::contiguous(t);
}

// Everything the kernels need from the shared arguments, checked.
struct ProblemArgs {
  Problem problem;
  Tensor scores;                 // contiguous copy or the input itself
  std::optional<Tensor> lengths; // contiguous
};

ProblemArgs make_problem(const Tensor& scores_in, const OptTensor& gap_open,
                         const OptTensor& gap_extend, double gap_open_value,
                         double gap_extend_value, bool affine, double temperature,
                         const OptTensor& lengths, int64_t reduction) {
  STD_TORCH_CHECK(scores_in.dim() == 3, "softsw: `scores` must have shape (B, M, N), got ",
                  scores_in.dim(), " dimensions");
  const Dtype dtype = dtype_of(scores_in, "scores");
  STD_TORCH_CHECK(temperature >= 0.0 && std::isfinite(temperature),
                  "softsw: `temperature` must be a finite number >= 0, got ", temperature);
  STD_TORCH_CHECK(reduction == 0 || reduction == 1,
                  "softsw: `reduction` must be 0 (max) or 1 (soft), got ", reduction);

  ProblemArgs args{Problem{}, as_contiguous(scores_in), std::nullopt};
  Problem& p = args.problem;
  p.batch = scores_in.size(0);
  p.rows = scores_in.size(1);
  p.cols = scores_in.size(2);
  p.dtype = dtype;
  p.scores = args.scores.data_ptr();
  p.affine = affine;
  p.temperature = temperature;
  p.reduction = static_cast<Reduction>(reduction);
  // As torch's own CPU ops: torch.set_num_threads (OMP_NUM_THREADS, a
  // DataLoader worker's one thread) bounds the CPU kernels' threads too.
  if (!scores_in.is_cuda()) p.cpu_threads = static_cast<int>(torch::stable::get_num_threads());

  if (lengths.has_value()) {
    const Tensor& l = *lengths;
    STD_TORCH_CHECK(l.scalar_type() == ScalarType::Long,
                    "softsw: `lengths` must be an int64 tensor");
    STD_TORCH_CHECK(l.dim() == 2 && l.size(0) == p.batch && l.size(1) == 2,
                    "softsw: `lengths` must have shape (B, 2) = (", p.batch, ", 2)");
    check_same_device(l, scores_in, "lengths");
    args.lengths = as_contiguous(l);
    p.lengths = static_cast<const int64_t*>(args.lengths->data_ptr());
  }

  auto gap = [&](const OptTensor& t, double value, const char* what) {
    GapScores g;
    g.value = value;
    if (t.has_value()) {
      STD_TORCH_CHECK(t->dim() == 3 && t->size(0) == p.batch && t->size(1) == p.rows &&
                          t->size(2) == p.cols,
                      "softsw: `", what, "` must be expanded to (B, M, N) = (", p.batch, ", ",
                      p.rows, ", ", p.cols, ")");
      STD_TORCH_CHECK(t->scalar_type() == scores_in.scalar_type(), "softsw: `", what,
                      "` must have the dtype of `scores`");
      check_same_device(*t, scores_in, what);
      g.data = t->data_ptr();
      for (int d = 0; d < 3; ++d) g.stride[d] = t->stride(d);
    } else {
      STD_TORCH_CHECK(std::isfinite(value) || value == -INFINITY, "softsw: `", what,
                      "` must be finite or -inf, got ", value);
    }
    return g;
  };
  p.gap_open = gap(gap_open, gap_open_value, "gap_open");
  p.gap_extend = gap(gap_extend, gap_extend_value, "gap_extend");
  return args;
}


#ifdef SOFTSW_WITH_CUDA
void* cuda_workspace(int64_t bytes, const Tensor& scores, std::optional<Tensor>& holder) {
  holder = new_tensor(scores, {bytes}, ScalarType::Byte);
  return holder->data_ptr();
}

void* current_stream(const Tensor& t) {
  void* stream = nullptr;
  STD_TORCH_CHECK(aoti_torch_get_current_cuda_stream(t.get_device_index(), &stream) ==
                      AOTI_TORCH_SUCCESS,
                  "softsw: could not get the current CUDA stream");
  return stream;
}
#endif

void check_device_supported(const Tensor& scores) {
  if (scores.is_cpu()) return;
#ifdef SOFTSW_WITH_CUDA
  if (scores.is_cuda()) return;
  STD_TORCH_CHECK(false, "softsw: `scores` must be a CPU or CUDA tensor");
#else
  STD_TORCH_CHECK(false,
                  "softsw: `scores` is not a CPU tensor, and this build of softsw has no "
                  "CUDA kernels (built without a CUDA toolkit)");
#endif
}

std::tuple<Tensor, Tensor, Tensor, Tensor> forward(
    Tensor scores, OptTensor gap_open, OptTensor gap_extend, double gap_open_value,
    double gap_extend_value, bool affine, double temperature, OptTensor lengths,
    int64_t reduction, bool keep_hidden) {
  check_device_supported(scores);
  ProblemArgs args = make_problem(scores, gap_open, gap_extend, gap_open_value,
                                  gap_extend_value, affine, temperature, lengths, reduction);
  args.problem.keeps_state = keep_hidden;
  const Problem& p = args.problem;
  const ScalarType acc = accumulate_type(scores);
  Tensor score = new_tensor(scores, {p.batch}, scores.scalar_type());
  Tensor hidden = new_tensor(
      scores, {keep_hidden ? hidden_elements(p.batch, p.rows, p.cols, affine) : 0}, acc);
  Tensor argmax = new_tensor(scores, {p.batch}, ScalarType::Long);
  Tensor total = new_tensor(scores, {p.batch, 2}, acc);

  ForwardOutputs out;
  out.score = score.data_ptr();
  out.hidden = keep_hidden ? hidden.data_ptr() : nullptr;
  out.argmax = static_cast<int64_t*>(argmax.data_ptr());
  out.total = total.data_ptr();
#ifdef SOFTSW_WITH_CUDA
  if (scores.is_cuda()) {
    torch::stable::accelerator::DeviceGuard guard(scores.get_device_index());
    std::optional<Tensor> workspace;
    forward_cuda(p, out, cuda_workspace(cuda_workspace_bytes(p), scores, workspace), current_stream(scores));
    return {score, hidden, argmax, total};
  }
#endif
  forward_cpu(p, out);
  return {score, hidden, argmax, total};
}

ForwardState state_of(const Problem& p, const Tensor& scores, const Tensor& hidden,
                      const Tensor& argmax, const Tensor& total) {
  const ScalarType acc = accumulate_type(scores);
  STD_TORCH_CHECK(hidden.scalar_type() == acc && hidden.dim() == 1 &&
                      hidden.size(0) == hidden_elements(p.batch, p.rows, p.cols, p.affine) &&
                      hidden.is_contiguous(),
                  "softsw: `hidden` is not the forward's saved state for these `scores` "
                  "(call the forward with keep_hidden=True)");
  STD_TORCH_CHECK(argmax.scalar_type() == ScalarType::Long && argmax.dim() == 1 &&
                      argmax.size(0) == p.batch && argmax.is_contiguous(),
                  "softsw: `argmax` is not the forward's output for these `scores`");
  STD_TORCH_CHECK(total.scalar_type() == acc && total.dim() == 2 &&
                      total.size(0) == p.batch && total.size(1) == 2 && total.is_contiguous(),
                  "softsw: `total` is not the forward's output for these `scores`");
  check_same_device(hidden, scores, "hidden");
  check_same_device(argmax, scores, "argmax");
  check_same_device(total, scores, "total");
  ForwardState s;
  s.hidden = hidden.data_ptr();
  s.argmax = static_cast<const int64_t*>(argmax.data_ptr());
  s.total = total.data_ptr();
  return s;
}

// Read in place through its stride: the ones autograd hands the backward of
// a sum are one value expanded (stride 0), and a copy would be a kernel
// launch on every training step.
Tensor checked_grad_score(const Tensor& t, const Problem& p, const Tensor& scores) {
  STD_TORCH_CHECK(t.dim() == 1 && t.size(0) == p.batch &&
                      t.scalar_type() == scores.scalar_type(),
                  "softsw: `grad_score` must have shape (B,) and the dtype of `scores`");
  check_same_device(t, scores, "grad_score");
  return t;
}

Tensor checked_like_scores(const Tensor& t, const Problem& p, const Tensor& scores,
                           const char* what) {
  STD_TORCH_CHECK(t.dim() == 3 && t.size(0) == p.batch && t.size(1) == p.rows &&
                      t.size(2) == p.cols && t.scalar_type() == scores.scalar_type(),
                  "softsw: `", what, "` must have the shape and dtype of `scores`");
  check_same_device(t, scores, what);
  return as_contiguous(t);
}

Tensor empty_unless(bool wanted, const Tensor& scores, const Problem& p) {
  return new_tensor(scores, wanted ? std::vector<int64_t>{p.batch, p.rows, p.cols}
                                   : std::vector<int64_t>{0},
                    scores.scalar_type());
}

std::tuple<Tensor, Tensor, Tensor> backward(
    Tensor grad_score, Tensor scores, OptTensor gap_open, OptTensor gap_extend,
    double gap_open_value, double gap_extend_value, bool affine, double temperature,
    OptTensor lengths, int64_t reduction, Tensor hidden, Tensor argmax, Tensor total) {
  check_device_supported(scores);
  ProblemArgs args = make_problem(scores, gap_open, gap_extend, gap_open_value,
                                  gap_extend_value, affine, temperature, lengths, reduction);
  const Problem& p = args.problem;
  Tensor grad = checked_grad_score(grad_score, p, scores);

  Tensor grad_scores = new_tensor(scores, {p.batch, p.rows, p.cols}, scores.scalar_type());
  Tensor grad_open = empty_unless(gap_open.has_value(), scores, p);
  Tensor grad_extend = empty_unless(affine && gap_extend.has_value(), scores, p);

  BackwardArgs b;
  b.grad_score = grad.data_ptr();
  b.grad_score_stride = grad.stride(0);
  b.state = state_of(p, scores, hidden, argmax, total);
  b.grad_scores = grad_scores.data_ptr();
  b.grad_gap_open = gap_open.has_value() ? grad_open.data_ptr() : nullptr;
  b.grad_gap_extend = affine && gap_extend.has_value() ? grad_extend.data_ptr() : nullptr;
#ifdef SOFTSW_WITH_CUDA
  if (scores.is_cuda()) {
    torch::stable::accelerator::DeviceGuard guard(scores.get_device_index());
    std::optional<Tensor> workspace;
    backward_cuda(p, b, cuda_workspace(cuda_workspace_bytes(p), scores, workspace), current_stream(scores));
    return {grad_scores, grad_open, grad_extend};
  }
#endif
  backward_cpu(p, b);
  return {grad_scores, grad_open, grad_extend};
}

std::tuple<Tensor, Tensor, Tensor, Tensor> double_backward(
    OptTensor dir_scores, OptTensor dir_gap_open, OptTensor dir_gap_extend, Tensor grad_score,
    Tensor scores, OptTensor gap_open, OptTensor gap_extend, double gap_open_value,
    double gap_extend_value, bool affine, double temperature, OptTensor lengths,
    int64_t reduction, Tensor hidden, Tensor argmax, Tensor total) {
  check_device_supported(scores);
  ProblemArgs args = make_problem(scores, gap_open, gap_extend, gap_open_value,
                                  gap_extend_value, affine, temperature, lengths, reduction);
  const Problem& p = args.problem;
  Tensor grad = checked_grad_score(grad_score, p, scores);
  std::optional<Tensor> w_s, w_o, w_e;
  if (dir_scores) w_s = checked_like_scores(*dir_scores, p, scores, "grad_grad_scores");
  if (dir_gap_open) w_o = checked_like_scores(*dir_gap_open, p, scores, "grad_grad_gap_open");
  if (dir_gap_extend)
    w_e = checked_like_scores(*dir_gap_extend, p, scores, "grad_grad_gap_extend");

  Tensor grad_grad_score = new_tensor(scores, {p.batch}, scores.scalar_type());
  Tensor hvp_scores = new_tensor(scores, {p.batch, p.rows, p.cols}, scores.scalar_type());
  Tensor hvp_open = empty_unless(gap_open.has_value(), scores, p);
  Tensor hvp_extend = empty_unless(affine && gap_extend.has_value(), scores, p);

  DoubleBackwardArgs d;
  d.grad_score = grad.data_ptr();
  d.grad_score_stride = grad.stride(0);
  d.dir_scores = w_s ? w_s->data_ptr() : nullptr;
  d.dir_gap_open = w_o ? w_o->data_ptr() : nullptr;
  d.dir_gap_extend = w_e ? w_e->data_ptr() : nullptr;
  d.state = state_of(p, scores, hidden, argmax, total);
  d.grad_grad_score = grad_grad_score.data_ptr();
  d.hvp_scores = hvp_scores.data_ptr();
  d.hvp_gap_open = gap_open.has_value() ? hvp_open.data_ptr() : nullptr;
  d.hvp_gap_extend = affine && gap_extend.has_value() ? hvp_extend.data_ptr() : nullptr;
#ifdef SOFTSW_WITH_CUDA
  if (scores.is_cuda()) {
    torch::stable::accelerator::DeviceGuard guard(scores.get_device_index());
    std::optional<Tensor> workspace;
    double_backward_cuda(p, d, cuda_workspace(cuda_double_backward_workspace_bytes(p), scores, workspace), current_stream(scores));
    return {grad_grad_score, hvp_scores, hvp_open, hvp_extend};
  }
#endif
  double_backward_cpu(p, d);
  return {grad_grad_score, hvp_scores, hvp_open, hvp_extend};
}

}  // namespace
}  // namespace softsw

// The shared arguments, in order, of forward, backward and double_backward.
#define SOFTSW_PROBLEM_ARGS                                                        \
  "Tensor scores, Tensor? gap_open, Tensor? gap_extend, float gap_open_value, "    \
  "float gap_extend_value, bool affine, float temperature, Tensor? lengths, "      \
  "int reduction"

STABLE_TORCH_LIBRARY(softsw, m) {
  // User-facing: float gap scores, returns the (B,) or 0-d score. Its body is
  // CompositeImplicitAutograd (Python), over `forward`.
  m.def("align(Tensor scores, float gap_open=-1.0, float temperature=1.0, "
        "Tensor? lengths=None, str reduction=\"max\", float? gap_extend=None) -> Tensor");
  // Building blocks. gap_* tensors, when given, are expanded to (B, M, N) and
  // win over the *_value floats; `hidden`, `argmax`, `total` are the forward's
  // saved state for the backward passes.
  m.def("forward(" SOFTSW_PROBLEM_ARGS ", bool keep_hidden) -> "
        "(Tensor score, Tensor hidden, Tensor argmax, Tensor total)");
  m.def("backward(Tensor grad_score, " SOFTSW_PROBLEM_ARGS
        ", Tensor hidden, Tensor argmax, Tensor total) -> "
        "(Tensor grad_scores, Tensor grad_gap_open, Tensor grad_gap_extend)");
  m.def("double_backward(Tensor? grad_grad_scores, Tensor? grad_grad_gap_open, "
        "Tensor? grad_grad_gap_extend, Tensor grad_score, " SOFTSW_PROBLEM_ARGS
        ", Tensor hidden, Tensor argmax, Tensor total) -> "
        "(Tensor grad_grad_score, Tensor grad_scores, Tensor grad_gap_open, "
        "Tensor grad_gap_extend)");
}

STABLE_TORCH_LIBRARY_IMPL(softsw, CPU, m) {
  m.impl("forward", TORCH_BOX(&softsw::forward));
  m.impl("backward", TORCH_BOX(&softsw::backward));
  m.impl("double_backward", TORCH_BOX(&softsw::double_backward));
}

#ifdef SOFTSW_WITH_CUDA
STABLE_TORCH_LIBRARY_IMPL(softsw, CUDA, m) {
  m.impl("forward", TORCH_BOX(&softsw::forward));
  m.impl("backward", TORCH_BOX(&softsw::backward));
  m.impl("double_backward", TORCH_BOX(&softsw::double_backward));
}
#endif

// `import softsw._C` loads the library (and runs the registrations above);
// the module itself is empty, which keeps it within the limited (abi3) API.
PyMODINIT_FUNC PyInit__C(void) {
  static PyModuleDef module = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr,
                               nullptr, nullptr, nullptr, nullptr};
  return PyModule_Create(&module);
}
