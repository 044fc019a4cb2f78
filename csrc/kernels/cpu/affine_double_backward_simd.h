// The SIMD double backward of affine gaps (soft, pairs inside the range rule
// of probability.h), templated on the accumulate type A as the linear one
// (double_backward_simd.h: float for float32, float16, bfloat16; double for
// float64): tangent_affine and reverse_affine<TAN> of reverse.h on SIMD
// lanes, one lane per pair, groups of W = 16 pairs.
//
// Weights. Each row's shares (AffineShares, probability.h: the cell's nodes
// relative to its C) come, as in the backward (reverse_affine_simd.h), for a
// float group from the forward run again, from row 0 for the tangent pass and
// from the training forward's checkpoints block by block for the reverse pass
// (AffineShareBlocks); for a float64 group from the C, U, L planes its
// forward kept (AffineNodeShares, 4 exp2 a cell), row by row in both passes.
// They are kept for the row below (tangent pass) or above (reverse pass); a
// cell's 11 weights are ratios of its shares, its left neighbour's and the
// shares of the cell above (affine_weights_of_shares, the formulas of
// affine_row_weights.h). A lane only counts the cells of its region: out of
// it, and at a C the forward flushed to -inf, the weights are 0 (and the
// reverse pass's shares a boundary cell's).
//
// Tangents. The tangent pass writes the five node tangents (C, U, L, A, B) of
// each row into a TangentRowStore (tangent_store.h), where the reverse pass
// reads them: in place for a group of alike pairs, else in each pair's
// blocks.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include "../probability.h"
#include "affine_row_weights.h"
#include "double_backward_simd.h"
#include "reverse_affine_simd.h"
#include "setup.h"
#include "simd.h"
#include "tangent_store.h"

