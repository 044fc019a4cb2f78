// The SIMD forward in the probability domain (probability.h) at T > 0, linear
// and affine gaps, inference and training (state kept), templated on the
// accumulate type A (float: float32, float16, bfloat16; double: float64, its
// own range rule and exp2 / log2, simd.h): one lane per pair, groups of W =
// 16 pairs, one row at a time, as forward_simd.h, but the cell is
// probability_cell on Z = 2^H: one exp2 (the weight of the score) and three
// adds / multiplies instead of three exp2 and a log2.
//
// Scaling. Each row is cut into chunks of kRenormSteps columns; a chunk keeps
// its values as z = Z 2^-o with one exponent o per lane, chosen before the
// chunk from the values it reads (the row above over the chunk, the diagonal
// and left neighbours before it): o is the exponent of the largest, so every
// input is at most 2 after scaling, and the range rule of probability.h
// bounds what the chunk's own steps add (no overflow, no weight flushed to
// zero). Columns past a lane's pair have weights 0 (scores -inf, gap weight
// masked): they hold the start term only and never set an exponent.
//
// Reductions, per chunk and lane: "max" keeps the largest Z as a mantissa in
// [1, 2) and an exponent, "soft" the sum of Z likewise; the score is
// exponent + log2(mantissa) at the end. A pair that the range rule does not
// admit (a score or gap outside it, inf or NaN) runs in the log domain.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "../probability.h"
#include "cell.h"
#include "checkpoints.h"
#include "setup.h"
#include "simd.h"

namespace softsw::cpu {

// Whether every gap score of pair b (extents m, n) is within the range
// rule's bound (kernel units) of its accumulate type; NaN is out of range.
template <typename T>
bool gaps_in_probability_range(const Setup<T>& su, const GapScores& gaps, int64_t b, int64_t m,
                               int64_t n) {
  using A = Acc<T>;
  using Range = ProbabilityRange<A>;
  if (gaps.data == nullptr) return Range::gap_ok(gaps.value * su.beta);
  const GapView<T> g = su.gap(gaps, b);
  const A gap_limit = static_cast<A>(Range::kMaxLog2Weight);
  for (int64_t i = 1; i <= m; ++i) {
    unsigned out = 0;  // branch-free: the loop vectorises
    if (const T* row = g.row(i)) {
      for (int64_t j = 0; j < n; ++j) out |= !(std::fabs(ld(row, j) * g.beta) <= gap_limit);
    } else {
      for (int64_t j = 1; j <= n; ++j) out |= !(std::fabs(g.at(i, j)) <= gap_limit);
    }
    if (out) return false;
  }
  return true;
}

// Whether pair b (extents m, n) fits the probability domain of its
// accumulate type: T > 0, every score and gap in kernel units within
// ProbabilityRange<Acc<T>>'s bound (constant or per-cell gaps, linear or
// affine).
template <typename T>
bool fits_probability_range(const Setup<T>& su, int64_t b, int64_t m, int64_t n) {
  using A = Acc<T>;
  using Range = ProbabilityRange<A>;
  if (su.hard) return false;
  const Problem& p = su.p;
  // As the CUDA kernels compare: in the accumulate type, NaN out of range.
  const A limit = static_cast<A>(Range::score_limit(su.beta));
  const T* S = static_cast<const T*>(p.scores) + b * su.MN;
  for (int64_t i = 0; i < m; ++i) {
    const T* row = S + i * su.N;
    unsigned out = 0;  // branch-free: the loop vectorises
    for (int64_t j = 0; j < n; ++j) out |= !(std::fabs(ld(row, j)) <= limit);
    if (out) return false;
  }
  return gaps_in_probability_range(su, p.gap_open, b, m, n) &&
         (!p.affine || gaps_in_probability_range(su, p.gap_extend, b, m, n));
}

// Whether the float passes run pair b in the probability domain (the
// forward, the affine backward from its checkpoints, checkpoints.h, and the
// scalar affine passes' row weights): a float accumulator and
// fits_probability_range. (A float64 pair that fits runs its forward there
// too, keeping the log-domain state, and its affine backward on the shares
// of those nodes: backward.cpp.)
template <typename T>
bool in_probability_range(const Setup<T>& su, int64_t b, int64_t m, int64_t n) {
  return std::is_same_v<Acc<T>, float> && fits_probability_range(su, b, m, n);
}

}  // namespace softsw::cpu

#if SOFTSW_CPU_VECTOR
namespace softsw::cpu::simd {

// Per-lane state of a probability-domain group, accumulate type A (float or
// double); integers as wide as A's lanes (IntOf).
template <typename A>
struct alignas(64) ProbabilityLanesOf {
  using Int = IntOf<A>;
  A mant[W];     // the reduction ("max": largest Z, "soft": sum of Z) ...
  Int expo[W];   // ... as mant * 2^expo, mant in [1, 2) (0: nothing yet)
  A best[W];     // with state, "max": the largest H = log2 Z ...
  Int bi[W];     // ... and its first cell (i, j) in row-major order; -1: none
  Int bj[W];
  A hmant[W];    // with state, affine "soft": the sum of 2^C as C was
  Int hexpo[W];  // rounded to the state (the seeds' scale), likewise
  Int m[W];      // lane extents (0 for an unused lane)
  Int n[W];

