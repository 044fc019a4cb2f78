// The SIMD linear-gap forward (float accumulate: float32, float16, bfloat16):
// one SIMD lane per pair of the batch, groups of W = 16 pairs, one row of the
// group at a time (the row's scores are first gathered into a
// lane-interleaved buffer, in kernel units). The W lanes are W / VL native
// vectors (simd.h), independent chains; the instruction set is picked at run
// time, and SOFTSW_CPU_ISA=scalar turns the path off (the scalar forward
// runs).
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "cell.h"
#include "setup.h"
#include "simd.h"

#if SOFTSW_CPU_VECTOR
namespace softsw::cpu::simd {

// Per-lane state of a group.
struct alignas(64) Lanes {
  float best[W];    // "max": running max (boundary 0 included) ...
  int32_t bi[W];    // ... and its cell (i, j); -1: a boundary zero
  int32_t bj[W];
  float smax[W];    // "soft": the running sum as smax + log2(ssum)
  float ssum[W];
  int32_t nan[W];   // "soft": a NaN cell was seen
  int32_t m[W];     // lane extents (0 for an unused lane)
  int32_t n[W];
};

// One row i of the group: cells (i, 1..n) from the row above (`prev`,
// lane-interleaved: col j at j*W, col 0 = boundary), the row's scores `s` and
// gap scores `g` (col j at (j-1)*W); writes the row to `cur` and folds it
// into the reduction of the lanes whose pair contains the cell, issuing one
// step of the next row's prefetches (`pf`) per column. The W lanes
// are K = W / VL native vectors, independent chains interleaved per column.
template <int VL, bool HARD, bool SOFT>
SOFTSW_VINLINE void row_body(const float* s, const float* g, const float* prev, float* cur,
                             int32_t n, int32_t i, Lanes& ln, RowPrefetcher& pf) {
  using X = V<VL>;
  using F = typename X::F;
  using I = typename X::I;
  constexpr int K = W / VL;
  const I iv = X::splati(i);
  I nl[K], rowok[K], bi[K], bj[K];
  F hd[K], hl[K], best[K];
  for (int k = 0; k < K; ++k) {
    nl[k] = X::loadi(ln.n + k * VL);
    rowok[k] = iv <= X::loadi(ln.m + k * VL);
    hd[k] = X::load(prev + k * VL);
    hl[k] = X::splat(0.0f);
    best[k] = X::load(ln.best + k * VL);
    bi[k] = X::loadi(ln.bi + k * VL);
    bj[k] = X::loadi(ln.bj + k * VL);
  }
  for (int32_t j = 1; j <= n; ++j) {
    const I jv = X::splati(j);
    pf.step();
    for (int k = 0; k < K; ++k) {
      const F hu = X::load(prev + j * W + k * VL);
      const F gg = X::load(g + (j - 1) * W + k * VL);
      const F h = LinearCell<Floats<VL>, HARD, VecMath<VL>>::value(
                      hd[k] + X::load(s + (j - 1) * W + k * VL), hu + gg, hl[k] + gg)
                      .v;
      X::store(cur + j * W + k * VL, h);
      hd[k] = hu;
      hl[k] = h;
      if constexpr (!SOFT) {
        const I upd = rowok[k] & (jv <= nl[k]) & ((h > best[k]) | ((h != h) & (best[k] == best[k])));
        best[k] = X::sel(upd, h, best[k]);
        bi[k] = X::seli(upd, iv, bi[k]);
        bj[k] = X::seli(upd, jv, bj[k]);
      }
    }
  }
  for (int k = 0; k < K; ++k) {
    if constexpr (!SOFT) {
      X::store(ln.best + k * VL, best[k]);
      X::storei(ln.bi + k * VL, bi[k]);
      X::storei(ln.bj + k * VL, bj[k]);
    } else {
      // Row max (interior cells are >= 0, so 0 is a safe floor), then the
      // row's sum of 2^(h - max), merged into the running (smax, ssum).
      F rm = X::splat(0.0f);
      I nan = X::loadi(ln.nan + k * VL);
      for (int32_t j = 1; j <= n; ++j) {
        const I ok = rowok[k] & (X::splati(j) <= nl[k]);
        const F h = X::load(cur + j * W + k * VL);
        rm = X::vmax(rm, X::sel(ok, h, X::splat(0.0f)));
        nan |= ok & (h != h);
      }
      F sum = X::splat(0.0f);
      for (int32_t j = 1; j <= n; ++j) {
        const I ok = rowok[k] & (X::splati(j) <= nl[k]);
        sum += X::exp2(X::sel(ok, X::load(cur + j * W + k * VL) - rm, X::splat(-kInf<float>)));
      }
      const F M = X::load(ln.smax + k * VL);
      const F newM = X::vmax(M, rm);
      X::store(ln.ssum + k * VL, X::load(ln.ssum + k * VL) * X::exp2(M - newM) + sum * X::exp2(rm - newM));
      X::store(ln.smax + k * VL, newM);
      X::storei(ln.nan + k * VL, nan);
    }
  }
}

using RowFn = void (*)(const float*, const float*, const float*, float*, int32_t, int32_t, Lanes&,
                       RowPrefetcher&);

template <bool HARD, bool SOFT>
void row_baseline(const float* s, const float* g, const float* prev, float* cur, int32_t n,
                  int32_t i, Lanes& ln, RowPrefetcher& pf) {
  row_body<4, HARD, SOFT>(s, g, prev, cur, n, i, ln, pf);
}

#if defined(__x86_64__)
template <bool HARD, bool SOFT>
__attribute__((target("avx2,fma"))) void row_avx2(const float* s, const float* g,
                                                  const float* prev, float* cur, int32_t n,
                                                  int32_t i, Lanes& ln, RowPrefetcher& pf) {
  row_body<8, HARD, SOFT>(s, g, prev, cur, n, i, ln, pf);
}
template <bool HARD, bool SOFT>
__attribute__((target("avx512f,avx512dq,avx512vl,avx512bw,avx2,fma"))) void row_avx512(
    const float* s, const float* g, const float* prev, float* cur, int32_t n, int32_t i,
    Lanes& ln, RowPrefetcher& pf) {
  row_body<8, HARD, SOFT>(s, g, prev, cur, n, i, ln, pf);
}
#endif

template <bool HARD, bool SOFT>
RowFn pick_row() {
#if defined(__x86_64__)
  switch (isa_level()) {
    case 2: return &row_avx512<HARD, SOFT>;
    case 1: return &row_avx2<HARD, SOFT>;
    default: break;
  }
#endif
  return &row_baseline<HARD, SOFT>;
}

inline RowFn pick_row(bool hard, bool soft) {
  if (hard) return soft ? pick_row<true, true>() : pick_row<true, false>();
  return soft ? pick_row<false, true>() : pick_row<false, false>();
}

// One group of up to W pairs (valid and non-empty), start to finish.
template <typename T>
void forward_linear_group(const Setup<T>& su, const int64_t* pairs, int count, RowFn row,
                          float* hidden, const ForwardOutputs& out, std::vector<float>& mem) {
  const Problem& p = su.p;
  const int64_t N = su.N;
  Lanes ln;
  const T* S[W] = {};
  GapView<T> gv[W];
  float* hid[W] = {};
  int64_t mg = 0, ng = 0;
  for (int l = 0; l < W; ++l) {
    int64_t m = 0, n = 0;
    if (l < count) {
      const int64_t b = pairs[l];
      su.extents(b, m, n);
      S[l] = static_cast<const T*>(p.scores) + b * su.MN;
      gv[l] = su.gap(p.gap_open, b);
      hid[l] = hidden ? hidden + b * su.MN : nullptr;
      if (hid[l]) fill_outside<float>(hid[l], su.M, N, m, n, 0.0f);
    }
    ln.m[l] = static_cast<int32_t>(m);
    ln.n[l] = static_cast<int32_t>(n);
    ln.best[l] = 0.0f;
    ln.bi[l] = ln.bj[l] = -1;
    ln.smax[l] = ln.ssum[l] = 0.0f;
    ln.nan[l] = 0;
    mg = std::max(mg, m);
    ng = std::max(ng, n);
  }
  int64_t row_n[W], lane_n[W];
  for (int l = 0; l < W; ++l) {
    row_n[l] = ng;
    lane_n[l] = ln.n[l];
  }
  const int64_t stride = (ng + 1) * W;
  mem.assign(static_cast<size_t>(4 * stride + 16), 0.0f);
  float* base = mem.data();
  while (reinterpret_cast<uintptr_t>(base) % 64 != 0) ++base;
  float *prev = base, *cur = base + stride, *sb = base + 2 * stride, *gb = base + 3 * stride;
  const bool gap_const = p.gap_open.data == nullptr;
  if (gap_const) std::fill(gb, gb + ng * W, gv[0].value);
  for (int64_t i = 1; i <= mg; ++i) {
    // The next row's scores (float: spread over this row, with its H) ...
    RowPrefetcher next;
    if constexpr (std::is_same_v<T, float>) {
      for (int l = 0; l < count; ++l) {
        if (i >= ln.m[l]) continue;
        next.add(S[l] + i * N);
        if (hid[l]) next.add(hid[l] + i * N);
      }
      next.pace(ng, ng);
    } else {  // ... else in one burst
      const T* rows_next[W];
      for (int l = 0; l < count; ++l) rows_next[l] = i < ln.m[l] ? S[l] + i * N : nullptr;
      prefetch_rows(rows_next, count, ng);
    }
    if constexpr (std::is_same_v<T, float>) {
      const float* src[W];
      for (int l = 0; l < count; ++l) src[l] = i <= ln.m[l] ? S[l] + (i - 1) * N : nullptr;
      interleave_rows(sb, src, row_n, count, su.beta);
    }
    for (int l = 0; l < count; ++l) {
      if (i > ln.m[l]) continue;
      if constexpr (!std::is_same_v<T, float>) {
        const T* src = S[l] + (i - 1) * N;
        for (int64_t j = 0; j < ng; ++j) sb[j * W + l] = ld(src, j) * su.beta;
      }
      if (!gap_const)
        for (int64_t j = 0; j < ng; ++j) gb[j * W + l] = gv[l].at(i, j + 1);
    }
    row(sb, gb, prev, cur, static_cast<int32_t>(ng), static_cast<int32_t>(i), ln, next);
    if (hidden) {
      float* dst[W];
      for (int l = 0; l < count; ++l) dst[l] = i <= ln.m[l] ? hid[l] + (i - 1) * N : nullptr;
      deinterleave_rows(dst, cur + W, lane_n, count);
    }
    std::swap(prev, cur);
  }
  float* total = static_cast<float*>(out.total);
  T* score = static_cast<T*>(out.score);
  for (int l = 0; l < count; ++l) {
    const int64_t b = pairs[l];
    PairTotal<float> t;
    int64_t am = -1;
    if (su.soft_reduction) {
      t.base = ln.nan[l] ? quiet_nan<float>() : ln.smax[l];
      t.log2sum = ln.nan[l] ? 0.0f : CpuMath::log2(ln.ssum[l]);
    } else {
      t.base = ln.best[l];
      if (ln.bi[l] > 0 && p.reduction == Reduction::Max)
        am = (int64_t(ln.bi[l]) - 1) * N + (ln.bj[l] - 1);
    }
    t.store(total, b);
    st(score, b, t.value() * su.unit);
    out.argmax[b] = am;
  }
}

}  // namespace softsw::cpu::simd
#endif  // SOFTSW_CPU_VECTOR
