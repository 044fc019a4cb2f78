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
#include "setup.h"
#include "simd.h"

namespace softsw::cpu {

// Whether pair b (extents m, n) may run in the probability domain: every
// score and gap in kernel units within ProbabilityRange<float>'s bound.
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
  if (p.gap_open.data == nullptr) return Range::gap_ok(p.gap_open.value * su.beta);
  const GapView<T> g = su.gap(p.gap_open, b);
  const float gap_limit = static_cast<float>(Range::kMaxLog2Weight);
  for (int64_t i = 1; i <= m; ++i) {
    unsigned out = 0;
    for (int64_t j = 1; j <= n; ++j) out |= !(std::fabs(g.at(i, j)) <= gap_limit);
    if (out) return false;
  }
  return true;
}

}  // namespace softsw::cpu

#if SOFTSW_CPU_VECTOR
namespace softsw::cpu::simd {

// Per-lane state of a probability-domain group.
struct alignas(64) ProbabilityLanes {
  float mant[W];   // the reduction ("max": largest Z, "soft": sum of Z) ...
  int32_t expo[W]; // ... as mant * 2^expo, mant in [1, 2) (0: nothing yet)
  int32_t m[W];    // lane extents (0 for an unused lane)
  int32_t n[W];
};

// One row of a group: lane-interleaved buffers, col j at j * W (col 0
// unused), chunk q's exponent at q * W; scores and gap scores in kernel units
// at (j - 1) * W.
struct ProbabilityRows {
  const float* s;
  const float* g;        // nullptr: the constant gap
  const float* z_up;     // row i - 1
  const int32_t* e_up;
  float* z;              // row i
  int32_t* e;
};

// MASKED: lanes differ in extents, so cells past a lane's pair are masked out
// of its reduction and its gap weight; unmasked (every busy lane has the
// group's extents) the idle lanes compute garbage that nobody reads.
template <int VL, bool SOFT, bool GAP_TENSOR, bool MASKED>
SOFTSW_VINLINE void probability_row_body(const ProbabilityRows& r, float gap, int32_t n,
                                         int32_t i, ProbabilityLanes& ln) {
  using X = V<VL>;
  using F = typename X::F;
  using I = typename X::I;
  constexpr int K = W / VL;
  constexpr int32_t C = ProbabilityRange<float>::kRenormSteps;
  const F zero = X::splat(0.0f), one = X::splat(1.0f);
  const F c_const = X::exp2(X::splat(gap));
  I rowok[K], nl[K], el[K], ed[K], best_e[K];
  F zl[K], zd[K], best_m[K];
  for (int k = 0; k < K; ++k) {
    rowok[k] = X::splati(i) <= X::loadi(ln.m + k * VL);
    nl[k] = X::loadi(ln.n + k * VL);
    zl[k] = zd[k] = one;  // Z[i, 0] = Z[i-1, 0] = 1, exponent 0
    el[k] = ed[k] = X::splati(0);
    best_m[k] = X::load(ln.mant + k * VL);
    best_e[k] = X::loadi(ln.expo + k * VL);
  }
  for (int32_t j0 = 1, q = 0; j0 <= n; j0 += C, ++q) {
    const int32_t j1 = std::min(j0 + C - 1, n);
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
      // Fold the chunk into the lane's reduction (mant * 2^expo).
      const I has = red > zero;
      const F rm = X::sel(has, X::mantissa(red), zero);
      const I re = X::seli(has, X::exponent(red) + o, best_e[k]);
      if constexpr (SOFT) {
        const I top = X::imax(best_e[k], re);
        const F sum = best_m[k] * X::pow2(best_e[k] - top) + rm * X::pow2(re - top);
        const I has_sum = sum > zero;
        best_m[k] = X::sel(has_sum, X::mantissa(sum), zero);
        best_e[k] = X::seli(has_sum, top + X::exponent(sum), best_e[k]);
      } else {
        const I upd = has & ((re > best_e[k]) | ((re == best_e[k]) & (rm > best_m[k])));
        best_m[k] = X::sel(upd, rm, best_m[k]);
        best_e[k] = X::seli(upd, re, best_e[k]);
      }
    }
  }
  for (int k = 0; k < K; ++k) {
    X::store(ln.mant + k * VL, best_m[k]);
    X::storei(ln.expo + k * VL, best_e[k]);
  }
}

using ProbabilityRowFn = void (*)(const ProbabilityRows&, float, int32_t, int32_t,
                                  ProbabilityLanes&);

template <bool SOFT, bool GAP_TENSOR, bool MASKED>
void probability_row_baseline(const ProbabilityRows& r, float gap, int32_t n, int32_t i,
                              ProbabilityLanes& ln) {
  probability_row_body<4, SOFT, GAP_TENSOR, MASKED>(r, gap, n, i, ln);
}
#if defined(__x86_64__)
template <bool SOFT, bool GAP_TENSOR, bool MASKED>
__attribute__((target("avx2,fma"))) void probability_row_avx2(const ProbabilityRows& r,
                                                              float gap, int32_t n, int32_t i,
                                                              ProbabilityLanes& ln) {
  probability_row_body<8, SOFT, GAP_TENSOR, MASKED>(r, gap, n, i, ln);
}
template <bool SOFT, bool GAP_TENSOR, bool MASKED>
__attribute__((target("avx512f,avx512dq,avx512vl,avx512bw,avx2,fma"))) void
probability_row_avx512(const ProbabilityRows& r, float gap, int32_t n, int32_t i,
                       ProbabilityLanes& ln) {
  probability_row_body<8, SOFT, GAP_TENSOR, MASKED>(r, gap, n, i, ln);
}
#endif