  // Lane l before its first cell: nothing reduced, no argmax.
  void reset(int l) {
    mant[l] = hmant[l] = best[l] = A(0);
    expo[l] = hexpo[l] = 0;
    bi[l] = bj[l] = -1;
  }
};
using ProbabilityLanes = ProbabilityLanesOf<float>;

// One row of a group: lane-interleaved buffers, col j at j * W (col 0
// unused), chunk q's exponent at q * W; scores and gap scores in kernel units
// at (j - 1) * W.
template <typename A>
struct ProbabilityRowsOf {
  using Int = IntOf<A>;
  const A* s;
  const A* g;        // nullptr: the constant gap
  const A* z_up;     // row i - 1 (affine: C)
  const Int* e_up;
  A* z;              // row i
  Int* e;
  A* h;              // with state: H = log2 Z of row i (kernel units; affine: C)
  A* h_u;            // with state, affine gaps: U and L of row i
  A* h_l;
  // A lone pair on column blocks (a lane's block starts at its col 1): each
  // lane's left neighbour Z[i, 0] and diagonal Z[i-1, 0] with their
  // exponents (W entries each); nullptr: the boundary (1). Affine gaps: the
  // diagonal is C, and the left neighbour is left_b, left_l below (left_z is
  // not read).
  const A* left_z;
  const Int* left_e;
  const A* diag_z;
  const Int* diag_e;
  // Affine gaps: the A and U nodes of row i - 1 and of row i (scaled as z).
  const A* a_up;
  const A* u_up;
  A* a;
  A* u;
  // The next row's inputs and outputs, one step per column (nullptr: none).
  RowPrefetcher* prefetch = nullptr;
  // Affine gaps with per-cell gap scores: the extend scores (`g`: the open
  // scores), kernel units at (j - 1) * W, -inf past a lane's pair.
  const A* g_ext = nullptr;
  // Affine gaps, kKeepShares: the shares of row i's cells (start, D, U, L
  // over C; `h`: C, for "soft" seeds).
  A *share_start = nullptr, *share_d = nullptr, *share_u = nullptr, *share_l = nullptr;
  // Affine gaps on column blocks: each lane's left neighbour's B and L nodes
  // (exponent left_e; nullptr: the boundary, B = 1 and L = 0), and, written
  // at the end of the row, its B and L at col n at the last chunk's exponent
  // (what the next block reads as its left neighbour; nullptr: not kept).
  const A *left_b = nullptr, *left_l = nullptr;
  A *last_b = nullptr, *last_l = nullptr;
  // Affine gaps on column blocks, "soft": each chunk's sum of Z (and with
  // state of 2^C as kept, at the chunk's exponent) at q * W, instead of
  // folded into the lanes' reductions (the caller folds a row's chunks in a
  // group's order). nullptr: folded.
  A *chunk_sum = nullptr, *chunk_sum_h = nullptr;
};
using ProbabilityRows = ProbabilityRowsOf<float>;

// The constant gap weights' exponents (kernel units): open (linear: the gap)
// and extend.
template <typename A>
struct ProbabilityGapsOf {
  A open, extend;
};
using ProbabilityGaps = ProbabilityGapsOf<float>;

// A problem's constant gaps as the rows read them (0 where gap tensors give
// them per cell; extend 0 for linear gaps).
template <typename A, typename T>
ProbabilityGapsOf<A> constant_gaps(const Setup<T>& su) {
  const Problem& p = su.p;
  const bool tensor = p.has_gap_tensor();
  return {tensor ? A(0) : static_cast<A>(p.gap_open.value) * su.beta,
          p.affine && !tensor ? static_cast<A>(p.gap_extend.value) * su.beta : A(0)};
}

// A chunk's max or sum `red` (exponent o) folded into a lane's reduction
// best_m * 2^best_e (best_m in [1, 2), or 0 before the first cell).
template <int VL, bool SOFT, typename A = float>
SOFTSW_VINLINE void fold_chunk(typename Vec<A, VL>::F red, typename Vec<A, VL>::I o,
                               typename Vec<A, VL>::F& best_m, typename Vec<A, VL>::I& best_e) {
  using X = Vec<A, VL>;
  using F = typename X::F;
  using I = typename X::I;
  const F zero = X::splat(A(0));
  const I has = red > zero;
  const F rm = X::sel(has, X::mantissa(red), zero);
  const I re = X::seli(has, X::exponent(red) + o, best_e);
  if constexpr (SOFT) {
    const I top = X::imax(best_e, re);
    const F sum = best_m * X::pow2(best_e - top) + rm * X::pow2(re - top);
    const I has_sum = sum > zero;
    best_m = X::sel(has_sum, X::mantissa(sum), zero);
    best_e = X::seli(has_sum, top + X::exponent(sum), best_e);
  } else {
    const I upd = has & ((re > best_e) | ((re == best_e) & (rm > best_m)));
    best_m = X::sel(upd, rm, best_m);
    best_e = X::seli(upd, re, best_e);
  }
}

// H = log2 of a scaled value z 2^o; -inf where z flushed to zero (a U or L
// node far below its chunk, whose weights are then zero to rounding anyway).
template <int VL, typename A = float>
SOFTSW_VINLINE typename Vec<A, VL>::F log2_scaled(typename Vec<A, VL>::F z,
                                                  typename Vec<A, VL>::I o) {
  using X = Vec<A, VL>;
  return X::sel(z > X::splat(A(0)), X::log2(z) + X::to_float(o), X::splat(-kInf<A>));
}

// What a row keeps besides the values the next row reads: nothing
// (inference), log2 of its nodes (a training forward; STATE below), or the
// shares of its cells' nodes (probability.h's AffineShares: the affine
// backward's rows, run again from checkpoints, reverse_affine_simd.h).
enum RowKeeps { kKeepNothing = 0, kKeepLogs = 1, kKeepShares = 2 };

// MASKED: lanes differ in extents, so cells past a lane's pair are masked out
// of its reduction and its gap weight; unmasked (every busy lane has the
// group's extents) the idle lanes compute garbage that nobody reads. STATE
// (a training forward): also H = log2 Z of every cell, and for "max" the
// largest H and its first cell, as the log-domain forward keeps them.
template <typename A, int VL, bool SOFT, bool GAP_TENSOR, bool MASKED, bool STATE, int LANES = W>
SOFTSW_VINLINE void probability_row_body(const ProbabilityRowsOf<A>& r, ProbabilityGapsOf<A> gap,
                                         int32_t n, int32_t i, ProbabilityLanesOf<A>& ln) {
  using X = Vec<A, VL>;
  using F = typename X::F;
  using I = typename X::I;
  constexpr int K = LANES / VL;
  constexpr int32_t C = ProbabilityRange<A>::kRenormSteps;
  const F zero = X::splat(A(0)), one = X::splat(A(1));
  const F c_const = X::exp2(X::splat(gap.open));
  I rowok[K], nl[K], el[K], ed[K], best_e[K], bi[K], bj[K];
  F zl[K], zd[K], best_m[K], best_h[K];
  const I iv = X::splati(i);
  for (int k = 0; k < K; ++k) {
    if constexpr (STATE && !SOFT) {
      best_h[k] = X::load(ln.best + k * VL);
      bi[k] = X::loadi(ln.bi + k * VL);
      bj[k] = X::loadi(ln.bj + k * VL);
    }
    rowok[k] = X::splati(i) <= X::loadi(ln.m + k * VL);
    nl[k] = X::loadi(ln.n + k * VL);
    zl[k] = zd[k] = one;  // Z[i, 0] = Z[i-1, 0] = 1, exponent 0
    el[k] = ed[k] = X::splati(0);
    if (r.left_z) {
      zl[k] = X::load(r.left_z + k * VL);
      el[k] = X::loadi(r.left_e + k * VL);
      zd[k] = X::load(r.diag_z + k * VL);
      ed[k] = X::loadi(r.diag_e + k * VL);
    }
    best_m[k] = X::load(ln.mant + k * VL);
    best_e[k] = X::loadi(ln.expo + k * VL);
  }
  for (int32_t j0 = 1, q = 0; j0 <= n; j0 += C, ++q) {
    const int32_t j1 = std::min(j0 + C - 1, n);
    if (r.prefetch) r.prefetch->steps(j1 - j0 + 1);
    for (int k = 0; k < K; ++k) {
      const int64_t lane = k * VL;
      const I eu = X::loadi(r.e_up + q * W + lane);
      F mu = X::load(r.z_up + j0 * W + lane);
      for (int32_t j = j0 + 1; j <= j1; ++j) mu = X::vmax(mu, X::load(r.z_up + j * W + lane));
      I o = X::imax(eu + X::exponent(mu), X::imax(ed[k] + X::exponent(zd[k]), el[k] + X::exponent(zl[k])));
      o = X::imax(o, X::splati(0));
      const F fu = X::pow2(eu - o), start = X::pow2(-o);
      Packed<A, VL> diag = zd[k] * X::pow2(ed[k] - o), left = zl[k] * X::pow2(el[k] - o);
      F red = zero;  // the chunk's max or sum over the lane's cells
      for (int32_t j = j0; j <= j1; ++j) {
        const F up = X::load(r.z_up + j * W + lane) * fu;
        const F w = X::exp2(X::load(r.s + (j - 1) * W + lane));
        const I inside = X::splati(j) <= nl[k];
        F c;
        if constexpr (GAP_TENSOR) c = X::exp2(X::load(r.g + (j - 1) * W + lane));
        else if constexpr (MASKED) c = X::sel(inside, c_const, zero);
        else c = c_const;
        const Packed<A, VL> z = probability_cell<Packed<A, VL>>(start, w, diag, c, up, left);
        X::store(r.z + j * W + lane, z.v);
        diag = up;
        left = z;
        if constexpr (STATE) {
          const F h = log2_scaled<VL, A>(z.v, o);
          X::store(r.h + j * W + lane, h);
          if constexpr (!SOFT) {
            I upd = h > best_h[k];
            if constexpr (MASKED) upd &= rowok[k] & inside;
            const I jv = X::splati(j);
            best_h[k] = X::sel(upd, h, best_h[k]);
            bi[k] = X::seli(upd, iv, bi[k]);
            bj[k] = X::seli(upd, jv, bj[k]);
          }
        }
        F counted = z.v;
        if constexpr (MASKED) counted = X::sel(rowok[k] & inside, z.v, zero);
        if constexpr (SOFT) red += counted;
        else red = X::vmax(red, counted);
      }
      X::storei(r.e + q * W + lane, o);
      zd[k] = X::load(r.z_up + j1 * W + lane);
      ed[k] = eu;
      zl[k] = left.v;
      el[k] = o;
      fold_chunk<VL, SOFT, A>(red, o, best_m[k], best_e[k]);  // with state too: the score (below)
    }
  }
  for (int k = 0; k < K; ++k) {
    X::store(ln.mant + k * VL, best_m[k]);
    X::storei(ln.expo + k * VL, best_e[k]);
    if constexpr (STATE && !SOFT) {
      X::store(ln.best + k * VL, best_h[k]);
      X::storei(ln.bi + k * VL, bi[k]);
      X::storei(ln.bj + k * VL, bj[k]);
    }
  }
}

// The affine-gap cell in the probability domain (the nodes of recurrence.h's
// AffineCell as Z = 2^node, boundary A = B = C = 1, U = L = D = 0):
//   D = w C[i-1,j-1]            U = o A[i-1,j] + e U[i-1,j]
//   L = o B[i,j-1] + e L[i,j-1]  A = 1 + D + L,  B = 1 + D + U,  C = 1 + D + U + L
// with w = 2^s, o = 2^open, e = 2^extend; chunks and exponents as the linear
// row (C bounds A and U from above, and B + L = C on the left).
template <typename A, int VL, bool SOFT, bool GAP_TENSOR, bool MASKED, int KEEP, int LANES = W>
SOFTSW_VINLINE void probability_affine_row_body(const ProbabilityRowsOf<A>& r,
                                                ProbabilityGapsOf<A> gap, int32_t n, int32_t i,
                                                ProbabilityLanesOf<A>& ln) {
  constexpr bool STATE = KEEP == kKeepLogs, SHARES = KEEP == kKeepShares;
  using X = Vec<A, VL>;
  using F = typename X::F;
  using I = typename X::I;
  constexpr int K = LANES / VL;
  constexpr int32_t C = ProbabilityRange<A>::kRenormSteps;
  const F zero = X::splat(A(0)), one = X::splat(A(1));
  const F open_const = X::exp2(X::splat(gap.open)), extend_const = X::exp2(X::splat(gap.extend));
  I rowok[K], nl[K], el[K], ed[K], best_e[K], bi[K], bj[K];
  F bl[K], ll[K], cd[K], best_m[K], best_h[K], h_m[K];
  I h_e[K];
  const I iv = X::splati(i);
  for (int k = 0; k < K; ++k) {
    if constexpr (STATE && !SOFT) {
      best_h[k] = X::load(ln.best + k * VL);
      bi[k] = X::loadi(ln.bi + k * VL);
      bj[k] = X::loadi(ln.bj + k * VL);
    }
    if constexpr (STATE && SOFT) {
      h_m[k] = X::load(ln.hmant + k * VL);
      h_e[k] = X::loadi(ln.hexpo + k * VL);
    }
    rowok[k] = X::splati(i) <= X::loadi(ln.m + k * VL);
    nl[k] = X::loadi(ln.n + k * VL);
    cd[k] = bl[k] = one;  // C[i-1, 0] = B[i, 0] = 1, L[i, 0] = 0, exponent 0
    ll[k] = zero;
    el[k] = ed[k] = X::splati(0);
    if (r.left_b) {  // the block to the left (its last column)
      bl[k] = X::load(r.left_b + k * VL);
      ll[k] = X::load(r.left_l + k * VL);
      el[k] = X::loadi(r.left_e + k * VL);
      cd[k] = X::load(r.diag_z + k * VL);
      ed[k] = X::loadi(r.diag_e + k * VL);
    }
    best_m[k] = X::load(ln.mant + k * VL);
    best_e[k] = X::loadi(ln.expo + k * VL);
  }
  for (int32_t j0 = 1, q = 0; j0 <= n; j0 += C, ++q) {
    const int32_t j1 = std::min(j0 + C - 1, n);
    if (r.prefetch) r.prefetch->steps(j1 - j0 + 1);
    for (int k = 0; k < K; ++k) {
      const int64_t lane = k * VL;
      const I eu = X::loadi(r.e_up + q * W + lane);
      F mu = X::load(r.z_up + j0 * W + lane);
      for (int32_t j = j0 + 1; j <= j1; ++j) mu = X::vmax(mu, X::load(r.z_up + j * W + lane));
      I o = X::imax(eu + X::exponent(mu),
                    X::imax(ed[k] + X::exponent(cd[k]), el[k] + X::exponent(bl[k] + ll[k])));
      o = X::imax(o, X::splati(0));
      const F fu = X::pow2(eu - o), start = X::pow2(-o), fl = X::pow2(el[k] - o);
      F diag = cd[k] * X::pow2(ed[k] - o), b = bl[k] * fl, l = ll[k] * fl;
      F red = zero;
      [[maybe_unused]] F red_h = zero;  // the sum of 2^(C - o) as C is kept
      [[maybe_unused]] const F of = X::to_float(o);
      for (int32_t j = j0; j <= j1; ++j) {
        const int64_t c = j * W + lane;
        const F w = X::exp2(X::load(r.s + c - W));
        F ow = open_const, ew = extend_const;
        const I inside = X::splati(j) <= nl[k];
        if constexpr (GAP_TENSOR) {  // -inf past the lane's pair: weights 0 there
          ow = X::exp2(X::load(r.g + c - W));
          ew = X::exp2(X::load(r.g_ext + c - W));
        } else if constexpr (MASKED) {
          ow = X::sel(inside, ow, zero);
          ew = X::sel(inside, ew, zero);
        }
        const F diag_cell = diag, d = w * diag;
        const F u = ow * (X::load(r.a_up + c) * fu) + ew * (X::load(r.u_up + c) * fu);
        l = ow * b + ew * l;
        const F sd = start + d;
        b = sd + u;
        const F z = b + l;
        X::store(r.z + c, z);
        X::store(r.a + c, sd + l);
        X::store(r.u + c, u);
        diag = X::load(r.z_up + c) * fu;
        if constexpr (SHARES) {
          // Each node over C, all at the chunk's scale; a C flushed to zero
          // (far below its chunk) has a boundary's shares and carries nothing.
          // D's share is not d * inv: a second use of the product d would let
          // the compiler fuse w * diag into the add above in one of these row
          // functions and not in the other (the training forward's), and
          // this run of the forward must repeat that one bit for bit.
          const I live = z > zero;
          const F inv = one / z;
          X::store(r.share_start + c, X::sel(live, start * inv, one));
          X::store(r.share_d + c, X::sel(live, w * (diag_cell * inv), zero));
          X::store(r.share_u + c, X::sel(live, u * inv, zero));
          X::store(r.share_l + c, X::sel(live, l * inv, zero));
          if constexpr (SOFT) X::store(r.h + c, log2_scaled<VL, A>(z, o));  // the seeds
          continue;
        }
        if constexpr (STATE) {
          const F h = log2_scaled<VL, A>(z, o);
          X::store(r.h + c, h);
          if (r.h_u) {  // (a checkpointing forward needs C alone)
            X::store(r.h_u + c, log2_scaled<VL, A>(u, o));
            X::store(r.h_l + c, log2_scaled<VL, A>(l, o));
          }
          if constexpr (SOFT) {
            F e2 = X::exp2(h - of);
            if constexpr (MASKED) e2 = X::sel(rowok[k] & inside, e2, zero);
            red_h += e2;
          } else {
            I upd = h > best_h[k];
            if constexpr (MASKED) upd &= rowok[k] & inside;
            best_h[k] = X::sel(upd, h, best_h[k]);
            bi[k] = X::seli(upd, iv, bi[k]);
            bj[k] = X::seli(upd, X::splati(j), bj[k]);
          }
        }
        F counted = z;
        if constexpr (MASKED) counted = X::sel(rowok[k] & inside, z, zero);
        if constexpr (SOFT) red += counted;
        else red = X::vmax(red, counted);
      }
      X::storei(r.e + q * W + lane, o);
      cd[k] = X::load(r.z_up + j1 * W + lane);
      ed[k] = eu;
      bl[k] = b;
      ll[k] = l;
      el[k] = o;
      if (SOFT && r.chunk_sum) {
        X::store(r.chunk_sum + q * W + lane, red);
        if constexpr (STATE) X::store(r.chunk_sum_h + q * W + lane, red_h);
        continue;
      }
      fold_chunk<VL, SOFT, A>(red, o, best_m[k], best_e[k]);  // with state too: the score (below)
      if constexpr (STATE && SOFT) fold_chunk<VL, true, A>(red_h, o, h_m[k], h_e[k]);
    }
  }
  for (int k = 0; k < K; ++k) {
    X::store(ln.mant + k * VL, best_m[k]);
    X::storei(ln.expo + k * VL, best_e[k]);
    if constexpr (STATE && !SOFT) {
      X::store(ln.best + k * VL, best_h[k]);
      X::storei(ln.bi + k * VL, bi[k]);
      X::storei(ln.bj + k * VL, bj[k]);
    }
    if constexpr (STATE && SOFT) {
      X::store(ln.hmant + k * VL, h_m[k]);
      X::storei(ln.hexpo + k * VL, h_e[k]);
    }
    if (r.last_b) {
      X::store(r.last_b + k * VL, bl[k]);
      X::store(r.last_l + k * VL, ll[k]);
    }
  }
}

template <typename A>
using ProbabilityRowFnOf = void (*)(const ProbabilityRowsOf<A>&, ProbabilityGapsOf<A>, int32_t,
                                    int32_t, ProbabilityLanesOf<A>&);
using ProbabilityRowFn = ProbabilityRowFnOf<float>;

// The kinds of probability-domain rows.
enum ProbabilityKind {
  kLinearConstantGap = 0,
  kLinearGapTensor = 1,
  kAffineConstantGaps = 2,
  kAffineGapTensors = 3
};

// A row of VBYTES-byte vectors (16: the baseline, 32: AVX2 and AVX-512VL):
// VBYTES / sizeof(A) lanes to a vector, 4 or 8 floats, 2 or 4 doubles.
template <typename A, int VBYTES, int KIND, bool SOFT, bool MASKED, int KEEP, int LANES>
SOFTSW_VINLINE void probability_row_of(const ProbabilityRowsOf<A>& r, ProbabilityGapsOf<A> gap,
                                       int32_t n, int32_t i, ProbabilityLanesOf<A>& ln) {
  constexpr int VL = VBYTES / static_cast<int>(sizeof(A));
  if constexpr (KIND == kAffineConstantGaps || KIND == kAffineGapTensors)
    probability_affine_row_body<A, VL, SOFT, KIND == kAffineGapTensors, MASKED, KEEP, LANES>(
        r, gap, n, i, ln);
  else  // (linear rows keep logs or nothing)
    probability_row_body<A, VL, SOFT, KIND == kLinearGapTensor, MASKED, KEEP == kKeepLogs, LANES>(
        r, gap, n, i, ln);
}

template <typename A, int KIND, bool SOFT, bool MASKED, int KEEP, int LANES>
void probability_row_baseline(const ProbabilityRowsOf<A>& r, ProbabilityGapsOf<A> gap, int32_t n,
                              int32_t i, ProbabilityLanesOf<A>& ln) {
  probability_row_of<A, 16, KIND, SOFT, MASKED, KEEP, LANES>(r, gap, n, i, ln);
}
#if defined(__x86_64__)
template <typename A, int KIND, bool SOFT, bool MASKED, int KEEP, int LANES>
SOFTSW_TARGET_AVX2 void probability_row_avx2(const ProbabilityRowsOf<A>& r,
                                             ProbabilityGapsOf<A> gap, int32_t n, int32_t i,
                                             ProbabilityLanesOf<A>& ln) {
  probability_row_of<A, 32, KIND, SOFT, MASKED, KEEP, LANES>(r, gap, n, i, ln);
}
template <typename A, int KIND, bool SOFT, bool MASKED, int KEEP, int LANES>
SOFTSW_TARGET_AVX512 void probability_row_avx512(const ProbabilityRowsOf<A>& r,
                                                 ProbabilityGapsOf<A> gap, int32_t n, int32_t i,
                                                 ProbabilityLanesOf<A>& ln) {
  probability_row_of<A, 32, KIND, SOFT, MASKED, KEEP, LANES>(r, gap, n, i, ln);
}
#endif

template <typename A, int KIND, bool SOFT, bool MASKED, int KEEP, int LANES>
ProbabilityRowFnOf<A> pick_probability_row() {
#if defined(__x86_64__)
  switch (isa_level()) {
    case 2: return &probability_row_avx512<A, KIND, SOFT, MASKED, KEEP, LANES>;
    case 1: return &probability_row_avx2<A, KIND, SOFT, MASKED, KEEP, LANES>;
    default: break;
  }
#endif
  return &probability_row_baseline<A, KIND, SOFT, MASKED, KEEP, LANES>;
}

// The row functions of one kind and what it keeps: [narrow][soft][masked].
// Narrow rows compute the first W / 2 lanes only: a group of at most W / 2
// pairs (a lone pair, 16 pairs on two threads) does half the work.
template <typename A>
struct ProbabilityRowFnsOf {
  ProbabilityRowFnOf<A> fn[2][2][2];
  ProbabilityRowFnOf<A> of(int count, bool soft, bool masked) const {
    return fn[count <= W / 2][soft][masked];
  }
};
using ProbabilityRowFns = ProbabilityRowFnsOf<float>;
template <typename A, int KIND, int KEEP>
ProbabilityRowFnsOf<A> pick_probability_rows() {
  ProbabilityRowFnsOf<A> f;
  f.fn[0][0][0] = pick_probability_row<A, KIND, false, false, KEEP, W>();
  f.fn[0][0][1] = pick_probability_row<A, KIND, false, true, KEEP, W>();
  f.fn[0][1][0] = pick_probability_row<A, KIND, true, false, KEEP, W>();
  f.fn[0][1][1] = pick_probability_row<A, KIND, true, true, KEEP, W>();
  f.fn[1][0][0] = pick_probability_row<A, KIND, false, false, KEEP, W / 2>();
  f.fn[1][0][1] = pick_probability_row<A, KIND, false, true, KEEP, W / 2>();
  f.fn[1][1][0] = pick_probability_row<A, KIND, true, false, KEEP, W / 2>();
  f.fn[1][1][1] = pick_probability_row<A, KIND, true, true, KEEP, W / 2>();
  return f;
}
// The forward's rows of a problem, accumulate type A (the float rows unless
// asked): with state they keep H (linear) or C, U, L (affine).
template <typename A = float>
ProbabilityRowFnsOf<A> pick_probability_rows(const Problem& p, bool state) {
  if (p.affine)
    return p.has_gap_tensor()
               ? (state ? pick_probability_rows<A, kAffineGapTensors, kKeepLogs>()
                        : pick_probability_rows<A, kAffineGapTensors, kKeepNothing>())
               : (state ? pick_probability_rows<A, kAffineConstantGaps, kKeepLogs>()
                        : pick_probability_rows<A, kAffineConstantGaps, kKeepNothing>());
  if (p.gap_open.data)
    return state ? pick_probability_rows<A, kLinearGapTensor, kKeepLogs>()
                 : pick_probability_rows<A, kLinearGapTensor, kKeepNothing>();
  return state ? pick_probability_rows<A, kLinearConstantGap, kKeepLogs>()
               : pick_probability_rows<A, kLinearConstantGap, kKeepNothing>();
}
// The affine rows that keep their cells' shares.
inline ProbabilityRowFns pick_affine_share_rows(const Problem& p) {
  return p.has_gap_tensor()
             ? pick_probability_rows<float, kAffineGapTensors, kKeepShares>()
             : pick_probability_rows<float, kAffineConstantGaps, kKeepShares>();
}

// The rows a row function writes besides the next row's inputs (nullptr:
// not kept): log2 of C (h), U and L (kKeepLogs), or the shares of the cells
// (kKeepShares; h: C for "soft" seeds).
template <typename A>
struct KeptRowsOf {
  A *h = nullptr, *h_u = nullptr, *h_l = nullptr;
  A *share_start = nullptr, *share_d = nullptr, *share_u = nullptr, *share_l = nullptr;
};
using KeptRows = KeptRowsOf<float>;

// Lane l's gap scores of row rows[l] of its gap view view(l), columns
// first[l] + 1 .. first[l] + n[l] (n[l] = 0: the lane is skipped), into `dst`
// at j * W + l in kernel units: through the row transposes where every row is
// contiguous (the same bits as GapView::at), else cell by cell.
template <typename T, typename A, typename ViewOf>
void gather_gap_rows(ViewOf view, const int64_t* rows, const int64_t* first, const int64_t* n,
                     int count, A* dst) {
  const T* src[W] = {};
  bool contiguous = true;
  for (int l = 0; l < count; ++l)
    if (n[l] > 0) contiguous &= (src[l] = view(l).row(rows[l])) != nullptr;
  if constexpr (std::is_same_v<A, float>) {
    if (contiguous) {
      for (int l = 0; l < count; ++l)
        if (src[l]) src[l] += first[l];
      interleave_rows_of(dst, src, n, count, view(0).beta);
      return;
    }
  }
  for (int l = 0; l < count; ++l)
    for (int64_t j = 0; j < n[l]; ++j) dst[j * W + l] = view(l).at(rows[l], first[l] + j + 1);
}

// The rows of a probability-domain group of up to W pairs (valid, non-empty,
// in range): each lane's extents and inputs, the lane-interleaved state of
// row i - 1 (z, and for affine gaps A and U, with the chunk exponents) and
// row i, and row i's scores and gap scores. The forward runs it from row 0;
// the affine backward runs it again from a checkpoint over one block of rows
// (checkpoints.h). A lane's values inside its pair depend only on its pair and
// on the columns the chunks cover, so a run over `cols` columns, a multiple of
// kRenormSteps or every lane's width, repeats the forward bit for bit.
template <typename T>
class ProbabilityGroup {
 public:
  using A = Acc<T>;
  using Int = IntOf<A>;
  static constexpr int64_t C = ProbabilityRange<A>::kRenormSteps;

