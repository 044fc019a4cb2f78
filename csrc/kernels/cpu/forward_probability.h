// The SIMD linear-gap forward in the probability domain (probability.h), for
// inference (no state kept) at T > 0 with a float accumulator: one lane per
// pair, groups of W = 16 pairs, one row at a time, as forward_simd.h, but the
// cell is probability_cell on Z = 2^H: one exp2 (the weight of the score)
// and three adds / multiplies instead of three exp2 and a log2.
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
// rule's bound (kernel units); NaN is out of range.
template <typename T>
bool gaps_in_probability_range(const Setup<T>& su, const GapScores& gaps, int64_t b, int64_t m,
                               int64_t n) {
  using Range = ProbabilityRange<float>;
  if (gaps.data == nullptr) return Range::gap_ok(gaps.value * su.beta);
  const GapView<T> g = su.gap(gaps, b);
  const float gap_limit = static_cast<float>(Range::kMaxLog2Weight);
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

// Whether pair b (extents m, n) may run in the probability domain: every
// score and gap in kernel units within ProbabilityRange<float>'s bound
// (constant or per-cell gaps, linear or affine).
template <typename T>
bool in_probability_range(const Setup<T>& su, int64_t b, int64_t m, int64_t n) {
  using Range = ProbabilityRange<float>;
  if (su.hard || !std::is_same_v<Acc<T>, float>) return false;
  const Problem& p = su.p;
  // As the CUDA kernels compare: in the accumulate type, NaN out of range.
  const float limit = static_cast<float>(Range::score_limit(su.beta));
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

}  // namespace softsw::cpu

#if SOFTSW_CPU_VECTOR
namespace softsw::cpu::simd {

// Per-lane state of a probability-domain group.
struct alignas(64) ProbabilityLanes {
  float mant[W];   // the reduction ("max": largest Z, "soft": sum of Z) ...
  int32_t expo[W]; // ... as mant * 2^expo, mant in [1, 2) (0: nothing yet)
  float best[W];   // with state, "max": the largest H = log2 Z ...
  int32_t bi[W];   // ... and its first cell (i, j) in row-major order; -1: none
  int32_t bj[W];
  float hmant[W];  // with state, affine "soft": the sum of 2^C as C was
  int32_t hexpo[W];  // rounded to the state (the seeds' scale), likewise
  int32_t m[W];    // lane extents (0 for an unused lane)
  int32_t n[W];
};

// One row of a group: lane-interleaved buffers, col j at j * W (col 0
// unused), chunk q's exponent at q * W; scores and gap scores in kernel units
// at (j - 1) * W.
struct ProbabilityRows {
  const float* s;
  const float* g;        // nullptr: the constant gap
  const float* z_up;     // row i - 1 (affine: C)
  const int32_t* e_up;
  float* z;              // row i
  int32_t* e;
  float* h;              // with state: H = log2 Z of row i (kernel units; affine: C)
  float* h_u;            // with state, affine gaps: U and L of row i
  float* h_l;
  // A lone pair on column blocks (a lane's block starts at its col 1): each
  // lane's left neighbour Z[i, 0] and diagonal Z[i-1, 0] with their
  // exponents (W entries each); nullptr: the boundary (1). Affine gaps: the
  // diagonal is C, and the left neighbour is left_b, left_l below (left_z is
  // not read).
  const float* left_z;
  const int32_t* left_e;
  const float* diag_z;
  const int32_t* diag_e;
  // Affine gaps: the A and U nodes of row i - 1 and of row i (scaled as z).
  const float* a_up;
  const float* u_up;
  float* a;
  float* u;
  // The next row's inputs and outputs, one step per column (nullptr: none).
  RowPrefetcher* prefetch = nullptr;
  // Affine gaps with per-cell gap scores: the extend scores (`g`: the open
  // scores), kernel units at (j - 1) * W, -inf past a lane's pair.
  const float* g_ext = nullptr;
  // Affine gaps, kKeepShares: the shares of row i's cells (start, D, U, L
  // over C; `h`: C, for "soft" seeds).
  float *share_start = nullptr, *share_d = nullptr, *share_u = nullptr, *share_l = nullptr;
  // Affine gaps on column blocks: each lane's left neighbour's B and L nodes
  // (exponent left_e; nullptr: the boundary, B = 1 and L = 0), and, written
  // at the end of the row, its B and L at col n at the last chunk's exponent
  // (what the next block reads as its left neighbour; nullptr: not kept).
  const float *left_b = nullptr, *left_l = nullptr;
  float *last_b = nullptr, *last_l = nullptr;
  // Affine gaps on column blocks, "soft": each chunk's sum of Z (and with
  // state of 2^C as kept, at the chunk's exponent) at q * W, instead of
  // folded into the lanes' reductions (the caller folds a row's chunks in a
  // group's order). nullptr: folded.
  float *chunk_sum = nullptr, *chunk_sum_h = nullptr;
};

// The constant gap weights' exponents (kernel units): open (linear: the gap)
// and extend.
struct ProbabilityGaps {
  float open, extend;
};

// A chunk's max or sum `red` (exponent o) folded into a lane's reduction
// best_m * 2^best_e (best_m in [1, 2), or 0 before the first cell).
template <int VL, bool SOFT>
SOFTSW_VINLINE void fold_chunk(typename V<VL>::F red, typename V<VL>::I o,
                               typename V<VL>::F& best_m, typename V<VL>::I& best_e) {
  using X = V<VL>;
  using F = typename X::F;
  using I = typename X::I;
  const F zero = X::splat(0.0f);
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
template <int VL>
SOFTSW_VINLINE typename V<VL>::F log2_scaled(typename V<VL>::F z, typename V<VL>::I o) {
  using X = V<VL>;
  return X::sel(z > X::splat(0.0f), X::log2(z) + __builtin_convertvector(o, typename X::F),
                X::splat(-kInf<float>));
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
template <int VL, bool SOFT, bool GAP_TENSOR, bool MASKED, bool STATE, int LANES = W>
SOFTSW_VINLINE void probability_row_body(const ProbabilityRows& r, ProbabilityGaps gap,
                                         int32_t n, int32_t i, ProbabilityLanes& ln) {
  using X = V<VL>;
  using F = typename X::F;
  using I = typename X::I;
  constexpr int K = LANES / VL;
  constexpr int32_t C = ProbabilityRange<float>::kRenormSteps;
  const F zero = X::splat(0.0f), one = X::splat(1.0f);
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
      Floats<VL> diag = zd[k] * X::pow2(ed[k] - o), left = zl[k] * X::pow2(el[k] - o);
      F red = zero;  // the chunk's max or sum over the lane's cells
      for (int32_t j = j0; j <= j1; ++j) {
        const F up = X::load(r.z_up + j * W + lane) * fu;
        const F w = X::exp2(X::load(r.s + (j - 1) * W + lane));
        const I inside = X::splati(j) <= nl[k];
        F c;
        if constexpr (GAP_TENSOR) c = X::exp2(X::load(r.g + (j - 1) * W + lane));
        else if constexpr (MASKED) c = X::sel(inside, c_const, zero);
        else c = c_const;
        const Floats<VL> z = probability_cell<Floats<VL>>(start, w, diag, c, up, left);
        X::store(r.z + j * W + lane, z.v);
        diag = up;
        left = z;
        if constexpr (STATE) {
          const F h = log2_scaled<VL>(z.v, o);
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
      fold_chunk<VL, SOFT>(red, o, best_m[k], best_e[k]);  // with state too: the score (below)
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
template <int VL, bool SOFT, bool GAP_TENSOR, bool MASKED, int KEEP, int LANES = W>
SOFTSW_VINLINE void probability_affine_row_body(const ProbabilityRows& r, ProbabilityGaps gap,
                                                int32_t n, int32_t i, ProbabilityLanes& ln) {
  constexpr bool STATE = KEEP == kKeepLogs, SHARES = KEEP == kKeepShares;
  using X = V<VL>;
  using F = typename X::F;
  using I = typename X::I;
  constexpr int K = LANES / VL;
  constexpr int32_t C = ProbabilityRange<float>::kRenormSteps;
  const F zero = X::splat(0.0f), one = X::splat(1.0f);
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
      [[maybe_unused]] const F of = __builtin_convertvector(o, F);
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
          if constexpr (SOFT) X::store(r.h + c, log2_scaled<VL>(z, o));  // the seeds
          continue;
        }
        if constexpr (STATE) {
          const F h = log2_scaled<VL>(z, o);
          X::store(r.h + c, h);
          if (r.h_u) {  // (a checkpointing forward needs C alone)
            X::store(r.h_u + c, log2_scaled<VL>(u, o));
            X::store(r.h_l + c, log2_scaled<VL>(l, o));
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
      fold_chunk<VL, SOFT>(red, o, best_m[k], best_e[k]);  // with state too: the score (below)
      if constexpr (STATE && SOFT) fold_chunk<VL, true>(red_h, o, h_m[k], h_e[k]);
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

using ProbabilityRowFn = void (*)(const ProbabilityRows&, ProbabilityGaps, int32_t, int32_t,
                                  ProbabilityLanes&);

// The kinds of probability-domain rows.
enum ProbabilityKind {
  kLinearConstantGap = 0,
  kLinearGapTensor = 1,
  kAffineConstantGaps = 2,
  kAffineGapTensors = 3
};

template <int VL, int KIND, bool SOFT, bool MASKED, int KEEP, int LANES>
SOFTSW_VINLINE void probability_row_of(const ProbabilityRows& r, ProbabilityGaps gap, int32_t n,
                                       int32_t i, ProbabilityLanes& ln) {
  if constexpr (KIND == kAffineConstantGaps || KIND == kAffineGapTensors)
    probability_affine_row_body<VL, SOFT, KIND == kAffineGapTensors, MASKED, KEEP, LANES>(
        r, gap, n, i, ln);
  else  // (linear rows keep logs or nothing)
    probability_row_body<VL, SOFT, KIND == kLinearGapTensor, MASKED, KEEP == kKeepLogs, LANES>(
        r, gap, n, i, ln);
}

template <int KIND, bool SOFT, bool MASKED, int KEEP, int LANES>
void probability_row_baseline(const ProbabilityRows& r, ProbabilityGaps gap, int32_t n,
                              int32_t i, ProbabilityLanes& ln) {
  probability_row_of<4, KIND, SOFT, MASKED, KEEP, LANES>(r, gap, n, i, ln);
}
#if defined(__x86_64__)
template <int KIND, bool SOFT, bool MASKED, int KEEP, int LANES>
SOFTSW_TARGET_AVX2 void probability_row_avx2(const ProbabilityRows& r,
                                                              ProbabilityGaps gap, int32_t n,
                                                              int32_t i, ProbabilityLanes& ln) {
  probability_row_of<8, KIND, SOFT, MASKED, KEEP, LANES>(r, gap, n, i, ln);
}
template <int KIND, bool SOFT, bool MASKED, int KEEP, int LANES>
SOFTSW_TARGET_AVX512 void
probability_row_avx512(const ProbabilityRows& r, ProbabilityGaps gap, int32_t n, int32_t i,
                       ProbabilityLanes& ln) {
  probability_row_of<8, KIND, SOFT, MASKED, KEEP, LANES>(r, gap, n, i, ln);
}
#endif

template <int KIND, bool SOFT, bool MASKED, int KEEP, int LANES>
ProbabilityRowFn pick_probability_row() {
#if defined(__x86_64__)
  switch (isa_level()) {
    case 2: return &probability_row_avx512<KIND, SOFT, MASKED, KEEP, LANES>;
    case 1: return &probability_row_avx2<KIND, SOFT, MASKED, KEEP, LANES>;
    default: break;
  }
#endif
  return &probability_row_baseline<KIND, SOFT, MASKED, KEEP, LANES>;
}

// The row functions of one kind and what it keeps: [narrow][soft][masked].
// Narrow rows compute the first W / 2 lanes only: a group of at most W / 2
// pairs (a lone pair, 16 pairs on two threads) does half the work.
struct ProbabilityRowFns {
  ProbabilityRowFn fn[2][2][2];
  ProbabilityRowFn of(int count, bool soft, bool masked) const {
    return fn[count <= W / 2][soft][masked];
  }
};
template <int KIND, int KEEP>
ProbabilityRowFns pick_probability_rows() {
  ProbabilityRowFns f;
  f.fn[0][0][0] = pick_probability_row<KIND, false, false, KEEP, W>();
  f.fn[0][0][1] = pick_probability_row<KIND, false, true, KEEP, W>();
  f.fn[0][1][0] = pick_probability_row<KIND, true, false, KEEP, W>();
  f.fn[0][1][1] = pick_probability_row<KIND, true, true, KEEP, W>();
  f.fn[1][0][0] = pick_probability_row<KIND, false, false, KEEP, W / 2>();
  f.fn[1][0][1] = pick_probability_row<KIND, false, true, KEEP, W / 2>();
  f.fn[1][1][0] = pick_probability_row<KIND, true, false, KEEP, W / 2>();
  f.fn[1][1][1] = pick_probability_row<KIND, true, true, KEEP, W / 2>();
  return f;
}
inline ProbabilityRowFns pick_probability_rows(const Problem& p, bool state) {
  if (p.affine)
    return p.gap_open.data || p.gap_extend.data
               ? (state ? pick_probability_rows<kAffineGapTensors, true>()
                        : pick_probability_rows<kAffineGapTensors, false>())
               : (state ? pick_probability_rows<kAffineConstantGaps, true>()
                        : pick_probability_rows<kAffineConstantGaps, false>());
  if (p.gap_open.data)
    return state ? pick_probability_rows<kLinearGapTensor, true>()
                 : pick_probability_rows<kLinearGapTensor, false>();
  return state ? pick_probability_rows<kLinearConstantGap, true>()
               : pick_probability_rows<kLinearConstantGap, false>();
}
// The affine rows that keep their cells' shares.
inline ProbabilityRowFns pick_affine_share_rows(const Problem& p) {
  return p.gap_open.data || p.gap_extend.data
             ? pick_probability_rows<kAffineGapTensors, kKeepShares>()
             : pick_probability_rows<kAffineConstantGaps, kKeepShares>();
}

// The rows a row function writes besides the next row's inputs (nullptr:
// not kept): log2 of C (h), U and L (kKeepLogs), or the shares of the cells
// (kKeepShares; h: C for "soft" seeds).
struct KeptRows {
  float *h = nullptr, *h_u = nullptr, *h_l = nullptr;
  float *share_start = nullptr, *share_d = nullptr, *share_u = nullptr, *share_l = nullptr;
  // Affine gaps on column blocks: each lane's left neighbour's B and L nodes
  // (exponent left_e; nullptr: the boundary, B = 1 and L = 0), and, written
  // at the end of the row, its B and L at col n at the last chunk's exponent
  // (what the next block reads as its left neighbour; nullptr: not kept).
  const float *left_b = nullptr, *left_l = nullptr;
  float *last_b = nullptr, *last_l = nullptr;
  // Affine gaps on column blocks, "soft": each chunk's sum of Z (and with
  // state of 2^C as kept, at the chunk's exponent) at q * W, instead of
  // folded into the lanes' reductions (the caller folds a row's chunks in a
  // group's order). nullptr: folded.
  float *chunk_sum = nullptr, *chunk_sum_h = nullptr;
};

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
  static constexpr int64_t C = ProbabilityRange<float>::kRenormSteps;

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
      ln.m[l] = static_cast<int32_t>(m);
      ln.n[l] = static_cast<int32_t>(n);
      ln.mant[l] = ln.hmant[l] = 0.0f;
      ln.expo[l] = ln.hexpo[l] = 0;
      ln.best[l] = 0.0f;
      ln.bi[l] = ln.bj[l] = -1;
      lane_n[l] = n;
      mg = std::max(mg, m);
      ng = std::max(ng, n);
    }
    if (rows > 0) mg = rows;
    if (cols > 0) ng = cols;
    for (int l = 0; l < count; ++l) {  // columns past ng are not computed
      lane_n[l] = std::min(lane_n[l], ng);
      ln.n[l] = static_cast<int32_t>(lane_n[l]);
    }
    for (int l = 0; l < count; ++l) masked |= ln.m[l] < mg || ln.n[l] < ng;
    gap_tensor_ = p.gap_open.data != nullptr || (p.affine && p.gap_extend.data != nullptr);
    gaps_ = {gap_tensor_ ? 0.0f : static_cast<float>(p.gap_open.value) * su.beta,
             p.affine && !gap_tensor_ ? static_cast<float>(p.gap_extend.value) * su.beta : 0.0f};
    stride = (ng + 1) * W;
    chunks = (ng + C - 1) / C + 1;
  }

  // Floats bind() takes: the rows (z, scores, gap scores; affine: A, U, the
  // extend scores) and the exponents of two rows.
  int64_t floats() const { return (su_.p.affine ? 9 : 4) * stride + 2 * chunks * W; }

  // Lays the rows out from `base` (floats() floats, 64-byte aligned) and
  // starts at row 0: C = A = 1, exponent 0; scores and gap scores past a
  // lane's pair -inf (weights 0) for good.
  void bind(float* base) {
    float* next = base;
    auto take = [&]() {
      float* a = next;
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
    e_up = reinterpret_cast<int32_t*>(next);
    e_ = e_up + chunks * W;
    start();
    std::fill(s_, s_ + ng * W, -kInf<float>);
    if (gap_tensor_) {
      std::fill(g_, g_ + ng * W, -kInf<float>);
      if (su_.p.affine) std::fill(g_ext_, g_ext_ + ng * W, -kInf<float>);
    }
  }

  // Row 0: C = A = 1 (U = 0), exponent 0.
  void start() { set_up_rows(1.0f); }

  // Row state all zero (z, A, U, exponents): what a checkpoint restored into
  // it (checkpoints.h) leaves past its pair's columns and chunks.
  void clear() { set_up_rows(0.0f); }

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
  void step(ProbabilityRowFn row, int64_t i, const KeptRows& keep, RowPrefetcher* next) {
    ProbabilityRows r{s_,      gap_tensor_ ? g_ : nullptr, z_up,    e_up,    z_,   e_,
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

  ProbabilityLanes ln;
  int64_t lane_n[W] = {};
  int64_t mg = 0, ng = 0;  // rows and columns computed
  bool masked = false;     // a lane's pair smaller than (mg, ng): the masked rows
  int64_t stride = 0, chunks = 0;
  // Row i - 1 before step(i), row i after it: scaled C (z), A, U (affine
  // gaps) at j * W (col 0 unused), chunk q's exponent at q * W.
  float *z_up = nullptr, *a_up = nullptr, *u_up = nullptr;
  int32_t* e_up = nullptr;

 private:
  // Every column of row i - 1: z = A = `za`, U = 0, exponents 0.
  void set_up_rows(float za) {
    std::fill(z_up, z_up + stride, za);
    std::fill(e_up, e_up + chunks * W, 0);
    if (a_up) {
      std::fill(a_up, a_up + stride, za);
      std::fill(u_up, u_up + stride, 0.0f);
    }
  }

  // Row i of the lanes' gap scores (kernel units) into `dst`, the lanes whose
  // pair has row i; the rest keep what they hold.
  void gather_gap_row(const GapView<T>* g, int64_t i, float* dst) {
    const T* src[W] = {};
    bool rows = true;
    for (int l = 0; l < count_; ++l)
      if (i <= ln.m[l]) rows &= (src[l] = g[l].row(i)) != nullptr;
    if constexpr (std::is_same_v<T, float>) {
      if (rows) {
        interleave_rows(dst, src, lane_n, count_, su_.beta);
        return;
      }
    }
    for (int l = 0; l < count_; ++l)
      if (i <= ln.m[l])
        for (int64_t j = 0; j < ln.n[l]; ++j) dst[j * W + l] = g[l].at(i, j + 1);
  }

  const Setup<T>& su_;
  int count_;
  const T* S_[W] = {};
  GapView<T> gv_[W], ge_[W];
  bool gap_tensor_ = false;
  ProbabilityGaps gaps_{};
  float* s_ = nullptr;  // the gathered row's scores, col j at (j - 1) * W
  float *z_ = nullptr, *a_ = nullptr, *u_ = nullptr, *g_ = nullptr, *g_ext_ = nullptr;
  int32_t* e_ = nullptr;
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
// (checkpoints.h).
template <typename T>
void probability_group(const Setup<T>& su, const int64_t* pairs, int count,
                       const ProbabilityRowFns& rows_fn, const ForwardOutputs& out,
                       std::vector<float>& mem, bool checkpoints) {
  const Problem& p = su.p;
  const int64_t N = su.N;
  ProbabilityGroup<T> grp(su, pairs, count);
  ProbabilityLanes& ln = grp.ln;
  const int64_t mg = grp.mg, ng = grp.ng, stride = grp.stride;
  const ProbabilityRowFn row = rows_fn.of(count, su.soft_reduction, grp.masked);
  float* hidden = static_cast<float*>(out.hidden);
  const bool planes = hidden && !checkpoints;
  // The group's rows, then the state rows of row i (H, or C, U, L).
  const int64_t state_rows = hidden ? (p.affine ? 3 : 1) : 0;
  mem.resize(static_cast<size_t>(grp.floats() + state_rows * stride + 16));
  float* base = mem.data();
  while (reinterpret_cast<uintptr_t>(base) % 64 != 0) ++base;
  grp.bind(base);
  float* hb = hidden ? base + grp.floats() : nullptr;
  float* hb_u = planes && p.affine ? hb + stride : nullptr;
  float* hb_l = planes && p.affine ? hb + 2 * stride : nullptr;
  float* hid[W] = {};
  const AffineCheckpoints ck(N);
  for (int l = 0; hidden && l < count; ++l) {
    hid[l] = hidden + pairs[l] * su.planes * su.MN;
    if (planes)
      for (int64_t k = 0; k < su.planes; ++k)
        fill_outside<float>(hid[l] + k * su.MN, su.M, N, ln.m[l], ln.n[l], 0.0f);
    else
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
    KeptRows keep;
    keep.h = hb;
    keep.h_u = hb_u;
    keep.h_l = hb_l;
    grp.step(row, i, keep, &next);
    if (planes) {
      float* dst[W];
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
    } else if (hidden) {
      for (int l = 0; l < count; ++l)
        if (ck.saves(i, ln.m[l])) ck.save(grp.z_up, grp.a_up, grp.u_up, grp.e_up, l, ln.n[l], i, hid[l]);
    }
  }
  float* total = static_cast<float*>(out.total);
  for (int l = 0; l < count; ++l) {
    const int64_t b = pairs[l];
    // score = expo + log2(mant), 0 when no cell beats the boundary: with
    // state too, so that a training forward gives inference's bits (its
    // largest H, a log2 of every cell, can differ from log2 of the largest
    // Z in the last bit); the argmax is that H's cell.
    PairTotal<float> t;
    int64_t argmax = -1;
    if (ln.mant[l] > 0.0f) {
      t.base = static_cast<float>(ln.expo[l]);
      t.log2sum = CpuMath::log2(ln.mant[l]);
    }
    if (hidden && !su.soft_reduction && ln.bi[l] > 0 && p.reduction == Reduction::Max)
      argmax = (int64_t(ln.bi[l]) - 1) * N + (ln.bj[l] - 1);
    t.store(total, b);
    st(static_cast<T*>(out.score), b, t.value() * su.unit);
    out.argmax[b] = argmax;
    if (hidden && checkpoints) {
      // "soft": the seeds' scale 1 / sum 2^(C - total) over the pair's cells
      // (the C the backward computes again), from the row passes' sum.
      const float scale = su.soft_reduction ? soft_seed_scale(ln.mant[l], ln.expo[l], ln.hmant[l],
                                                              ln.hexpo[l])
                                            : 1.0f;
      ck.set_seed_scale(hid[l], scale);
      ck.set_column_blocks(hid[l], 0);  // (its state is the row checkpoints alone)
    }
  }
}

// The sum of the lanes' values mant[l] 2^expo[l] (mant 0: none) as
// sum 2^top, top the largest exponent (0 when there is none).
inline double lanes_sum(const float* mant, const int32_t* expo, int64_t lanes, int32_t& top) {
  top = 0;
  for (int l = 0; l < lanes; ++l)
    if (mant[l] > 0.0f) top = std::max(top, expo[l]);
  double sum = 0.0;
  for (int l = 0; l < lanes; ++l)
    if (mant[l] > 0.0f) sum += std::ldexp(double(mant[l]), expo[l] - top);
  return sum;
}

// The result (score, total, argmax) of a lone pair that ran on column
// blocks, lane l on columns l nb + 1 .., from its lanes' reductions: with
// state and "max", each lane's largest H and its first cell (the row kernel
// saw step t as row t, so lane l's row is t - l); else each lane's max or sum
// of Z, combined.
template <typename T>
void store_long_pair_result(const Setup<T>& su, int64_t b, const ProbabilityLanes& ln,
                            int64_t lanes, int64_t nb, bool state, const ForwardOutputs& out) {
  const Problem& p = su.p;
  const int64_t N = su.N;
  int64_t argmax = -1;
  if (state && !su.soft_reduction && p.reduction == Reduction::Max) {
    // "max" with state: the cell of the largest H over the lanes, the first
    // in row-major order among equals (each lane kept its block's first).
    float top_h = 0.0f;
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
  int32_t top = 0;
  const double sum = lanes_sum(ln.mant, ln.expo, lanes, top);
  double best = 0.0;
  for (int l = 0; l < lanes; ++l)
    if (ln.mant[l] > 0.0f) best = std::max(best, std::ldexp(double(ln.mant[l]), ln.expo[l] - top));
  const float mant = static_cast<float>(su.soft_reduction ? sum : best);
  PairTotal<float> tot;
  if (mant > 0.0f) {
    tot.base = static_cast<float>(top);
    tot.log2sum = CpuMath::log2(mant);
  }
  tot.store(static_cast<float*>(out.total), b);
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
void probability_long_pair(const Setup<T>& su, int64_t b, const ProbabilityRowFns& rows_fn,
                           const ForwardOutputs& out, std::vector<float>& mem) {
  const Problem& p = su.p;
  const int64_t N = su.N;
  constexpr int64_t C = ProbabilityRange<float>::kRenormSteps;
  int64_t m = 0, n = 0;
  su.extents(b, m, n);
  const int64_t nb = (n + W - 1) / W, lanes = (n + nb - 1) / nb;
  int64_t width[W];
  for (int l = 0; l < W; ++l) width[l] = l < lanes ? std::min(nb, n - l * nb) : 0;
  const ProbabilityRowFn row = rows_fn.of(static_cast<int>(lanes), su.soft_reduction, true);
  const ProbabilityGaps gaps{static_cast<float>(p.gap_open.value) * su.beta, 0.0f};
  const int64_t stride = (nb + 1) * W, chunks = (nb + C - 1) / C + 1;
  mem.assign(static_cast<size_t>(4 * stride + 2 * chunks * W + 4 * W + 16), 0.0f);
  float* base = mem.data();
  while (reinterpret_cast<uintptr_t>(base) % 64 != 0) ++base;
  float *z_up = base, *z = base + stride, *sb = base + 2 * stride, *hb = base + 3 * stride;
  int32_t* e_up = reinterpret_cast<int32_t*>(base + 4 * stride);
  int32_t* e = e_up + chunks * W;
  float* left_z = reinterpret_cast<float*>(e + chunks * W);
  float* diag_z = left_z + W;
  int32_t* left_e = reinterpret_cast<int32_t*>(diag_z + W);
  int32_t* diag_e = left_e + W;
  std::fill(z_up, z_up + stride, 1.0f);
  std::fill(sb, sb + nb * W, -kInf<float>);
  std::fill(left_z, left_z + 2 * W, 1.0f);  // left_z and diag_z
  ProbabilityLanes ln;
  for (int l = 0; l < W; ++l) {
    ln.mant[l] = 0.0f;
    ln.expo[l] = 0;
    ln.best[l] = 0.0f;
    ln.bi[l] = ln.bj[l] = -1;
  }
  float* hid = static_cast<float*>(out.hidden);
  if (hid) {
    hid += b * su.MN;
    fill_outside<float>(hid, su.M, N, m, n, 0.0f);
  }
  const T* S = static_cast<const T*>(p.scores) + b * su.MN;
  for (int64_t t = 1; t <= m + lanes - 1; ++t) {
    const T* src[W] = {};
    int64_t n_now[W];
    for (int l = 0; l < W; ++l) {
      const int64_t i = t - l;
      const bool active = l < lanes && i >= 1 && i <= m;
      ln.m[l] = active ? static_cast<int32_t>(t) : 0;
      ln.n[l] = static_cast<int32_t>(active ? width[l] : 0);
      n_now[l] = active ? width[l] : 0;
      if (active) src[l] = S + (i - 1) * N + l * nb;
      else
        for (int64_t j = 0; j < nb; ++j) sb[j * W + l] = -kInf<float>;
    }
    if constexpr (std::is_same_v<T, float>) {
      interleave_rows(sb, src, n_now, W, su.beta);
    } else {
      for (int l = 0; l < W; ++l)
        if (src[l])
          for (int64_t j = 0; j < n_now[l]; ++j) sb[j * W + l] = ld(src[l], j) * su.beta;
    }
    const ProbabilityRows r{sb,     nullptr, z_up,    e_up,    z,       e,       hid ? hb : nullptr,
                            nullptr, nullptr, left_z, left_e, diag_z, diag_e, nullptr,
                            nullptr, nullptr, nullptr};
    row(r, gaps, static_cast<int32_t>(nb), static_cast<int32_t>(t), ln);
    if (hid) {
      float* dst[W] = {};
      for (int l = 0; l < W; ++l)
        if (n_now[l] > 0) dst[l] = hid + (t - l - 1) * N + l * nb;
      deinterleave_rows(dst, hb + W, n_now, W);
    }
    // Hand each lane's last column on to the next lane (lane 0: the boundary).
    for (int l = W - 1; l >= 0; --l) {
      diag_z[l] = left_z[l];
      diag_e[l] = left_e[l];
      if (l == 0 || width[l - 1] == 0) {
        left_z[l] = 1.0f;
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