#if SOFTSW_CPU_VECTOR
namespace softsw::cpu::simd {

// The shares of one row and its C, lane-interleaved (col j at j * W, col 0 the
// boundary: start 1, the others 0).
template <typename A>
struct AffineShareRowOf {
  A *start, *d, *u, *l, *c;
};

// The node tangents of one row at j * LANES, the row kernels' lane stride
// (col 0: 0; tangent_store.h).
template <typename A>
struct AffineTangentRowOf {
  A *c, *u, *l, *a, *b;
};

// One row of a pass: shares of the row and of the row above, gap weights
// (2^open, 2^extend) and directions of the row at (j - 1) * W, tangents of the
// row and of the row above.
template <typename A>
struct AffineTangentRowsOf {
  AffineShareRowOf<A> here, up;
  const A *open, *extend;
  const A *dir_s, *dir_o, *dir_e;
  AffineTangentRowOf<A> t, t_up;
  A* sdot;  // tangent pass, soft: W per-lane sums of e0 * Cdot, accumulated
};

// The reverse pass's messages into the row (to C, A, U from the row below and
// their tangents), out of it, and the row's Hessian-vector products at
// (j - 1) * W (nullptr: not wanted).
template <typename A>
struct AffineTangentMessagesOf {
  const A *in_c, *in_a, *in_u, *in_cd, *in_ad, *in_ud;
  A *out_c, *out_a, *out_u, *out_cd, *out_ad, *out_ud;
  A *hvp_s, *hvp_o, *hvp_e;
};

template <typename A, int VL>
SOFTSW_VINLINE AffineShares<Packed<A, VL>> share_at(const AffineShareRowOf<A>& r, int64_t c) {
  using X = Vec<A, VL>;
  return {X::load(r.start + c), X::load(r.d + c), X::load(r.u + c), X::load(r.l + c)};
}

// Row `row`'s shares and C, as the forward run again gave them (`src`), into
// `dst` (which may be `src`), masked: a cell out of its lane's region or with
// C = -inf (flushed) gets a boundary cell's shares. (The float groups'
// reverse pass: their shares' block rows are overwritten by the next block.)
template <typename A, int VL, int LANES>
SOFTSW_VINLINE void affine_share_mask_body(const AffineShareRowOf<A>& src,
                                           const AffineShareRowOf<A>& dst, int32_t n,
                                           int32_t row, const ReverseLanesOf<A>& ln) {
  using X = Vec<A, VL>;
  using F = typename X::F;
  using I = typename X::I;
  constexpr int K = LANES / VL;  // (W / 2: narrow rows, for groups of at most 8 pairs)
  const F zero = X::splat(A(0)), one = X::splat(A(1)), ninf = X::splat(-kInf<A>);
  const I rv = X::splati(row);
  I rowok[K], nr[K];
  for (int k = 0; k < K; ++k) {
    rowok[k] = rv <= X::loadi(ln.mr + k * VL);
    nr[k] = X::loadi(ln.nr + k * VL);
  }
  for (int32_t j = 1; j <= n; ++j) {
    const I jv = X::splati(j);
    for (int k = 0; k < K; ++k) {
      const int64_t c = int64_t(j) * W + k * VL;
      const F cc = X::load(src.c + c);
      const I ok = rowok[k] & (jv <= nr[k]) & (cc > ninf);
      X::store(dst.c + c, cc);
      X::store(dst.start + c, X::sel(ok, X::load(src.start + c), one));
      X::store(dst.d + c, X::sel(ok, X::load(src.d + c), zero));
      X::store(dst.u + c, X::sel(ok, X::load(src.u + c), zero));
      X::store(dst.l + c, X::sel(ok, X::load(src.l + c), zero));
    }
  }
}

// The weights of cell (i, j) of the k-th vector of lanes (0 where !ok).
template <typename A, int VL>
SOFTSW_VINLINE void affine_lane_weights(const AffineTangentRowsOf<A>& r, int64_t c,
                                        typename Vec<A, VL>::I ok, Packed<A, VL>* w) {
  using X = Vec<A, VL>;
  const int64_t c1 = c - W;
  affine_weights_of_shares<A, VL>(share_at<A, VL>(r.here, c), share_at<A, VL>(r.here, c1),
                                  share_at<A, VL>(r.up, c), X::load(r.open + c1),
                                  X::load(r.extend + c1), w);
  const auto zero = X::splat(A(0));
  for (int q = 0; q < AffineRowWeights::kCount; ++q) w[q] = X::sel(ok, w[q].v, zero);
}

// Whether cell (i, j) of the k-th vector of lanes counts: in the lane's
// region, C not flushed.
template <typename A, int VL>
SOFTSW_VINLINE typename Vec<A, VL>::I affine_cell_ok(const AffineShareRowOf<A>& here, int64_t c,
                                                     typename Vec<A, VL>::I rowok,
                                                     typename Vec<A, VL>::I in_row) {
  using X = Vec<A, VL>;
  return rowok & in_row & (X::load(here.c + c) > X::splat(-kInf<A>));
}

// The node tangents of row i (tangent_affine of reverse.h).
template <typename A, int VL, bool SOFT, int LANES>
SOFTSW_VINLINE void affine_tangent_row_body(const AffineTangentRowsOf<A>& rows, int32_t n,
                                            int32_t i, const ReverseLanesOf<A>& ln) {
  const AffineTangentRowsOf<A> r = rows;  // a local copy, as reverse_row_body's
  using X = Vec<A, VL>;
  using F = typename X::F;
  using I = typename X::I;
  using Fl = Packed<A, VL>;
  using R = AffineRowWeights;
  constexpr int K = LANES / VL;  // (W / 2: narrow rows, for groups of at most 8 pairs)
  const F zero = X::splat(A(0));
  const I iv = X::splati(i);
  I rowok[K], nr[K];
  F b_left[K], l_left[K], total[K], scale[K], sdot[K];
  for (int k = 0; k < K; ++k) {
    rowok[k] = iv <= X::loadi(ln.mr + k * VL);
    nr[k] = X::loadi(ln.nr + k * VL);
    b_left[k] = l_left[k] = zero;
    total[k] = X::load(ln.total + k * VL);
    scale[k] = X::load(ln.scale + k * VL);
    sdot[k] = X::load(r.sdot + k * VL);
  }
  for (int32_t j = 1; j <= n; ++j) {
    const I jv = X::splati(j);
    for (int k = 0; k < K; ++k) {
      const int64_t c = int64_t(j) * W + k * VL, c1 = c - W;
      const int64_t t = int64_t(j) * LANES + k * VL, t1 = t - LANES;  // tangent rows
      const I ok = affine_cell_ok<A, VL>(r.here, c, rowok[k], jv <= nr[k]);
      Fl w[R::kCount];
      affine_lane_weights<A, VL>(r, c, ok, w);
      const F d_open = X::load(r.dir_o + c1), d_ext = X::load(r.dir_e + c1);
      const F dd = X::load(r.t_up.c + t1) + X::load(r.dir_s + c1);
      const F ud = w[R::kUo].v * (X::load(r.t_up.a + t) + d_open) +
                   w[R::kUe].v * (X::load(r.t_up.u + t) + d_ext);
      const F ld = w[R::kLo].v * (b_left[k] + d_open) + w[R::kLe].v * (l_left[k] + d_ext);
      const F cd = X::sel(ok, w[R::kC1].v * dd + w[R::kC2].v * ud + w[R::kC3].v * ld, zero);
      const F ad = X::sel(ok, w[R::kA1].v * dd + w[R::kA2].v * ld, zero);
      const F bd = X::sel(ok, w[R::kB1].v * dd + w[R::kB2].v * ud, zero);
      const F um = X::sel(ok, ud, zero), lm = X::sel(ok, ld, zero);
      X::store(r.t.c + t, cd);
      X::store(r.t.u + t, um);
      X::store(r.t.l + t, lm);
      X::store(r.t.a + t, ad);
      X::store(r.t.b + t, bd);
      b_left[k] = bd;
      l_left[k] = lm;
      if constexpr (SOFT)
        sdot[k] += X::sel(ok, X::exp2(X::load(r.here.c + c) - total[k]) * scale[k], zero) * cd;
    }
  }
  for (int k = 0; k < K; ++k) X::store(r.sdot + k * VL, sdot[k]);
}

// Row i of the reverse pass (reverse_affine<TAN> of reverse.h): the
// adjoints and their tangents, the messages to row i - 1, the row's
// Hessian-vector products.
template <typename A, int VL, bool SOFT, int LANES>
SOFTSW_VINLINE void affine_reverse_tangent_row_body(const AffineTangentRowsOf<A>& rows,
                                                    const AffineTangentMessagesOf<A>& messages,
                                                    int32_t n, int32_t i,
                                                    const ReverseLanesOf<A>& ln,
                                                    const A* sdot_lanes, A inv_t) {
  const AffineTangentRowsOf<A> r = rows;  // local copies, as reverse_row_body's
  const AffineTangentMessagesOf<A> msg = messages;
  using X = Vec<A, VL>;
  using F = typename X::F;
  using I = typename X::I;
  using Fl = Packed<A, VL>;
  using R = AffineRowWeights;
  constexpr int K = LANES / VL;  // (W / 2: narrow rows, for groups of at most 8 pairs)
  const F zero = X::splat(A(0)), it = X::splat(inv_t);
  const I iv = X::splati(i);
  I rowok[K], corner_row[K], nr[K];
  F total[K], scale[K], gs[K], sdot[K];
  F r_b[K], r_l[K], r_bd[K], r_ld[K], pend_c[K], pend_cd[K];
  for (int k = 0; k < K; ++k) {
    const I mr = X::loadi(ln.mr + k * VL);
    rowok[k] = iv <= mr;
    corner_row[k] = iv == mr;
    nr[k] = X::loadi(ln.nr + k * VL);
    total[k] = X::load(ln.total + k * VL);
    scale[k] = X::load(ln.scale + k * VL);
    gs[k] = X::load(ln.grad + k * VL);
    sdot[k] = X::load(sdot_lanes + k * VL);
    r_b[k] = r_l[k] = r_bd[k] = r_ld[k] = pend_c[k] = pend_cd[k] = zero;
  }
  for (int32_t j = n; j >= 1; --j) {
    const I jv = X::splati(j);
    for (int k = 0; k < K; ++k) {
      const int64_t c = int64_t(j) * W + k * VL, c1 = c - W;
      const int64_t t = int64_t(j) * LANES + k * VL, t1 = t - LANES;  // tangent rows
      const I ok = affine_cell_ok<A, VL>(r.here, c, rowok[k], jv <= nr[k]);
      Fl wv[R::kCount];
      affine_lane_weights<A, VL>(r, c, ok, wv);
      F w[R::kCount];
      for (int q = 0; q < R::kCount; ++q) w[q] = wv[q].v;
      F e0;
      if constexpr (SOFT)
        e0 = X::sel(ok, X::exp2(X::load(r.here.c + c) - total[k]) * scale[k], zero);
      else
        e0 = X::sel(corner_row[k] & (jv == nr[k]), X::splat(A(1)), zero);
      // The adjoints (reverse_affine of reverse.h).
      const F ec = e0 + X::load(msg.in_c + c), ea = X::load(msg.in_a + c), eb = r_b[k];
      const F eu = X::load(msg.in_u + c) + ec * w[R::kC2] + eb * w[R::kB2];
      const F el = r_l[k] + ec * w[R::kC3] + ea * w[R::kA2];
      const F ed = ec * w[R::kC1] + ea * w[R::kA1] + eb * w[R::kB1];
      // The weights' tangents.
      const F cd = X::load(r.t.c + t), ud = X::load(r.t.u + t), ld = X::load(r.t.l + t);
      const F ad = X::load(r.t.a + t), bd = X::load(r.t.b + t);
      const F d_open = X::load(r.dir_o + c1), d_ext = X::load(r.dir_e + c1);
      const F dd = X::load(r.t_up.c + t1) + X::load(r.dir_s + c1);
      const F c1d = w[R::kC1] * (dd - cd) * it, c2d = w[R::kC2] * (ud - cd) * it;
      const F c3d = w[R::kC3] * (ld - cd) * it;
      const F a1d = w[R::kA1] * (dd - ad) * it, a2d = w[R::kA2] * (ld - ad) * it;
      const F b1d = w[R::kB1] * (dd - bd) * it, b2d = w[R::kB2] * (ud - bd) * it;
      const F uod = w[R::kUo] * (X::load(r.t_up.a + t) + d_open - ud) * it;
      const F ued = w[R::kUe] * (X::load(r.t_up.u + t) + d_ext - ud) * it;
      const F lod = w[R::kLo] * (X::load(r.t.b + t1) + d_open - ld) * it;
      const F led = w[R::kLe] * (X::load(r.t.l + t1) + d_ext - ld) * it;
      // The adjoints' tangents.
      F e0d = zero;
      if constexpr (SOFT) e0d = e0 * (cd - sdot[k]) * it;
      const F ecd = e0d + X::load(msg.in_cd + c), ead = X::load(msg.in_ad + c), ebd = r_bd[k];
      const F eud = X::load(msg.in_ud + c) + ecd * w[R::kC2] + ec * c2d + ebd * w[R::kB2] +
                    eb * b2d;
      const F eld = r_ld[k] + ecd * w[R::kC3] + ec * c3d + ead * w[R::kA2] + ea * a2d;
      // Out of the region (and at a flushed C) every message is 0, whatever
      // the directions there.
      const F edd = X::sel(ok, ecd * w[R::kC1] + ec * c1d + ead * w[R::kA1] + ea * a1d +
                                   ebd * w[R::kB1] + eb * b1d,
                           zero);
      const F m_uo = X::sel(ok, eud * w[R::kUo] + eu * uod, zero);
      const F m_ue = X::sel(ok, eud * w[R::kUe] + eu * ued, zero);
      const F m_lo = X::sel(ok, eld * w[R::kLo] + el * lod, zero);
      const F m_le = X::sel(ok, eld * w[R::kLe] + el * led, zero);
      X::store(msg.hvp_s + c1, gs[k] * edd);
      if (msg.hvp_o) X::store(msg.hvp_o + c1, gs[k] * (m_uo + m_lo));
      if (msg.hvp_e) X::store(msg.hvp_e + c1, gs[k] * (m_ue + m_le));
      // To row i - 1: C[i-1, j] from D[i, j+1] (pending), A and U from U[i, j].
      X::store(msg.out_c + c, pend_c[k]);
      X::store(msg.out_cd + c, pend_cd[k]);
      X::store(msg.out_a + c, eu * w[R::kUo]);
      X::store(msg.out_u + c, eu * w[R::kUe]);
      X::store(msg.out_ad + c, m_uo);
      X::store(msg.out_ud + c, m_ue);
      pend_c[k] = ed;
      pend_cd[k] = edd;
      r_b[k] = el * w[R::kLo];
      r_l[k] = el * w[R::kLe];
      r_bd[k] = m_lo;
      r_ld[k] = m_le;
    }
  }
  for (int k = 0; k < K; ++k) {
    X::store(msg.out_c + k * VL, pend_c[k]);
    X::store(msg.out_cd + k * VL, pend_cd[k]);
  }
}

// The row kernels of one instruction set, reduction and lane stride.
template <typename A>
struct AffineTangentRowFnsOf {
  void (*mask)(const AffineShareRowOf<A>&, const AffineShareRowOf<A>&, int32_t, int32_t,
               const ReverseLanesOf<A>&);
  void (*tangent)(const AffineTangentRowsOf<A>&, int32_t, int32_t, const ReverseLanesOf<A>&);
  void (*reverse)(const AffineTangentRowsOf<A>&, const AffineTangentMessagesOf<A>&, int32_t,
                  int32_t, const ReverseLanesOf<A>&, const A*, A);
  int lanes;  // the lane stride of the tangent rows (AffineTangentRowOf)
};

// The row kernels of VBYTES-byte vectors (16: the baseline, 32: AVX2 and
// AVX-512VL): 4 or 8 floats, 2 or 4 doubles to a vector; LANES: W, or W / 2
// (narrow: the rows of the first W / 2 lanes, for a group of at most W / 2
// pairs).
#define SOFTSW_AFFINE_TANGENT_ROWS(NAME, TARGET, VBYTES)                                          \
  template <typename A, bool SOFT, int LANES>                                                     \
  struct NAME {                                                                                   \
    static constexpr int VL = VBYTES / static_cast<int>(sizeof(A));                              \
    TARGET static void mask(const AffineShareRowOf<A>& src, const AffineShareRowOf<A>& dst,       \
                            int32_t n, int32_t row, const ReverseLanesOf<A>& ln) {                \
      affine_share_mask_body<A, VL, LANES>(src, dst, n, row, ln);                                 \
    }                                                                                             \
    TARGET static void tangent(const AffineTangentRowsOf<A>& r, int32_t n, int32_t i,             \
                               const ReverseLanesOf<A>& ln) {                                     \
      affine_tangent_row_body<A, VL, SOFT, LANES>(r, n, i, ln);                                   \
    }                                                                                             \
    TARGET static void reverse(const AffineTangentRowsOf<A>& r,                                   \
                               const AffineTangentMessagesOf<A>& m, int32_t n, int32_t i,         \
                               const ReverseLanesOf<A>& ln, const A* sdot, A inv_t) {             \
      affine_reverse_tangent_row_body<A, VL, SOFT, LANES>(r, m, n, i, ln, sdot, inv_t);           \
    }                                                                                             \
    static AffineTangentRowFnsOf<A> fns() { return {&mask, &tangent, &reverse, LANES}; }          \
  };
SOFTSW_AFFINE_TANGENT_ROWS(AffineTangentRowsBaseline, , 16)
#if defined(__x86_64__)
SOFTSW_AFFINE_TANGENT_ROWS(AffineTangentRowsAvx2, SOFTSW_TARGET_AVX2, 32)
SOFTSW_AFFINE_TANGENT_ROWS(AffineTangentRowsAvx512, SOFTSW_TARGET_AVX512, 32)
#endif
#undef SOFTSW_AFFINE_TANGENT_ROWS

template <template <typename, bool, int> class Rows, typename A, bool SOFT>
AffineTangentRowFnsOf<A> affine_tangent_rows_of(bool narrow) {
  return narrow ? Rows<A, SOFT, W / 2>::fns() : Rows<A, SOFT, W>::fns();
}

// 32-byte vectors on AVX2 and AVX-512 (512-bit vectors measured no faster,
// simd.h), as the linear rows (pick_tangent_rows): float lanes the AVX2
// build on AVX-512 too, double lanes AVX-512VL's (single-instruction
// double <-> int64 conversions in exp2).
template <typename A, bool SOFT>
AffineTangentRowFnsOf<A> pick_affine_tangent_rows(bool narrow) {
#if defined(__x86_64__)
  if (std::is_same_v<A, double> && isa_level() >= 2)
    return affine_tangent_rows_of<AffineTangentRowsAvx512, A, SOFT>(narrow);
  if (isa_level() >= 1) return affine_tangent_rows_of<AffineTangentRowsAvx2, A, SOFT>(narrow);
#endif
  return affine_tangent_rows_of<AffineTangentRowsBaseline, A, SOFT>(narrow);
}

// One group of up to W pairs (regions non-empty, soft T > 0, inside the range
// rule), start to finish: every entry of the pairs' Hessian-vector products
// (zero outside the regions) and their grad_grad_score.
template <typename T>
void affine_double_backward_group(const Setup<T>& su, const ReversePairOf<Acc<T>>* pairs,
                                  int count, const AffineTangentRowFnsOf<Acc<T>>& fns,
                                  const Acc<T>* hidden, const TangentIO<T>& io,
                                  Scratch<Acc<T>>& sc) {
  using A = Acc<T>;
  const Problem& p = su.p;
  const int64_t N = su.N, MN = su.MN;
  int64_t mg = 0, ng = 0;
  const ReverseLanesOf<A> ln = lanes_of(pairs, count, mg, ng);
  const T* dir_s[W] = {};
  const T* dir_o[W] = {};
  const T* dir_e[W] = {};
  GapView<T> go[W], ge[W];
  int64_t lane_nr[W];
  for (int l = 0; l < W; ++l) lane_nr[l] = ln.nr[l];
  for (int l = 0; l < count; ++l) {
    const ReversePairOf<A>& q = pairs[l];
    if (io.dir_s) dir_s[l] = io.dir_s + q.b * MN;
    if (io.dir_g) dir_o[l] = io.dir_g + q.b * MN;
    if (io.dir_e) dir_e[l] = io.dir_e + q.b * MN;
    go[l] = su.gap(p.gap_open, q.b);
    ge[l] = su.gap(p.gap_extend, q.b);
    for (T* g : {io.hvp_s, io.hvp_g, io.hvp_e})
      if (g) fill_outside(g + q.b * MN, su.M, N, q.mr, q.nr, A(0));
  }
  // The node tangents of every row, planes C, U, L, A, B.
  TangentRowStore<A, 5> tangents(pairs, count, mg, ng, fns.lanes);
  A* tangent_mem = sc.tangent_rows.get(static_cast<int64_t>(tangents.elements() + 64 / sizeof(A)));
  while (reinterpret_cast<uintptr_t>(tangent_mem) % 64 != 0) ++tangent_mem;
  tangents.bind(tangent_mem);

  // The cells' shares (AffineShareSource): float, the forward run again,
  // from row 0 for the tangent pass and from the checkpoints for the reverse
  // pass; float64, from the kept nodes, any row.
  AffineShareSource<T> blocks(su, pairs, count, mg, ng, hidden);
  const int64_t stride = blocks.stride();  // its rows span whole chunks: >= (ng + 1) W
  constexpr int kRows = 2 * 5 + 2 + 3 + 12 + 3;
  std::vector<A>& mem = group_rows(sc);
  mem.assign(static_cast<size_t>(kRows * stride + blocks.floats() + 128 / sizeof(A)), A(0));
  A* base = mem.data();
  while (reinterpret_cast<uintptr_t>(base) % 64 != 0) ++base;
  A* next = base;
  auto take = [&]() {
    A* a = next;
    next += stride;
    return a;
  };
  AffineShareRowOf<A> here{take(), take(), take(), take(), take()};
  AffineShareRowOf<A> up{take(), take(), take(), take(), take()};
  A *open = take(), *extend = take();
  A *ws = take(), *wo = take(), *we = take();
  A *in[6], *out[6];
  for (int k = 0; k < 6; ++k) in[k] = take();
  for (int k = 0; k < 6; ++k) out[k] = take();
  A *os = take(), *oo = take(), *oe = take();
  for (const AffineShareRowOf<A>& s : {here, up}) std::fill(s.start, s.start + W, A(1));  // col 0
  while (reinterpret_cast<uintptr_t>(next) % 64 != 0) ++next;
  blocks.bind(next);

  // Row r of each lane's `src` (nullptr: skipped) into `dst` at (j - 1) * W,
  // times `scale`; lanes without row r get 0. A direction not given at all
  // stays the zero row it starts as.
  auto gather = [&](const T* const* src, int64_t r, A scale, A* dst) {
    if (std::all_of(src, src + count, [](const T* a) { return a == nullptr; })) return;
    const T* row[W] = {};
    for (int l = 0; l < count; ++l) {
      if (src[l] && r <= pairs[l].mr) {
        row[l] = src[l] + (r - 1) * N;
      } else {
        for (int64_t j = 0; j < lane_nr[l]; ++j) dst[j * W + l] = A(0);
      }
    }
    interleave_rows_of(dst, row, lane_nr, count, scale);
  };
  // Row r's shares into `sh` (row 0: the boundary's). Float: the next row of
  // the forward from row 0 (`from_top`, the tangent pass), or the row of the
  // block holding r, masked as it is copied (the reverse pass: the block's
  // rows are the next block's after the next call). The mask is for the
  // copy's sake: the row kernels give a cell out of its lane's region zero
  // weights and messages whatever its shares, and a cell inside reads the
  // shares of cells inside or on the boundary only (a C the forward flushed
  // has a boundary's shares from the forward itself, forward_probability.h),
  // so the tangent pass takes the forward's rows as they are. Float64: the
  // shares of the kept nodes, straight into `sh` in either pass (a flushed C
  // gets a boundary's shares there too).
  auto shares = [&](int64_t r, const AffineShareRowOf<A>& sh, bool from_top) {
    if (r == 0) {
      std::fill(sh.start + W, sh.start + stride, A(1));
      for (A* a : {sh.d, sh.u, sh.l, sh.c}) std::fill(a + W, a + stride, A(0));
      if constexpr (std::is_same_v<A, float>)
        if (from_top) blocks.start();
      return;
    }
    // (Cols 1..ng are written; col 0 stays the boundary.)
    const AffineShareRowsOf<A> into{sh.start, sh.d, sh.u, sh.l, sh.c};
    if constexpr (std::is_same_v<A, float>) {
      if (from_top) {
        blocks.step(r, into);
        return;
      }
      const AffineShareRowsOf<A> b = blocks.row(r);
      fns.mask(AffineShareRowOf<A>{b.start, b.d, b.u, b.l, b.e0}, sh, static_cast<int32_t>(ng),
               static_cast<int32_t>(r), ln);
    } else {
      blocks.row(r, into);
    }
  };
  const bool gap_tensor = p.has_gap_tensor();
  if (!gap_tensor) {
    std::fill(open, open + ng * W, CpuMath::exp2(go[0].value));
    std::fill(extend, extend + ng * W, CpuMath::exp2(ge[0].value));
  }
  // Row i's gap weights and directions.
  auto inputs = [&](int64_t i) {
    if (gap_tensor)
      for (int l = 0; l < count; ++l) {
        if (i > pairs[l].mr) continue;
        for (int64_t j = 0; j < lane_nr[l]; ++j) {
          open[j * W + l] = CpuMath::exp2(go[l].at(i, j + 1));
          extend[j * W + l] = CpuMath::exp2(ge[l].at(i, j + 1));
        }
      }
    gather(dir_s, i, A(1), ws);
    gather(dir_o, i, A(1), wo);
    gather(dir_e, i, A(1), we);
  };
  auto row_of = [](const typename TangentRowStore<A, 5>::Row& planes) {
    return AffineTangentRowOf<A>{planes[0], planes[1], planes[2], planes[3], planes[4]};
  };
  alignas(64) A sdot[W] = {};

  // Tangent pass, first row down.
  shares(0, up, true);
  for (int64_t i = 1; i <= mg; ++i) {
    shares(i, here, true);
    inputs(i);
    const AffineTangentRowsOf<A> rows{here, up, open, extend, ws, wo, we, row_of(tangents.put(i)),
                                      row_of(tangents.up(i)), sdot};
    fns.tangent(rows, static_cast<int32_t>(ng), static_cast<int32_t>(i), ln);
    tangents.kept(i);
    std::swap(here, up);
  }
  // grad_grad_score = <W, P>: the seeds' tangent (soft), or Cdot at the
  // region's corner (max).
  for (int l = 0; l < count; ++l) {
    const ReversePairOf<A>& q = pairs[l];
    if (!su.soft_reduction) sdot[l] = tangents.at(l, 0, q.mr, q.nr);
    st(io.grad_grad_score, q.b, sdot[l]);
  }

  // Reverse pass, last row up.
  for (A* a : in) std::fill(a, a + stride, A(0));
  shares(mg, here, false);
  AffineTangentRowOf<A> t = row_of(tangents.get(mg));
  for (int64_t i = mg; i >= 1; --i) {
    shares(i - 1, up, false);
    const AffineTangentRowOf<A> t_up = row_of(tangents.get(i - 1));
    inputs(i);
    const AffineTangentRowsOf<A> rows{here, up, open, extend, ws, wo, we, t, t_up, nullptr};
    const AffineTangentMessagesOf<A> msg{in[0],  in[1],  in[2],  in[3],
                                         in[4],  in[5],  out[0], out[1],
                                         out[2], out[3], out[4], out[5],
                                         os,     io.hvp_g ? oo : nullptr, io.hvp_e ? oe : nullptr};
    fns.reverse(rows, msg, static_cast<int32_t>(ng), static_cast<int32_t>(i), ln, sdot,
                su.inv_t);
    scatter_row(su, pairs, count, i, lane_nr, os, io.hvp_s);
    scatter_row(su, pairs, count, i, lane_nr, oo, io.hvp_g);
    scatter_row(su, pairs, count, i, lane_nr, oe, io.hvp_e);
    for (int k = 0; k < 6; ++k) std::swap(in[k], out[k]);
    std::swap(here, up);
    t = t_up;
  }
}

}  // namespace softsw::cpu::simd
#endif  // SOFTSW_CPU_VECTOR
