// The CPU backend of softsw: forward, backward and the
// Hessian-vector product (double backward) of the soft (T > 0) and hard
// (T = 0) Smith-Waterman recurrence, linear and affine gaps, every dtype.
// Torch-free C++20; parallel over the batch with std::thread.
//
// Units. Soft mode runs in base-2 units pre-scaled by beta = 1 / (T ln 2)
// (recurrence.h): `hidden` and `total` hold values in those units. Adjoints E
// are unit-free; tangents (docs/math.md's Hdot) are kept in the caller's units, so
// the tangent of a weight is p * (vdot - hdot) / T. Hard mode is max-plus in
// the caller's units (beta = 1). A temperature so small that 1 / (T ln 2)
// overflows the accumulate type runs as hard (precisely: when 2^20 / (T ln 2)
// does, T <~ 1e-32 in float, 1e-302 in double, so that alignment scores up to
// ~1e6 stay finite in kernel units; below such T softmax_T is max to rounding).
//
// Weights. The backward passes normalise every soft node's weights (and the
// "soft" reduction's seeds) to sum to 1. With exact arithmetic they already
// do; as T -> 0 the stored values, ~score / T in kernel units, lose the
// log2(1 + ...) term to rounding, and unnormalised weights would then count
// tied paths twice (expected-alignment entries of 2). Normalised, the reverse
// pass is a Markov chain and the expected alignment a sub-probability.
//
// Hidden layout (accumulate type, padded extents M, N):
//   linear: H[b][i-1][j-1]                                      B*M*N
//   affine: [b][plane][i-1][j-1], plane 0 = C, 1 = U, 2 = L      3*B*M*N
// Cells outside a pair's (m, n) hold 0. An affine pair that the SIMD
// probability-domain forward ran with a float accumulator (T > 0, inside the
// range rule; float64 pairs keep the planes) keeps checkpoints in its slice
// instead (checkpoints.h): its backward
// and double backward run the forward again from them; a lone long pair that
// the forward ran on column blocks also keeps the wavefront's own checkpoints
// there (affine_long_pair.h), from which its backward runs on column blocks
// again. The backward passes recompute
// D = C[i-1,j-1] + S, A = softmax_T(0, D, L) (the C' that U[i+1,j] opens from)
// and B = softmax_T(0, D, U) (the C' that L[i,j+1] opens from) from C, U, L,
// with the same arithmetic as the forward, so hard-mode ties are bit-exact.
//
// Hard-mode (T = 0) ties: one-hot on the first maximal candidate of a node,
//   linear cell, and the C node: start, match (D), gap down (U), gap right (L)
//   A = softmax(0, D, L): start, D, L;   B = softmax(0, D, U): start, D, U
//   U and L: open before extend.
// The gradient of T = 0 is therefore the traceback of one optimal path.
//
// Reductions. "max": the score is the largest cell (boundary zeros
// included); the adjoint is seeded at the argmax cell (first in row-major
// order), nothing when the max is a boundary 0. "soft" with T = 0 equals
// "max": the forward still reports argmax = -1 (problem.h), and the backward
// passes find the argmax again in `hidden`. Since an adjoint only flows up and
// left, a "max" backward only visits the rectangle above-left of the argmax.
//
// Bad or special input. A pair whose lengths are outside [0, M] x [0, N] gets
// a NaN score and total, argmax -1, hidden 0 and NaN in every gradient entry
// of that pair; nothing outside the arrays is read. NaN in a pair's scores
// makes its score NaN ("max": the first NaN cell is the argmax) and never
// touches another pair. An empty pair scores 0 with zero gradients.
//
// Speed. Pairs are spread over std::threads (as many as the CPUs this
// process may run on; SOFTSW_NUM_THREADS=k overrides), and with a float
// accumulator (float32, float16, bfloat16) over SIMD lanes, 16 pairs to a
// group (SOFTSW_CPU_ISA caps the instruction set; "scalar" turns the SIMD
// passes off):
//   forward, T > 0, a pair inside the range rule of probability.h (linear
//     or affine gaps, constant or per-cell): the probability domain
//     (forward_probability.h; a lone long pair on column blocks: linear gaps
//     with a constant gap there, affine gaps in affine_long_pair.h when its
//     training state fits in its slice); float64 pairs too (the double range
//     rule, double lanes; a training forward keeps H or the C, U, L planes;
//     a lone long affine pair runs in a group);
//   forward, linear gaps, any other pair, and affine gaps at T = 0: the log
//     domain (forward_simd.h);
//   backward, linear gaps, T > 0: reverse_simd.h (a lone long pair: its
//     region's column blocks on the lanes); float64 too, double lanes (a
//     lone short float64 pair: a group of one);
//   backward, affine gaps, T > 0, a pair inside the range rule (constant or
//     per-cell gaps): the shares of the forward run again from its
//     checkpoints (reverse_affine_simd.h; a lone long pair whose forward ran
//     on column blocks: on them again, affine_long_pair.h); float64 pairs
//     inside the double range rule too, their shares from the C, U, L planes;
//   double backward, linear gaps, T > 0: double_backward_simd.h; float64
//     too, double lanes;
//   double backward, affine gaps, T > 0, a pair inside the range rule:
//     affine_double_backward_simd.h, on the same shares; float64 too, double
//     lanes (a lone pair: a group of one).
// A group of at most W / 2 pairs runs narrow rows (half the lanes) where a
// pass has them (the probability-domain rows, the affine reverse and double
// backward rows). Every other pass (float64 outside the probability-domain
// forward, the backward and the double backward above, T = 0 backward, the
// affine backward and double backward outside the range rule, and the affine
// forward at T > 0 outside the range rule) is the scalar cell loop of
// forward.h and reverse.h; so is a linear pair alone in its group of the
// double backward, or of the backward when it is short. The soft passes
// run with subnormal numbers flushed to zero (float_mode.h). The scalar reverse and tangent passes
// of a float pair at T > 0 take their weights, a row at a time, with SIMD
// along the row: row_weights.h (linear gaps), affine_row_weights.h (affine
// gaps, a pair inside the range rule).
//
// Files: element.h (dtypes and conversions), thread_pool.h, cell.h (the cells
// of recurrence.h on the CPU's exp2), simd.h (vector arithmetic, run-time ISA
// choice, rows to and from the lanes), forward.h / forward_simd.h /
// forward_probability.h / checkpoints.h / reverse.h / reverse_simd.h /
// reverse_affine_simd.h / affine_long_pair.h / double_backward_simd.h /
// affine_double_backward_simd.h / row_weights.h / affine_row_weights.h (the
// passes), tangent_store.h, float_mode.h, and the
// drivers forward.cpp and backward.cpp (the entry points of problem.h). This
// header: the set-up every pass shares.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <vector>