  // `rows`, `cols`: the extent to compute (0: the lanes' largest); a lane's
  // columns past `cols` are left out.
  ProbabilityGroup(const Setup<T>& su, const int64_t* pairs, int count, int64_t rows = 0,
                   int64_t cols = 0)
      : su_(su), count_(count) {
    const Problem& p = su.p;
    for (int l = 0; l < W; ++l) {
      int64_t m = 0, n = 0;
      if (l < count) {
        su.extents(pairs[l], m, n);
        S_[l] = static_cast<const T*>(p.scores) + pairs[l] * su.MN;
        gv_[l] = su.gap(p.gap_open, pairs[l]);
        if (p.affine) ge_[l] = su.gap(p.gap_extend, pairs[l]);
      }
      ln.m[l] = static_cast<Int>(m);
      ln.n[l] = static_cast<Int>(n);
      ln.reset(l);
      lane_n[l] = n;
      mg = std::max(mg, m);
      ng = std::max(ng, n);
    }
    if (rows > 0) mg = rows;
    if (cols > 0) ng = cols;
    for (int l = 0; l < count; ++l) {  // columns past ng are not computed
      lane_n[l] = std::min(lane_n[l], ng);
      ln.n[l] = static_cast<Int>(lane_n[l]);
    }
    for (int l = 0; l < count; ++l) masked |= ln.m[l] < mg || ln.n[l] < ng;
    gap_tensor_ = p.has_gap_tensor();
    gaps_ = constant_gaps<A>(su);
    stride = (ng + 1) * W;
    chunks = (ng + C - 1) / C + 1;
  }