template <bool SOFT, bool GAP_TENSOR, bool MASKED>
ProbabilityRowFn pick_probability_row() {
#if defined(__x86_64__)
  switch (isa_level()) {
    case 2: return &probability_row_avx512<SOFT, GAP_TENSOR, MASKED>;
    case 1: return &probability_row_avx2<SOFT, GAP_TENSOR, MASKED>;
    default: break;
  }
#endif
  return &probability_row_baseline<SOFT, GAP_TENSOR, MASKED>;
}

// The row function for a problem: [masked][soft][gap tensor].
struct ProbabilityRowFns {
  ProbabilityRowFn fn[2][2][2];
};
inline ProbabilityRowFns pick_probability_rows() {
  ProbabilityRowFns f;
  f.fn[0][0][0] = pick_probability_row<false, false, false>();
  f.fn[0][0][1] = pick_probability_row<false, true, false>();
  f.fn[0][1][0] = pick_probability_row<true, false, false>();
  f.fn[0][1][1] = pick_probability_row<true, true, false>();
  f.fn[1][0][0] = pick_probability_row<false, false, true>();
  f.fn[1][0][1] = pick_probability_row<false, true, true>();
  f.fn[1][1][0] = pick_probability_row<true, false, true>();
  f.fn[1][1][1] = pick_probability_row<true, true, true>();
  return f;
}

// One group of up to W pairs (valid, non-empty, in range), start to finish:
// writes score, total and argmax (-1: the inference forward keeps no state).
template <typename T>
void probability_group(const Setup<T>& su, const int64_t* pairs, int count,
                       const ProbabilityRowFns& rows_fn, const ForwardOutputs& out,
                       std::vector<float>& mem) {
  const Problem& p = su.p;
  const int64_t N = su.N;
  constexpr int64_t C = ProbabilityRange<float>::kRenormSteps;
  ProbabilityLanes ln;
  const T* S[W] = {};
  GapView<T> gv[W];
  int64_t mg = 0, ng = 0;
  for (int l = 0; l < W; ++l) {
    int64_t m = 0, n = 0;
    if (l < count) {
      su.extents(pairs[l], m, n);
      S[l] = static_cast<const T*>(p.scores) + pairs[l] * su.MN;
      gv[l] = su.gap(p.gap_open, pairs[l]);
    }
    ln.m[l] = static_cast<int32_t>(m);
    ln.n[l] = static_cast<int32_t>(n);
    ln.mant[l] = 0.0f;
    ln.expo[l] = 0;
    mg = std::max(mg, m);
    ng = std::max(ng, n);
  }
  int64_t lane_n[W];
  bool masked = false;
  for (int l = 0; l < W; ++l) {
    lane_n[l] = ln.n[l];
    masked |= l < count && (ln.m[l] != mg || ln.n[l] != ng);
  }
  const bool gap_tensor = p.gap_open.data != nullptr;
  const ProbabilityRowFn row = rows_fn.fn[masked][su.soft_reduction][gap_tensor];
  const int64_t stride = (ng + 1) * W, chunks = (ng + C - 1) / C + 1;
  mem.assign(static_cast<size_t>(4 * stride + 2 * chunks * W + 16), 0.0f);
  float* base = mem.data();
  while (reinterpret_cast<uintptr_t>(base) % 64 != 0) ++base;
  float *z_up = base, *z = base + stride, *sb = base + 2 * stride, *gb = base + 3 * stride;
  int32_t* e_up = reinterpret_cast<int32_t*>(base + 4 * stride);
  int32_t* e = e_up + chunks * W;
  // Row 0: Z = 1, exponent 0. Scores (and gaps) past a lane's pair: -inf.
  std::fill(z_up, z_up + stride, 1.0f);
  std::fill(sb, sb + ng * W, -kInf<float>);
  if (gap_tensor) std::fill(gb, gb + ng * W, -kInf<float>);
  for (int64_t i = 1; i <= mg; ++i) {
    if constexpr (std::is_same_v<T, float>) {
      const float* src[W];
      for (int l = 0; l < count; ++l) src[l] = i <= ln.m[l] ? S[l] + (i - 1) * N : nullptr;
      interleave_rows(sb, src, lane_n, count, su.beta);
    }
    for (int l = 0; l < count; ++l) {
      if (i > ln.m[l]) continue;
      if constexpr (!std::is_same_v<T, float>) {
        const T* src = S[l] + (i - 1) * N;
        for (int64_t j = 0; j < ln.n[l]; ++j) sb[j * W + l] = ld(src, j) * su.beta;
      }
      if (gap_tensor)
        for (int64_t j = 0; j < ln.n[l]; ++j) gb[j * W + l] = gv[l].at(i, j + 1);
    }
    const ProbabilityRows rows{sb, gap_tensor ? gb : nullptr, z_up, e_up, z, e};
    row(rows, gap_tensor ? 0.0f : gv[0].value, static_cast<int32_t>(ng),
        static_cast<int32_t>(i), ln);
    std::swap(z_up, z);
    std::swap(e_up, e);
  }
  float* total = static_cast<float*>(out.total);
  for (int l = 0; l < count; ++l) {
    const int64_t b = pairs[l];
    PairTotal<float> t;  // score = expo + log2(mant); 0 when no cell beats the boundary
    if (ln.mant[l] > 0.0f) {
      t.base = static_cast<float>(ln.expo[l]);
      t.log2sum = CpuMath::log2(ln.mant[l]);
    }
    t.store(total, b);
    st(static_cast<T*>(out.score), b, t.value() * su.unit);
    out.argmax[b] = -1;
  }
}

}  // namespace softsw::cpu::simd
#endif  // SOFTSW_CPU_VECTOR
