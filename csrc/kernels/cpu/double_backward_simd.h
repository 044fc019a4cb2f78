// The SIMD double backward of linear gaps (soft, float accumulate): the
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
// scores and gap scores as in ReverseRows; the directions of row i (caller
// units) at (j - 1) * W; Hdot of row i and of row i - 1 at j * W.
struct TangentRows {
  const float* h;
  const float* h_up;
  const float* s;
  const float* g;
  const float* dir_s;
  const float* dir_g;
  const float* hdot_up;
  float* hdot;   // tangent pass: written; reverse pass: read
  float* sdot;   // tangent pass, soft: W per-lane sums of e0 * Hdot, accumulated
};

// The reverse pass's messages (as ReverseRows) and their tangents, and the
// row's Hessian-vector products at (j - 1) * W.
struct TangentMessages {
  const float* in;
  const float* in_dot;
  float* out;
  float* out_dot;
  float* hvp_s;
  float* hvp_g;  // nullptr when not wanted
};

template <int VL>
struct TangentCell {
  using X = V<VL>;
  using F = typename X::F;
  using I = typename X::I;
  F p1, p2, p3;  // the cell's weights, 0 outside the lane's region
  I active;
};

// The weights of cell (i, j) of the k-th vector of lanes, as the backward's.
template <int VL>
SOFTSW_VINLINE TangentCell<VL> tangent_cell(const TangentRows& r, int64_t c,
                                            typename V<VL>::I active) {
  using X = V<VL>;
  using Cell = LinearCell<Floats<VL>, false, VecMath<VL>>;
  const int64_t c1 = c - W;
  const auto h = X::load(r.h + c), g = X::load(r.g + c1);
  const Weights<Floats<VL>> w = Cell::normalized_weights(
      h, X::load(r.h_up + c1) + X::load(r.s + c1), X::load(r.h_up + c) + g, X::load(r.h + c1) + g);
  const auto zero = X::splat(0.0f);
  return {X::sel(active, w.p1.v, zero), X::sel(active, w.p2.v, zero), X::sel(active, w.p3.v, zero),
          active};
}

