// The contract between the op layer (csrc/bindings.cpp) and the kernels.
//
// Nothing here knows about torch: the bindings validate arguments, allocate
// every output through torch's allocator and fill these plain structs; the
// kernels only read and write the memory they are given.
#pragma once

#include <cstdint>

namespace softsw {

enum class Reduction : int64_t { Max = 0, Soft = 1 };

// Element type of `scores`, of gap tensors, of `score` and of every gradient
// that has the shape of an input. Half types accumulate in float32.
enum class Dtype : int { Float16 = 0, BFloat16 = 1, Float32 = 2, Float64 = 3 };

inline bool accumulates_in_double(Dtype d) { return d == Dtype::Float64; }

// Bytes of one element of a tensor of dtype d.
inline int64_t element_bytes(Dtype d) {
  return d == Dtype::Float64 ? 8 : d == Dtype::Float32 ? 4 : 2;
}

// A gap score: a constant (`data == nullptr`) or a tensor of `Dtype` read as
// (B, M, N) through `stride` (0 along broadcast dimensions). The entry at
// [b, i-1, j-1] scores a gap move that ends at DP cell (i, j).
struct GapScores {
  const void* data = nullptr;
  int64_t stride[3] = {0, 0, 0};
  double value = -1.0;
};

struct Problem {
  int64_t batch = 0, rows = 0, cols = 0;  // B, M, N: padded extents
  Dtype dtype = Dtype::Float32;
  const void* scores = nullptr;     // (B, M, N), contiguous
  const int64_t* lengths = nullptr; // (B, 2) contiguous [m_b, n_b]; nullptr: all (M, N)
  GapScores gap_open;
  GapScores gap_extend;             // read only when `affine`
  bool affine = false;
  double temperature = 1.0;         // 0: hard (max-plus) Smith-Waterman
  Reduction reduction = Reduction::Max;
  // False for a forward whose per-cell state nobody reads (inference): the
  // kernels may then pick a work split that need not match the backward's.
  bool keeps_state = true;
  // CPU: the most threads the kernels may use (the op layer passes
  // torch.get_num_threads()); 0: every CPU this process may run on.
  int cpu_threads = 0;

  // A gap score read per cell from a tensor (the open, or with affine gaps
  // the extend); false when every gap is a constant.
  bool has_gap_tensor() const { return gap_open.data || (affine && gap_extend.data); }
};

// What the forward writes. `hidden` is what the backward passes read back:
// an opaque buffer of accumulate-type elements whose layout belongs to the
// backend that wrote it (hidden_elements() of them); nullptr when the caller
// does not need gradients.
struct ForwardOutputs {
  void* score = nullptr;      // (B,) of Dtype
  void* hidden = nullptr;     // see hidden_elements()
  int64_t* argmax = nullptr;  // (B,): first maximal interior cell (i-1)*N + (j-1)
                              // in row-major order, -1 when the max is a boundary 0
                              // (or the pair is empty, or reduction is Soft at T > 0;
                              // at T = 0 "soft" is the max and a backend may keep it).
                              // Only the backward reads it: a forward that keeps no
                              // state (keeps_state false) may leave -1 at T > 0
  void* total = nullptr;      // (B, 2) accumulate type: the score in the kernel's
                              // internal units (soft: divided by T ln 2) as
                              // PairTotal (recurrence.h) lays it out
};

// Number of accumulate-type elements of `hidden` for one problem: room for
// every cell's nodes. A backend may keep less and leave the rest unwritten
// (the CPU's affine pairs in the probability domain keep a few rows,
// cpu/checkpoints.h), so the buffer's pages need not all be touched.
inline int64_t hidden_elements(int64_t batch, int64_t rows, int64_t cols, bool affine) {
  return (affine ? 3 : 1) * batch * rows * cols;
}

// What the backward reads besides the problem: the forward's outputs.
struct ForwardState {
  const void* hidden = nullptr;
  const int64_t* argmax = nullptr;
  const void* total = nullptr;
};

struct BackwardArgs {
  const void* grad_score = nullptr;  // (B,) of Dtype: d loss / d score
  int64_t grad_score_stride = 1;     // elements between two pairs' grad_score (0: one
                                     // value for all, as autograd's expanded ones of a sum)
  ForwardState state;
  void* grad_scores = nullptr;       // (B, M, N) of Dtype, every element written
  void* grad_gap_open = nullptr;     // (B, M, N) of Dtype, or nullptr when not wanted
  void* grad_gap_extend = nullptr;   // (B, M, N) of Dtype, or nullptr when not wanted
};

// Double backward. The backward computed G = grad_score * A with
// A = d score / d (scores, gaps); given a direction W on G (the cotangents of
// the backward's outputs), write
//   grad_grad_score = <W, A>                     per pair
//   hvp_*           = grad_score * (Hessian of score) . W
// docs/math.md: a tangent forward pass, then one reverse pass that carries the
// adjoint and its tangent together.
struct DoubleBackwardArgs {
  const void* grad_score = nullptr;      // (B,) of Dtype
  int64_t grad_score_stride = 1;         // as BackwardArgs has it
  const void* dir_scores = nullptr;      // (B, M, N) of Dtype, contiguous, or nullptr (zero)
  const void* dir_gap_open = nullptr;    // (B, M, N) of Dtype, contiguous, or nullptr (zero)
  const void* dir_gap_extend = nullptr;  // likewise
  ForwardState state;
  void* grad_grad_score = nullptr;       // (B,) of Dtype
  void* hvp_scores = nullptr;            // (B, M, N) of Dtype
  void* hvp_gap_open = nullptr;          // (B, M, N) of Dtype, or nullptr when not wanted
  void* hvp_gap_extend = nullptr;        // likewise
};

// Backends. Each entry point covers every dtype, both reductions, T = 0 and
// T > 0. The CUDA ones enqueue on `stream` (a cudaStream_t) and never
// synchronise the host.
void forward_cpu(const Problem& problem, const ForwardOutputs& out);
void backward_cpu(const Problem& problem, const BackwardArgs& args);
void double_backward_cpu(const Problem& problem, const DoubleBackwardArgs& args);

#ifdef SOFTSW_WITH_CUDA
// The CUDA passes hand band boundaries between warps through a scratch
// workspace (boundary rows, progress flags, partial reductions) that the
// caller allocates with torch (uninitialised, `cuda_workspace_bytes` of it,
// 16-byte aligned) and passes to every pass; the launchers clear what needs
// clearing on `stream`.
int64_t cuda_workspace_bytes(const Problem& problem);
// double_backward_cuda needs more: the tangent state and a second edge buffer.
int64_t cuda_double_backward_workspace_bytes(const Problem& problem);
void forward_cuda(const Problem& problem, const ForwardOutputs& out, void* workspace,
                  void* stream);
void backward_cuda(const Problem& problem, const BackwardArgs& args, void* workspace,
                   void* stream);
void double_backward_cuda(const Problem& problem, const DoubleBackwardArgs& args,
                          void* workspace, void* stream);
#endif

}  // namespace softsw