  // Elements (of A) bind() takes: the rows (z, scores, gap scores; affine: A, U, the
  // extend scores) and the exponents of two rows.
  int64_t floats() const { return (su_.p.affine ? 9 : 4) * stride + 2 * chunks * W; }

  // Lays the rows out from `base` (floats() of A, 64-byte aligned) and
  // starts at row 0: C = A = 1, exponent 0; scores and gap scores past a
  // lane's pair -inf (weights 0) for good.
  void bind(A* base) {
    A* next = base;
    auto take = [&]() {
      A* a = next;
      next += stride;
      return a;
    };
    z_up = take();
    z_ = take();
    s_ = take();
    g_ = take();
    if (su_.p.affine) {
      a_up = take();
      a_ = take();
      u_up = take();
      u_ = take();
      g_ext_ = take();
    }
    e_up = reinterpret_cast<Int*>(next);
    e_ = e_up + chunks * W;
    start();
    std::fill(s_, s_ + ng * W, -kInf<A>);
    if (gap_tensor_) {
      std::fill(g_, g_ + ng * W, -kInf<A>);
      if (su_.p.affine) std::fill(g_ext_, g_ext_ + ng * W, -kInf<A>);
    }
  }

  // Row 0: C = A = 1 (U = 0), exponent 0.
  void start() { set_up_rows(A(1)); }