// Hdot of row i: Hdot = p1 (Hdot[i-1, j-1] + W_S) + p2 (Hdot[i-1, j] + W_g)
// + p3 (Hdot[i, j-1] + W_g); with SOFT the seeds' tangent sum too.
template <int VL, bool SOFT>
SOFTSW_VINLINE void tangent_row_body(const TangentRows& rows, int32_t n, int32_t i,
                                     const ReverseLanes& ln) {
  const TangentRows r = rows;  // a local copy, as reverse_row_body's
  using X = V<VL>;
  using F = typename X::F;
  using I = typename X::I;
  constexpr int K = W / VL;
  const I iv = X::splati(i);
  const F zero = X::splat(0.0f);
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
      const TangentCell<VL> w = tangent_cell<VL>(r, c, rowok[k] & (jv <= nr[k]));
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
template <int VL, bool SOFT>
SOFTSW_VINLINE void reverse_tangent_row_body(const TangentRows& rows,
                                             const TangentMessages& messages, int32_t n,
                                             int32_t i, const ReverseLanes& ln,
                                             const float* sdot_lanes, float inv_t) {
  const TangentRows r = rows;  // local copies, as reverse_row_body's
  const TangentMessages msg = messages;
  using X = V<VL>;
  using F = typename X::F;
  using I = typename X::I;
  constexpr int K = W / VL;
  const I iv = X::splati(i);
  const F zero = X::splat(0.0f), it = X::splat(inv_t);
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
      const TangentCell<VL> w = tangent_cell<VL>(r, c, rowok[k] & (jv <= nr[k]));
      F e0;
      if constexpr (SOFT)
        e0 = X::sel(w.active, X::exp2(X::load(r.h + c) - total[k]) * scale[k], zero);
      else
        e0 = X::sel(corner_row[k] & (jv == nr[k]), X::splat(1.0f), zero);
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
struct TangentRowFns {
  void (*tangent)(const TangentRows&, int32_t, int32_t, const ReverseLanes&);
  void (*reverse)(const TangentRows&, const TangentMessages&, int32_t, int32_t,
                  const ReverseLanes&, const float*, float);
};

template <int VL, bool SOFT>
struct TangentRowsOf {
  static void tangent(const TangentRows& r, int32_t n, int32_t i, const ReverseLanes& ln) {
    tangent_row_body<VL, SOFT>(r, n, i, ln);
  }
  static void reverse(const TangentRows& r, const TangentMessages& m, int32_t n, int32_t i,
                      const ReverseLanes& ln, const float* sdot, float inv_t) {
    reverse_tangent_row_body<VL, SOFT>(r, m, n, i, ln, sdot, inv_t);
  }
};
#if defined(__x86_64__)
template <bool SOFT>
struct TangentRowsAvx2 {
  SOFTSW_TARGET_AVX2 static void tangent(const TangentRows& r, int32_t n,
                                                          int32_t i, const ReverseLanes& ln) {
    tangent_row_body<8, SOFT>(r, n, i, ln);
  }
  SOFTSW_TARGET_AVX2 static void reverse(const TangentRows& r,
                                                          const TangentMessages& m, int32_t n,
                                                          int32_t i, const ReverseLanes& ln,
                                                          const float* sdot, float inv_t) {
    reverse_tangent_row_body<8, SOFT>(r, m, n, i, ln, sdot, inv_t);
  }
};
#endif

// AVX2 for AVX-512 too: 512-bit vectors measured no faster (simd.h).
template <bool SOFT>
TangentRowFns pick_tangent_rows() {
#if defined(__x86_64__)
  if (isa_level() >= 1) return {&TangentRowsAvx2<SOFT>::tangent, &TangentRowsAvx2<SOFT>::reverse};
#endif
  return {&TangentRowsOf<4, SOFT>::tangent, &TangentRowsOf<4, SOFT>::reverse};
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
void double_backward_linear_group(const Setup<T>& su, const ReversePair* pairs, int count,
                                  const TangentRowFns& fns, const float* hidden,
                                  const TangentIO<T>& io, Scratch<float>& sc) {
  const Problem& p = su.p;
  const int64_t N = su.N;
  int64_t mg = 0, ng = 0;
  const ReverseLanes ln = lanes_of(pairs, count, mg, ng);
  const T* S[W] = {};
  const T* dir_s[W] = {};
  const T* dir_g[W] = {};
  const float* hid[W] = {};
  GapView<T> gv[W];
  int64_t lane_nr[W], full_row[W], hdot_at[W];
  int64_t cells = 0;
  for (int l = 0; l < W; ++l) {
    lane_nr[l] = ln.nr[l];
    full_row[l] = ng;
  }
  for (int l = 0; l < count; ++l) {
    const ReversePair& q = pairs[l];
    S[l] = static_cast<const T*>(p.scores) + q.b * su.MN;
    if (io.dir_s) dir_s[l] = io.dir_s + q.b * su.MN;
    if (io.dir_g) dir_g[l] = io.dir_g + q.b * su.MN;
    hid[l] = hidden + q.b * su.MN;
    gv[l] = su.gap(p.gap_open, q.b);
    fill_outside(io.hvp_s + q.b * su.MN, su.M, N, q.mr, q.nr, 0.0f);
    if (io.hvp_g) fill_outside(io.hvp_g + q.b * su.MN, su.M, N, q.mr, q.nr, 0.0f);
    hdot_at[l] = cells;
    cells += q.mr * q.nr;
  }
  float* hdot_store = sc.tangents.get(cells);

  const int64_t stride = (ng + 1) * W;
  std::vector<float>& mem = sc.lanes;
  mem.assign(static_cast<size_t>(14 * stride + 16), 0.0f);
  float* base = mem.data();
  while (reinterpret_cast<uintptr_t>(base) % 64 != 0) ++base;
  float* buf[14];
  for (int k = 0; k < 14; ++k) buf[k] = base + k * stride;
  float *h = buf[0], *h_up = buf[1], *sb = buf[2], *gb = buf[3], *wsb = buf[4], *wgb = buf[5];
  float *hd = buf[6], *hd_up = buf[7], *in = buf[8], *out = buf[9], *in_dot = buf[10];
  float *out_dot = buf[11], *os = buf[12], *og = buf[13];
  alignas(64) float sdot[W] = {};

  // Row r (1-based; 0 the boundary) of each lane's `src` (nullptr: skipped,
  // or r > the lane's `rows`) into `dst`, `n` columns a lane, times `scale`.
  auto gather = [&](const T* const* src, int64_t r, const int64_t* n, float scale, float* dst) {
    const T* row[W] = {};
    for (int l = 0; l < count; ++l)
      if (src[l] && r >= 1 && r <= pairs[l].mr) row[l] = src[l] + (r - 1) * N;
    interleave_rows_of(dst, row, n, count, scale);
  };
  // H of row r over cols 1..ng (0 for the boundary row).
  auto gather_h = [&](int64_t r, float* dst) {
    if (r == 0) {
      std::fill(dst + W, dst + (ng + 1) * W, 0.0f);
      return;
    }
    const float* src[W] = {};
    for (int l = 0; l < count; ++l) src[l] = hid[l] + (r - 1) * N;
    interleave_rows(dst + W, src, full_row, count, 1.0f);
  };
  // Hdot of row r to and from each lane's block (row stride nr).
  auto hdot_rows = [&](int64_t r, float** rows) {
    for (int l = 0; l < count; ++l)
      rows[l] = r >= 1 && r <= pairs[l].mr ? hdot_store + hdot_at[l] + (r - 1) * lane_nr[l]
                                           : nullptr;
  };
  auto gather_hdot = [&](int64_t r, float* dst) {
    if (r == 0) {
      std::fill(dst + W, dst + (ng + 1) * W, 0.0f);
      return;
    }
    float* rows[W] = {};
    hdot_rows(r, rows);
    const float* src[W] = {};
    for (int l = 0; l < W; ++l) src[l] = rows[l];
    std::fill(dst + W, dst + (ng + 1) * W, 0.0f);
    interleave_rows(dst + W, src, lane_nr, count, 1.0f);
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
    gather(dir_s, i, lane_nr, 1.0f, wsb);
    gather(dir_g, i, lane_nr, 1.0f, wgb);
  };

  // Tangent pass, first row down.
  gather_h(0, h_up);
  for (int64_t i = 1; i <= mg; ++i) {
    gather_h(i, h);
    gather_inputs(i);
    const TangentRows rows{h, h_up, sb, gb, wsb, wgb, hd_up, hd, sdot};
    fns.tangent(rows, static_cast<int32_t>(ng), static_cast<int32_t>(i), ln);
    float* dst[W] = {};
    hdot_rows(i, dst);
    deinterleave_rows(dst, hd + W, lane_nr, count);
    std::swap(h, h_up);
    std::swap(hd, hd_up);
  }
  // grad_grad_score = <W, P>: the seeds' tangent (soft), or Hdot at the
  // region's corner (max).
  for (int l = 0; l < count; ++l) {
    const ReversePair& q = pairs[l];
    if (!su.soft_reduction) sdot[l] = hdot_store[hdot_at[l] + q.mr * q.nr - 1];
    st(io.grad_grad_score, q.b, sdot[l]);
  }

  // Reverse pass, last row up.
  std::fill(in, in + stride, 0.0f);
  std::fill(in_dot, in_dot + stride, 0.0f);
  gather_h(mg, h);
  gather_hdot(mg, hd);
  for (int64_t i = mg; i >= 1; --i) {
    gather_h(i - 1, h_up);
    gather_hdot(i - 1, hd_up);
    gather_inputs(i);
    const TangentRows rows{h, h_up, sb, gb, wsb, wgb, hd_up, hd, nullptr};
    const TangentMessages msg{in, in_dot, out, out_dot, os, io.hvp_g ? og : nullptr};
    fns.reverse(rows, msg, static_cast<int32_t>(ng), static_cast<int32_t>(i), ln, sdot,
                static_cast<float>(su.inv_t));
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
