// The SIMD double backward of linear gaps (soft), templated on the
// accumulate type A (float: float32, float16, bfloat16; double: float64, as
// the SIMD backward, reverse_simd.h): the
// tangent forward and the reverse pass that carries the adjoint E and its
// tangent Edot (tangent_linear and reverse_linear<TAN> of reverse.h), one SIMD
// lane per pair, groups of W = 16 pairs as in the SIMD backward
// (reverse_simd.h), with its lanes, its row layout and the weights of
// recurrence.h's LinearCell on vector lanes.
//
// The tangent pass runs from the first row down and keeps every row of Hdot
// for the reverse pass, each pair's rows in their own (mr, nr) block: a
// group's memory is its pairs' cells, not W times its largest pair's. A lane
// only counts the cells of its own region (rows 1..mr, cols 1..nr): outside
// it Hdot, the weights and the seeds are zero, and the directions are never
// gathered (their rows stay 0), so nothing flows out of the region.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "cell.h"
#include "reverse_simd.h"
#include "setup.h"
#include "simd.h"

#if SOFTSW_CPU_VECTOR
namespace softsw::cpu::simd {

// Lane-interleaved rows of a group (col j at j * W, col 0 the boundary): H,
// scores and gap scores as in ReverseRowsOf; the directions of row i (caller
// units) at (j - 1) * W; Hdot of row i and of row i - 1 at j * W.
template <typename A>
struct TangentRowsOf {
  const A* h;
  const A* h_up;
  const A* s;
  const A* g;
  const A* dir_s;
  const A* dir_g;
  const A* hdot_up;
  A* hdot;   // tangent pass: written; reverse pass: read
  A* sdot;   // tangent pass, soft: W per-lane sums of e0 * Hdot, accumulated
};

// The reverse pass's messages (as ReverseRowsOf) and their tangents, and the
// row's Hessian-vector products at (j - 1) * W.
template <typename A>
struct TangentMessagesOf {
  const A* in;
  const A* in_dot;
  A* out;
  A* out_dot;
  A* hvp_s;
  A* hvp_g;  // nullptr when not wanted
};

template <typename A, int VL>
struct TangentCell {
  using X = Vec<A, VL>;
  using F = typename X::F;
  using I = typename X::I;
  F p1, p2, p3;  // the cell's weights, 0 outside the lane's region
  I active;
};

// The weights of cell (i, j) of the k-th vector of lanes, as the backward's.
template <typename A, int VL>
SOFTSW_VINLINE TangentCell<A, VL> tangent_cell(const TangentRowsOf<A>& r, int64_t c,
                                               typename Vec<A, VL>::I active) {
  using X = Vec<A, VL>;
  using Cell = LinearCell<Packed<A, VL>, false, PackedMath<A, VL>>;
  const int64_t c1 = c - W;
  const auto h = X::load(r.h + c), g = X::load(r.g + c1);
  const Weights<Packed<A, VL>> w = Cell::normalized_weights(
      h, X::load(r.h_up + c1) + X::load(r.s + c1), X::load(r.h_up + c) + g, X::load(r.h + c1) + g);
  const auto zero = X::splat(A(0));
  return {X::sel(active, w.p1.v, zero), X::sel(active, w.p2.v, zero), X::sel(active, w.p3.v, zero),
          active};
}

// Hdot of row i: Hdot = p1 (Hdot[i-1, j-1] + W_S) + p2 (Hdot[i-1, j] + W_g)
// + p3 (Hdot[i, j-1] + W_g); with SOFT the seeds' tangent sum too.
template <typename A, int VL, bool SOFT>
SOFTSW_VINLINE void tangent_row_body(const TangentRowsOf<A>& rows, int32_t n, int32_t i,
                                     const ReverseLanesOf<A>& ln) {
  const TangentRowsOf<A> r = rows;  // a local copy, as reverse_row_body's
  using X = Vec<A, VL>;
  using F = typename X::F;
  using I = typename X::I;
  constexpr int K = W / VL;
  const I iv = X::splati(i);
  const F zero = X::splat(A(0));
  I rowok[K], nr[K];
  F left[K], total[K], scale[K], sdot[K];
  for (int k = 0; k < K; ++k) {
    rowok[k] = iv <= X::loadi(ln.mr + k * VL);
    nr[k] = X::loadi(ln.nr + k * VL);
    left[k] = zero;
    total[k] = X::load(ln.total + k * VL);
    scale[k] = X::load(ln.scale + k * VL);
    sdot[k] = X::load(r.sdot + k * VL);
  }
  for (int32_t j = 1; j <= n; ++j) {
    const I jv = X::splati(j);
    for (int k = 0; k < K; ++k) {
      const int64_t c = int64_t(j) * W + k * VL, c1 = c - W;
      const TangentCell<A, VL> w = tangent_cell<A, VL>(r, c, rowok[k] & (jv <= nr[k]));
      const F wg = X::load(r.dir_g + c1);
      const F hd = X::sel(w.active,
                          w.p1 * (X::load(r.hdot_up + c1) + X::load(r.dir_s + c1)) +
                              w.p2 * (X::load(r.hdot_up + c) + wg) + w.p3 * (left[k] + wg),
                          zero);
      X::store(r.hdot + c, hd);
      left[k] = hd;
      if constexpr (SOFT)
        sdot[k] += X::sel(w.active, X::exp2(X::load(r.h + c) - total[k]) * scale[k], zero) * hd;
    }
  }
  for (int k = 0; k < K; ++k) X::store(r.sdot + k * VL, sdot[k]);
}

// Row i of the reverse pass: E and Edot (reverse_linear<TAN> of reverse.h),
// the messages to row i - 1 and the row's Hessian-vector products.
template <typename A, int VL, bool SOFT>
SOFTSW_VINLINE void reverse_tangent_row_body(const TangentRowsOf<A>& rows,
                                             const TangentMessagesOf<A>& messages, int32_t n,
                                             int32_t i, const ReverseLanesOf<A>& ln,
                                             const A* sdot_lanes, A inv_t) {
  const TangentRowsOf<A> r = rows;  // local copies, as reverse_row_body's
  const TangentMessagesOf<A> msg = messages;
  using X = Vec<A, VL>;
  using F = typename X::F;
  using I = typename X::I;
  constexpr int K = W / VL;
  const I iv = X::splati(i);
  const F zero = X::splat(A(0)), it = X::splat(inv_t);
  I rowok[K], corner_row[K], nr[K];
  F right[K], pend[K], right_dot[K], pend_dot[K], total[K], scale[K], gs[K], sdot[K];
  for (int k = 0; k < K; ++k) {
    const I mr = X::loadi(ln.mr + k * VL);
    rowok[k] = iv <= mr;
    corner_row[k] = iv == mr;
    nr[k] = X::loadi(ln.nr + k * VL);
    right[k] = pend[k] = right_dot[k] = pend_dot[k] = zero;
    total[k] = X::load(ln.total + k * VL);
    scale[k] = X::load(ln.scale + k * VL);
    gs[k] = X::load(ln.grad + k * VL);
    sdot[k] = X::load(sdot_lanes + k * VL);
  }
  for (int32_t j = n; j >= 1; --j) {
    const I jv = X::splati(j);
    for (int k = 0; k < K; ++k) {
      const int64_t c = int64_t(j) * W + k * VL, c1 = c - W;
      const TangentCell<A, VL> w = tangent_cell<A, VL>(r, c, rowok[k] & (jv <= nr[k]));
      F e0;
      if constexpr (SOFT)
        e0 = X::sel(w.active, X::exp2(X::load(r.h + c) - total[k]) * scale[k], zero);
      else
        e0 = X::sel(corner_row[k] & (jv == nr[k]), X::splat(A(1)), zero);
      const F E = e0 + X::load(msg.in + c) + right[k];
      const F hd = X::load(r.hdot + c), wg = X::load(r.dir_g + c1);
      const F d1 = w.p1 * (X::load(r.hdot_up + c1) + X::load(r.dir_s + c1) - hd) * it;
      const F d2 = w.p2 * (X::load(r.hdot_up + c) + wg - hd) * it;
      const F d3 = w.p3 * (X::load(r.hdot + c1) + wg - hd) * it;
      F e0_dot = zero;
      if constexpr (SOFT) e0_dot = e0 * (hd - sdot[k]) * it;
      const F Ed = e0_dot + X::load(msg.in_dot + c) + right_dot[k];
      const F md1 = Ed * w.p1 + E * d1, md2 = Ed * w.p2 + E * d2, md3 = Ed * w.p3 + E * d3;
      X::store(msg.hvp_s + c1, gs[k] * md1);
      if (msg.hvp_g) X::store(msg.hvp_g + c1, gs[k] * (md2 + md3));
      X::store(msg.out + c, pend[k] + E * w.p2);
      X::store(msg.out_dot + c, pend_dot[k] + md2);
      pend[k] = E * w.p1;
      right[k] = E * w.p3;
      pend_dot[k] = md1;
      right_dot[k] = md3;
    }
  }
  for (int k = 0; k < K; ++k) {
    X::store(msg.out + k * VL, pend[k]);
    X::store(msg.out_dot + k * VL, pend_dot[k]);
  }
}

// The two row kernels of one instruction set and reduction.
template <typename A>
struct TangentRowFnsOf {
  void (*tangent)(const TangentRowsOf<A>&, int32_t, int32_t, const ReverseLanesOf<A>&);
  void (*reverse)(const TangentRowsOf<A>&, const TangentMessagesOf<A>&, int32_t, int32_t,
                  const ReverseLanesOf<A>&, const A*, A);
};

// The row kernels of VBYTES-byte vectors (16: the baseline, 32: AVX2 and
// AVX-512VL): 4 or 8 floats, 2 or 4 doubles to a vector.
#define SOFTSW_TANGENT_ROWS(NAME, TARGET, VBYTES)                                                \
  template <typename A, bool SOFT>                                                               \
  struct NAME {                                                                                  \
    static constexpr int VL = VBYTES / static_cast<int>(sizeof(A));                             \
    TARGET static void tangent(const TangentRowsOf<A>& r, int32_t n, int32_t i,                  \
                               const ReverseLanesOf<A>& ln) {                                    \
      tangent_row_body<A, VL, SOFT>(r, n, i, ln);                                                \
    }                                                                                            \
    TARGET static void reverse(const TangentRowsOf<A>& r, const TangentMessagesOf<A>& m,         \
                               int32_t n, int32_t i, const ReverseLanesOf<A>& ln, const A* sdot, \
                               A inv_t) {                                                        \
      reverse_tangent_row_body<A, VL, SOFT>(r, m, n, i, ln, sdot, inv_t);                        \
    }                                                                                            \
    static TangentRowFnsOf<A> fns() { return {&tangent, &reverse}; }                             \
  };
SOFTSW_TANGENT_ROWS(TangentRowsBaseline, , 16)
#if defined(__x86_64__)
SOFTSW_TANGENT_ROWS(TangentRowsAvx2, SOFTSW_TARGET_AVX2, 32)
SOFTSW_TANGENT_ROWS(TangentRowsAvx512, SOFTSW_TARGET_AVX512, 32)
#endif
#undef SOFTSW_TANGENT_ROWS

// 32-byte vectors on AVX2 and AVX-512 (512-bit vectors measured no faster,
// simd.h). Float lanes take the AVX2 build on AVX-512 too, as they always
// have; double lanes AVX-512VL's, as the float64 backward's rows
// (reverse_simd.h): its double <-> int64 conversions in exp2 are single
// instructions, which AVX2 lacks.
template <typename A, bool SOFT>
TangentRowFnsOf<A> pick_tangent_rows() {
#if defined(__x86_64__)
  if (std::is_same_v<A, double> && isa_level() >= 2) return TangentRowsAvx512<A, SOFT>::fns();
  if (isa_level() >= 1) return TangentRowsAvx2<A, SOFT>::fns();
#endif
  return TangentRowsBaseline<A, SOFT>::fns();
}

// The directions, Hessian-vector products and grad_grad_score of a double
// backward (problem.h's DoubleBackwardArgs, typed).
template <typename T>
struct TangentIO {
  const T* dir_s;  // (B, M, N) or nullptr (zero)
  const T* dir_g;  // the gap score's (linear) or the open gap score's (affine)
  const T* dir_e;  // affine: the extend gap score's
  T* hvp_s;
  T* hvp_g;        // or nullptr: not wanted
  T* hvp_e;
  T* grad_grad_score;
};

// One group of up to W pairs (regions non-empty, soft T > 0), start to
// finish: every entry of the pairs' Hessian-vector products (zero outside the
// regions) and their grad_grad_score.
template <typename T>
void double_backward_linear_group(const Setup<T>& su, const ReversePairOf<Acc<T>>* pairs,
                                  int count, const TangentRowFnsOf<Acc<T>>& fns,
                                  const Acc<T>* hidden, const TangentIO<T>& io,
                                  Scratch<Acc<T>>& sc) {
  using A = Acc<T>;
  const Problem& p = su.p;
  const int64_t N = su.N;
  int64_t mg = 0, ng = 0;
  const ReverseLanesOf<A> ln = lanes_of(pairs, count, mg, ng);
  const T* S[W] = {};
  const T* dir_s[W] = {};
  const T* dir_g[W] = {};
  const A* hid[W] = {};
  GapView<T> gv[W];
  int64_t lane_nr[W], full_row[W], hdot_at[W];
  int64_t cells = 0;
  for (int l = 0; l < W; ++l) {
    lane_nr[l] = ln.nr[l];
    full_row[l] = ng;
  }
  for (int l = 0; l < count; ++l) {
    const ReversePairOf<A>& q = pairs[l];
    S[l] = static_cast<const T*>(p.scores) + q.b * su.MN;
    if (io.dir_s) dir_s[l] = io.dir_s + q.b * su.MN;
    if (io.dir_g) dir_g[l] = io.dir_g + q.b * su.MN;
    hid[l] = hidden + q.b * su.MN;
    gv[l] = su.gap(p.gap_open, q.b);
    fill_outside(io.hvp_s + q.b * su.MN, su.M, N, q.mr, q.nr, A(0));
    if (io.hvp_g) fill_outside(io.hvp_g + q.b * su.MN, su.M, N, q.mr, q.nr, A(0));
    hdot_at[l] = cells;
    cells += q.mr * q.nr;
  }
  A* hdot_store = sc.tangents.get(cells);

  const int64_t stride = (ng + 1) * W;
  std::vector<A>& mem = group_rows(sc);
  mem.assign(static_cast<size_t>(14 * stride + 64 / sizeof(A)), A(0));
  A* base = mem.data();
  while (reinterpret_cast<uintptr_t>(base) % 64 != 0) ++base;
  A* buf[14];
  for (int k = 0; k < 14; ++k) buf[k] = base + k * stride;
  A *h = buf[0], *h_up = buf[1], *sb = buf[2], *gb = buf[3], *wsb = buf[4], *wgb = buf[5];
  A *hd = buf[6], *hd_up = buf[7], *in = buf[8], *out = buf[9], *in_dot = buf[10];
  A *out_dot = buf[11], *os = buf[12], *og = buf[13];
  alignas(64) A sdot[W] = {};

  // Row r (1-based; 0 the boundary) of each lane's `src` (nullptr: skipped,
  // or r > the lane's `rows`) into `dst`, `n` columns a lane, times `scale`.
  auto gather = [&](const T* const* src, int64_t r, const int64_t* n, A scale, A* dst) {
    const T* row[W] = {};
    for (int l = 0; l < count; ++l)
      if (src[l] && r >= 1 && r <= pairs[l].mr) row[l] = src[l] + (r - 1) * N;
    interleave_rows_of(dst, row, n, count, scale);
  };
  // H of row r over cols 1..ng (0 for the boundary row).
  auto gather_h = [&](int64_t r, A* dst) {
    if (r == 0) {
      std::fill(dst + W, dst + (ng + 1) * W, A(0));
      return;
    }
    const A* src[W] = {};
    for (int l = 0; l < count; ++l) src[l] = hid[l] + (r - 1) * N;
    interleave_rows(dst + W, src, full_row, count, A(1));
  };
  // Hdot of row r to and from each lane's block (row stride nr).
  auto hdot_rows = [&](int64_t r, A** rows) {
    for (int l = 0; l < count; ++l)
      rows[l] = r >= 1 && r <= pairs[l].mr ? hdot_store + hdot_at[l] + (r - 1) * lane_nr[l]
                                           : nullptr;
  };
  auto gather_hdot = [&](int64_t r, A* dst) {
    if (r == 0) {
      std::fill(dst + W, dst + (ng + 1) * W, A(0));
      return;
    }
    A* rows[W] = {};
    hdot_rows(r, rows);
    const A* src[W] = {};
    for (int l = 0; l < W; ++l) src[l] = rows[l];
    std::fill(dst + W, dst + (ng + 1) * W, A(0));
    interleave_rows(dst + W, src, lane_nr, count, A(1));
  };
  const bool gap_const = p.gap_open.data == nullptr;
  if (gap_const) std::fill(gb, gb + ng * W, gv[0].value);
  // The inputs of row i: scores, gap scores, directions.
  auto gather_inputs = [&](int64_t i) {
    gather(S, i, full_row, su.beta, sb);
    if (!gap_const)
      for (int l = 0; l < count; ++l)
        if (i <= pairs[l].mr)
          for (int64_t j = 0; j < ng; ++j) gb[j * W + l] = gv[l].at(i, j + 1);
    gather(dir_s, i, lane_nr, A(1), wsb);
    gather(dir_g, i, lane_nr, A(1), wgb);
  };

  // Tangent pass, first row down.
  gather_h(0, h_up);
  for (int64_t i = 1; i <= mg; ++i) {
    gather_h(i, h);
    gather_inputs(i);
    const TangentRowsOf<A> rows{h, h_up, sb, gb, wsb, wgb, hd_up, hd, sdot};
    fns.tangent(rows, static_cast<int32_t>(ng), static_cast<int32_t>(i), ln);
    A* dst[W] = {};
    hdot_rows(i, dst);
    deinterleave_rows(dst, hd + W, lane_nr, count);
    std::swap(h, h_up);
    std::swap(hd, hd_up);
  }
  // grad_grad_score = <W, P>: the seeds' tangent (soft), or Hdot at the
  // region's corner (max).
  for (int l = 0; l < count; ++l) {
    const ReversePairOf<A>& q = pairs[l];
    if (!su.soft_reduction) sdot[l] = hdot_store[hdot_at[l] + q.mr * q.nr - 1];
    st(io.grad_grad_score, q.b, sdot[l]);
  }

  // Reverse pass, last row up.
  std::fill(in, in + stride, A(0));
  std::fill(in_dot, in_dot + stride, A(0));
  gather_h(mg, h);
  gather_hdot(mg, hd);
  for (int64_t i = mg; i >= 1; --i) {
    gather_h(i - 1, h_up);
    gather_hdot(i - 1, hd_up);
    gather_inputs(i);
    const TangentRowsOf<A> rows{h, h_up, sb, gb, wsb, wgb, hd_up, hd, nullptr};
    const TangentMessagesOf<A> msg{in, in_dot, out, out_dot, os, io.hvp_g ? og : nullptr};
    fns.reverse(rows, msg, static_cast<int32_t>(ng), static_cast<int32_t>(i), ln, sdot, su.inv_t);
    scatter_row(su, pairs, count, i, lane_nr, os, io.hvp_s);
    scatter_row(su, pairs, count, i, lane_nr, og, io.hvp_g);
    std::swap(in, out);
    std::swap(in_dot, out_dot);
    std::swap(h, h_up);
    std::swap(hd, hd_up);
  }
}

}  // namespace softsw::cpu::simd
#endif  // SOFTSW_CPU_VECTOR