  // Row state all zero (z, A, U, exponents): what a checkpoint restored into
  // it (checkpoints.h) leaves past its pair's columns and chunks.
  void clear() { set_up_rows(A(0)); }

  // Row i's scores (kernel units) and gap scores into `s_` and the gap rows,
  // for the lanes whose pair has row i (the rest keep what they hold).
  void gather(int64_t i) {
    const int64_t N = su_.N;
    if constexpr (std::is_same_v<T, float>) {
      const float* src[W] = {};
      for (int l = 0; l < count_; ++l) src[l] = i <= ln.m[l] ? S_[l] + (i - 1) * N : nullptr;
      interleave_rows(s_, src, lane_n, count_, su_.beta);
    } else {
      for (int l = 0; l < count_; ++l) {
        if (i > ln.m[l]) continue;
        const T* src = S_[l] + (i - 1) * N;
        for (int64_t j = 0; j < ln.n[l]; ++j) s_[j * W + l] = ld(src, j) * su_.beta;
      }
    }
    if (gap_tensor_) {
      gather_gap_row(gv_, i, g_);
      if (su_.p.affine) gather_gap_row(ge_, i, g_ext_);
    }
  }

  // Row i (its inputs gathered) from row i - 1; after it the `_up` rows hold
  // row i. `keep`: the rows it writes besides (as the row function keeps).
  void step(ProbabilityRowFnOf<A> row, int64_t i, const KeptRowsOf<A>& keep,
            RowPrefetcher* next) {
    ProbabilityRowsOf<A> r{s_,      gap_tensor_ ? g_ : nullptr, z_up,    e_up,    z_,   e_,
                      keep.h,  keep.h_u,                   keep.h_l, nullptr, nullptr, nullptr,
                      nullptr, a_up,                       u_up,    a_,      u_,   next,
                      gap_tensor_ ? g_ext_ : nullptr};
    r.share_start = keep.share_start;
    r.share_d = keep.share_d;
    r.share_u = keep.share_u;
    r.share_l = keep.share_l;
    row(r, gaps_, static_cast<int32_t>(ng), static_cast<int32_t>(i), ln);
    std::swap(z_up, z_);
    std::swap(e_up, e_);
    std::swap(a_up, a_);
    std::swap(u_up, u_);
  }