#include "../problem.h"
#include "../recurrence.h"
#include "element.h"

namespace softsw::cpu {

template <typename T>
struct GapView {
  using A = Acc<T>;
  const T* data = nullptr;  // the pair's slice, or nullptr: `value`
  int64_t si = 0, sj = 0;
  A value = 0, beta = 1;
  A at(int64_t i, int64_t j) const {  // gap move ending at DP cell (i, j), 1-based
    return data ? ld(data, (i - 1) * si + (j - 1) * sj) * beta : value;
  }
  // Row i's entries (col j at [j - 1], before the scaling by beta) when
  // they are contiguous, else nullptr.
  const T* row(int64_t i) const { return data && sj == 1 ? data + (i - 1) * si : nullptr; }
};

template <typename T>
struct PairView {
  using A = Acc<T>;
  int64_t N = 0;  // row stride of every (M, N) array
  const T* S = nullptr;
  A beta = 1;
  GapView<T> open, ext;
  A s(int64_t i, int64_t j) const { return ld(S, (i - 1) * N + (j - 1)) * beta; }
};

// A direction (double backward): the pair's (M, N) slice, nullptr = zero.
template <typename T>
inline Acc<T> dir_at(const T* d, int64_t N, int64_t i, int64_t j) {
  return d ? ld(d, (i - 1) * N + (j - 1)) : Acc<T>(0);
}

template <typename T>
struct Setup {
  using A = Acc<T>;
  const Problem& p;
  int64_t M, N, MN, planes;
  bool hard;
  bool soft_reduction;  // reduction "soft" with T > 0 (T = 0 soft is max)
  A beta;               // caller units -> kernel units
  A unit;               // kernel units -> caller units
  A inv_t;              // 1 / T for tangents (0 when hard)

  explicit Setup(const Problem& pr)
      : p(pr), M(pr.rows), N(pr.cols), MN(pr.rows * pr.cols), planes(pr.affine ? 3 : 1) {
    const double t = pr.temperature;
    const A b = static_cast<A>(1.0 / (t * kLn2));
    const A it = static_cast<A>(1.0 / t);
    // Tiny T runs as hard: kernel units must hold scores up to ~2^20 (float:
    // T >~ 1e-32, double: T >~ 1e-302); below, softmax_T equals max to rounding.
    hard = !(t > 0.0) || !std::isfinite(b * A(1 << 20)) || !std::isfinite(it);
    beta = hard ? A(1) : b;
    unit = hard ? A(1) : static_cast<A>(t * kLn2);
    inv_t = hard ? A(0) : it;
    soft_reduction = !hard && pr.reduction == Reduction::Soft;
  }

  // The pair's true extents; false when they are out of range.
  bool extents(int64_t b, int64_t& m, int64_t& n) const {
    if (p.lengths == nullptr) {
      m = M;
      n = N;
      return true;
    }
    m = p.lengths[2 * b];
    n = p.lengths[2 * b + 1];
    return m >= 0 && m <= M && n >= 0 && n <= N;
  }

  GapView<T> gap(const GapScores& g, int64_t b) const {
    GapView<T> v;
    v.beta = beta;
    if (g.data) {
      v.data = static_cast<const T*>(g.data) + b * g.stride[0];
      v.si = g.stride[1];
      v.sj = g.stride[2];
    } else {
      v.value = static_cast<A>(g.value) * beta;
    }
    return v;
  }

  PairView<T> pair(int64_t b) const {
    PairView<T> v;
    v.N = N;
    v.S = static_cast<const T*>(p.scores) + b * MN;
    v.beta = beta;
    v.open = gap(p.gap_open, b);
    v.ext = p.affine ? gap(p.gap_extend, b) : v.open;
    return v;
  }
};

template <typename A>
struct PairResult {
  A total = 0;
  int64_t argmax = -1;
};

// A growable array that keeps its memory from one pair to the next.
template <typename A>
class Buffer {
 public:
  A* get(int64_t n) {
    if (static_cast<int64_t>(v_.size()) < n) v_.resize(static_cast<size_t>(n));
    return v_.data();
  }

 private:
  std::vector<A> v_;
};

// The same, uninitialised: for memory whose every entry is written before it
// is read (no pass over it to zero it first).
template <typename A>
class RawBuffer {
 public:
  A* get(int64_t n) {
    if (size_ < n) {
      v_.reset(new A[static_cast<size_t>(n)]);
      size_ = n;
    }
    return v_.get();
  }

 private:
  std::unique_ptr<A[]> v_;
  int64_t size_ = 0;
};

// Messages of a reverse pass between rows: `in` into row i from row i+1,
// `out` from row i into row i-1 (swapped after every row).
template <typename A>
struct MessageRows {
  Buffer<A> in, out;
};

// A worker thread's scratch, one buffer per role.
template <typename A>
struct Scratch {
  // Forward: the previous and the current row of H (linear) or C (affine),
  // and of the affine A and U.
  Buffer<A> c_prev, c_cur, a_prev, a_cur, u_prev, u_cur;
  // Reverse: messages to C (linear: H) from the diagonal and right
  // neighbours, to A and to U (affine) from U below; and their tangents.
  MessageRows<A> to_c, to_a, to_u, to_c_dot, to_a_dot, to_u_dot;
  // Affine tangent and reverse passes: D, A, B recomputed for the current row
  // and the row above.
  Buffer<A> d_cur, ap_cur, bp_cur, d_up, ap_up, bp_up;
  // Double backward: the tangents of the region (linear: Hdot; affine: the
  // five node tangents); the SIMD affine group's (tangent_store.h).
  Buffer<A> tangents;
  RawBuffer<A> tangent_rows;
  // Scalar reverse and tangent passes (float): one row's H, the row above,
  // its scores and gap scores, and its weights and seeds (row_weights.h).
  Buffer<A> row_h, row_h_up, row_s, row_g, row_p1, row_p2, row_p3, row_e0;
  // The same for affine gaps (affine_row_weights.h): inputs, shares, weights.
  Buffer<A> affine_rows;
  // SIMD passes: a group's lane-interleaved rows (float lanes; the float64
  // passes' in double_lanes).
  std::vector<float> lanes;
  std::vector<double> double_lanes;
};

// The lane-interleaved rows of a worker's SIMD groups of accumulate type A.
template <typename A>
std::vector<A>& group_rows(Scratch<A>& sc) {
  if constexpr (std::is_same_v<A, float>) return sc.lanes;
  else return sc.double_lanes;
}

}  // namespace softsw::cpu