  ProbabilityLanesOf<A> ln;
  int64_t lane_n[W] = {};
  int64_t mg = 0, ng = 0;  // rows and columns computed
  bool masked = false;     // a lane's pair smaller than (mg, ng): the masked rows
  int64_t stride = 0, chunks = 0;
  // Row i - 1 before step(i), row i after it: scaled C (z), A, U (affine
  // gaps) at j * W (col 0 unused), chunk q's exponent at q * W.
  A *z_up = nullptr, *a_up = nullptr, *u_up = nullptr;
  Int* e_up = nullptr;

 private:
  // Every column of row i - 1: z = A = `za`, U = 0, exponents 0.
  void set_up_rows(A za) {
    std::fill(z_up, z_up + stride, za);
    std::fill(e_up, e_up + chunks * W, 0);
    if (a_up) {
      std::fill(a_up, a_up + stride, za);
      std::fill(u_up, u_up + stride, A(0));
    }
  }

  // Row i of the lanes' gap scores (kernel units) into `dst`, the lanes whose
  // pair has row i; the rest keep what they hold.
  void gather_gap_row(const GapView<T>* g, int64_t i, A* dst) {
    int64_t rows[W], first[W] = {}, n[W];
    for (int l = 0; l < count_; ++l) {
      rows[l] = i;
      n[l] = i <= ln.m[l] ? lane_n[l] : 0;
    }
    gather_gap_rows<T>([&](int l) -> const GapView<T>& { return g[l]; }, rows, first, n, count_,
                       dst);
  }

  const Setup<T>& su_;
  int count_;
  const T* S_[W] = {};
  GapView<T> gv_[W], ge_[W];
  bool gap_tensor_ = false;
  ProbabilityGapsOf<A> gaps_{};
  A* s_ = nullptr;  // the gathered row's scores, col j at (j - 1) * W
  A *z_ = nullptr, *a_ = nullptr, *u_ = nullptr, *g_ = nullptr, *g_ext_ = nullptr;
  Int* e_ = nullptr;
};

// "soft" with state: the seeds' scale 1 / sum 2^(C - total) over a pair's
// cells (the C the backward computes again), from the sum of Z (the total)
// and of 2^C as kept, each as mant 2^expo (mant 0: none).
inline float soft_seed_scale(float mant, int32_t expo, float hmant, int32_t hexpo) {
  if (!(hmant > 0.0f && mant > 0.0f)) return 1.0f;
  return static_cast<float>(std::exp2(
      -(std::log2(double(hmant)) - std::log2(double(mant)) + double(hexpo - expo))));
}

// One group of up to W pairs (valid, non-empty, in range), start to finish:
// writes score, total, argmax, and `hidden` when the forward keeps state
// (rows_fn must then be the STATE row functions): H (linear gaps), the C, U,
// L planes (affine gaps, `checkpoints` false) or an affine pair's checkpoints
// (checkpoints.h; float accumulate only). `mem`: the group's rows, of the
// accumulate type.
template <typename T>
void probability_group(const Setup<T>& su, const int64_t* pairs, int count,
                       const ProbabilityRowFnsOf<Acc<T>>& rows_fn, const ForwardOutputs& out,
                       std::vector<Acc<T>>& mem, bool checkpoints) {
  using A = Acc<T>;
  constexpr bool kFloat = std::is_same_v<A, float>;
  const Problem& p = su.p;
  const int64_t N = su.N;
  ProbabilityGroup<T> grp(su, pairs, count);
  ProbabilityLanesOf<A>& ln = grp.ln;
  const int64_t mg = grp.mg, ng = grp.ng, stride = grp.stride;
  const ProbabilityRowFnOf<A> row = rows_fn.of(count, su.soft_reduction, grp.masked);
  A* hidden = static_cast<A*>(out.hidden);
  checkpoints = kFloat && checkpoints;
  const bool planes = hidden && !checkpoints;
  // The group's rows, then the state rows of row i (H, or C, U, L).
  const int64_t state_rows = hidden ? (p.affine ? 3 : 1) : 0;
  mem.resize(static_cast<size_t>(grp.floats() + state_rows * stride + 64 / sizeof(A)));
  A* base = mem.data();
  while (reinterpret_cast<uintptr_t>(base) % 64 != 0) ++base;
  grp.bind(base);
  A* hb = hidden ? base + grp.floats() : nullptr;
  A* hb_u = planes && p.affine ? hb + stride : nullptr;
  A* hb_l = planes && p.affine ? hb + 2 * stride : nullptr;
  A* hid[W] = {};
  const AffineCheckpoints ck(N);
  for (int l = 0; hidden && l < count; ++l) {
    hid[l] = hidden + pairs[l] * su.planes * su.MN;
    if (planes)
      for (int64_t k = 0; k < su.planes; ++k)
        fill_outside<A>(hid[l] + k * su.MN, su.M, N, ln.m[l], ln.n[l], A(0));
    else if constexpr (kFloat)
      ck.clear(hid[l], su.planes * su.MN, su.p.batch * su.planes * su.MN);
  }
  for (int64_t i = 1; i <= mg; ++i) {
    // The next row's scores (and its H, or C, U, L), spread over this row
    // for float scores, else in one burst.
    RowPrefetcher next;
    if (std::is_same_v<T, float>) {
      for (int l = 0; l < count; ++l) {
        if (i >= ln.m[l]) continue;
        next.add(static_cast<const T*>(p.scores) + pairs[l] * su.MN + i * N);
        if (planes)
          for (int64_t k = 0; k < su.planes; ++k) next.add(hid[l] + k * su.MN + i * N);
      }
      next.pace(ng, ng);
    } else {
      const T* rows_next[W];
      for (int l = 0; l < count; ++l)
        rows_next[l] = i < ln.m[l] ? static_cast<const T*>(p.scores) + pairs[l] * su.MN + i * N
                                   : nullptr;
      prefetch_rows(rows_next, count, ng);
    }
    grp.gather(i);
    KeptRowsOf<A> keep;
    keep.h = hb;
    keep.h_u = hb_u;
    keep.h_l = hb_l;
    grp.step(row, i, keep, &next);
    if (planes) {
      A* dst[W];
      for (int l = 0; l < count; ++l) dst[l] = i <= ln.m[l] ? hid[l] + (i - 1) * N : nullptr;
      deinterleave_rows(dst, hb + W, grp.lane_n, count);
      if (p.affine) {
        for (int l = 0; l < count; ++l)
          if (dst[l]) dst[l] += su.MN;
        deinterleave_rows(dst, hb_u + W, grp.lane_n, count);
        for (int l = 0; l < count; ++l)
          if (dst[l]) dst[l] += su.MN;
        deinterleave_rows(dst, hb_l + W, grp.lane_n, count);
      }
    } else if constexpr (kFloat) {
      if (hidden)
        for (int l = 0; l < count; ++l)
          if (ck.saves(i, ln.m[l]))
            ck.save(grp.z_up, grp.a_up, grp.u_up, grp.e_up, l, ln.n[l], i, hid[l]);
    }
  }
  A* total = static_cast<A*>(out.total);
  for (int l = 0; l < count; ++l) {
    const int64_t b = pairs[l];
    // score = expo + log2(mant), 0 when no cell beats the boundary: with
    // state too, so that a training forward gives inference's bits (its
    // largest H, a log2 of every cell, can differ from log2 of the largest
    // Z in the last bit); the argmax is that H's cell.
    PairTotal<A> t;
    int64_t argmax = -1;
    if (ln.mant[l] > A(0)) {
      t.base = static_cast<A>(ln.expo[l]);
      t.log2sum = CpuMath::log2(ln.mant[l]);
    }
    if (hidden && !su.soft_reduction && ln.bi[l] > 0 && p.reduction == Reduction::Max)
      argmax = (int64_t(ln.bi[l]) - 1) * N + (ln.bj[l] - 1);
    t.store(total, b);
    st(static_cast<T*>(out.score), b, t.value() * su.unit);
    out.argmax[b] = argmax;
    if constexpr (kFloat) {
      if (hidden && checkpoints) {
        // "soft": the seeds' scale 1 / sum 2^(C - total) over the pair's
        // cells (the C the backward computes again), from the row passes' sum.
        const float scale = su.soft_reduction ? soft_seed_scale(ln.mant[l], ln.expo[l],
                                                                ln.hmant[l], ln.hexpo[l])
                                              : 1.0f;
        ck.set_seed_scale(hid[l], scale);
        ck.set_column_blocks(hid[l], 0);  // (its state is the row checkpoints alone)
      }
    }
  }
}

// The sum of the lanes' values mant[l] 2^expo[l] (mant 0: none) as
// sum 2^top, top the largest exponent (0 when there is none).
template <typename A, typename Int>
double lanes_sum(const A* mant, const Int* expo, int64_t lanes, Int& top) {
  top = 0;
  for (int l = 0; l < lanes; ++l)
    if (mant[l] > A(0)) top = std::max(top, expo[l]);
  double sum = 0.0;
  for (int l = 0; l < lanes; ++l)
    if (mant[l] > A(0)) sum += std::ldexp(double(mant[l]), static_cast<int>(expo[l] - top));
  return sum;
}

// The result (score, total, argmax) of a lone pair that ran on column
// blocks, lane l on columns l nb + 1 .., from its lanes' reductions: with
// state and "max", each lane's largest H and its first cell (the row kernel
// saw step t as row t, so lane l's row is t - l); else each lane's max or sum
// of Z, combined.
template <typename T>
void store_long_pair_result(const Setup<T>& su, int64_t b, const ProbabilityLanesOf<Acc<T>>& ln,
                            int64_t lanes, int64_t nb, bool state, const ForwardOutputs& out) {
  using A = Acc<T>;
  const Problem& p = su.p;
  const int64_t N = su.N;
  int64_t argmax = -1;
  if (state && !su.soft_reduction && p.reduction == Reduction::Max) {
    // "max" with state: the cell of the largest H over the lanes, the first
    // in row-major order among equals (each lane kept its block's first).
    A top_h = A(0);
    for (int l = 0; l < lanes; ++l) {
      if (ln.bi[l] <= 0) continue;
      const int64_t k = (int64_t(ln.bi[l]) - l - 1) * N + l * nb + (ln.bj[l] - 1);
      if (ln.best[l] > top_h || (ln.best[l] == top_h && argmax >= 0 && k < argmax)) {
        top_h = ln.best[l];
        argmax = k;
      }
    }
  }
  // The score: the lanes' reductions combined, with state too (inference's
  // bits; see probability_group).
  IntOf<A> top = 0;
  const double sum = lanes_sum(ln.mant, ln.expo, lanes, top);
  double best = 0.0;
  for (int l = 0; l < lanes; ++l)
    if (ln.mant[l] > A(0))
      best = std::max(best, std::ldexp(double(ln.mant[l]), static_cast<int>(ln.expo[l] - top)));
  const A mant = static_cast<A>(su.soft_reduction ? sum : best);
  PairTotal<A> tot;
  if (mant > A(0)) {
    tot.base = static_cast<A>(top);
    tot.log2sum = CpuMath::log2(mant);
  }
  tot.store(static_cast<A*>(out.total), b);
  st(static_cast<T*>(out.score), b, tot.value() * su.unit);
  out.argmax[b] = argmax;
}

// One long pair (linear gaps, constant gap), its columns cut into up to W
// blocks, one per lane: lane l computes row t - l of its block at step t, so
// that its left neighbour (the last column of block l - 1, row t - l) was
// computed by lane l - 1 the step before, and the diagonal the step before
// that. Lanes outside their rows have scores -inf and no gap weight: they
// hold Z = 1, which is the boundary row 0 the lane starts from. With state
// (a training forward) each step's rows go to H, and for "max" each lane
// keeps its block's largest H with the step and column it came at (the row
// kernel sees step t as row t), combined over the lanes at the end.
template <typename T>
void probability_long_pair(const Setup<T>& su, int64_t b, const ProbabilityRowFnsOf<Acc<T>>& rows_fn,
                           const ForwardOutputs& out, std::vector<Acc<T>>& mem) {
  using A = Acc<T>;
  using Int = IntOf<A>;
  const Problem& p = su.p;
  const int64_t N = su.N;
  constexpr int64_t C = ProbabilityRange<A>::kRenormSteps;
  int64_t m = 0, n = 0;
  su.extents(b, m, n);
  const int64_t nb = (n + W - 1) / W, lanes = (n + nb - 1) / nb;
  int64_t width[W];
  for (int l = 0; l < W; ++l) width[l] = l < lanes ? std::min(nb, n - l * nb) : 0;
  const ProbabilityRowFnOf<A> row = rows_fn.of(static_cast<int>(lanes), su.soft_reduction, true);
  const ProbabilityGapsOf<A> gaps = constant_gaps<A>(su);
  const int64_t stride = (nb + 1) * W, chunks = (nb + C - 1) / C + 1;
  mem.assign(static_cast<size_t>(4 * stride + 2 * chunks * W + 4 * W + 64 / sizeof(A)), A(0));
  A* base = mem.data();
  while (reinterpret_cast<uintptr_t>(base) % 64 != 0) ++base;
  A *z_up = base, *z = base + stride, *sb = base + 2 * stride, *hb = base + 3 * stride;
  Int* e_up = reinterpret_cast<Int*>(base + 4 * stride);
  Int* e = e_up + chunks * W;
  A* left_z = reinterpret_cast<A*>(e + chunks * W);
  A* diag_z = left_z + W;
  Int* left_e = reinterpret_cast<Int*>(diag_z + W);
  Int* diag_e = left_e + W;
  std::fill(z_up, z_up + stride, A(1));
  std::fill(sb, sb + nb * W, -kInf<A>);
  std::fill(left_z, left_z + 2 * W, A(1));  // left_z and diag_z
  ProbabilityLanesOf<A> ln;
  for (int l = 0; l < W; ++l) ln.reset(l);
  A* hid = static_cast<A*>(out.hidden);
  if (hid) {
    hid += b * su.MN;
    fill_outside<A>(hid, su.M, N, m, n, A(0));
  }
  const T* S = static_cast<const T*>(p.scores) + b * su.MN;
  for (int64_t t = 1; t <= m + lanes - 1; ++t) {
    const T* src[W] = {};
    int64_t n_now[W];
    for (int l = 0; l < W; ++l) {
      const int64_t i = t - l;
      const bool active = l < lanes && i >= 1 && i <= m;
      ln.m[l] = active ? static_cast<Int>(t) : 0;
      ln.n[l] = static_cast<Int>(active ? width[l] : 0);
      n_now[l] = active ? width[l] : 0;
      if (active) src[l] = S + (i - 1) * N + l * nb;
      else
        for (int64_t j = 0; j < nb; ++j) sb[j * W + l] = -kInf<A>;
    }
    if constexpr (std::is_same_v<T, float>) {
      interleave_rows(sb, src, n_now, W, su.beta);
    } else {
      for (int l = 0; l < W; ++l)
        if (src[l])
          for (int64_t j = 0; j < n_now[l]; ++j) sb[j * W + l] = ld(src[l], j) * su.beta;
    }
    const ProbabilityRowsOf<A> r{sb,     nullptr, z_up,    e_up,    z,       e,       hid ? hb : nullptr,
                            nullptr, nullptr, left_z, left_e, diag_z, diag_e, nullptr,
                            nullptr, nullptr, nullptr};
    row(r, gaps, static_cast<int32_t>(nb), static_cast<int32_t>(t), ln);
    if (hid) {
      A* dst[W] = {};
      for (int l = 0; l < W; ++l)
        if (n_now[l] > 0) dst[l] = hid + (t - l - 1) * N + l * nb;
      deinterleave_rows(dst, hb + W, n_now, W);
    }
    // Hand each lane's last column on to the next lane (lane 0: the boundary).
    for (int l = W - 1; l >= 0; --l) {
      diag_z[l] = left_z[l];
      diag_e[l] = left_e[l];
      if (l == 0 || width[l - 1] == 0) {
        left_z[l] = A(1);
        left_e[l] = 0;
      } else {
        const int64_t last = width[l - 1];
        left_z[l] = z[last * W + l - 1];
        left_e[l] = e[((last - 1) / C) * W + l - 1];
      }
    }
    std::swap(z_up, z);
    std::swap(e_up, e);
  }
  store_long_pair_result(su, b, ln, lanes, nb, hid != nullptr, out);
}

}  // namespace softsw::cpu::simd
#endif  // SOFTSW_CPU_VECTOR
