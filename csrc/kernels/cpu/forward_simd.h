// The SIMD log-domain forward (float accumulate: float32, float16, bfloat16):
// linear gaps at any T, affine gaps in hard mode (T = 0: max-plus, exact); one
// SIMD lane per pair of the batch, groups of W = 16 pairs, one row of the
// group at a time (the row's scores are first gathered into a
// lane-interleaved buffer, in kernel units). The W lanes are W / VL native
// vectors (simd.h), independent chains; the instruction set is picked at run
// time, and SOFTSW_CPU_ISA=scalar turns the path off (the scalar forward
// runs). The cells are recurrence.h's LinearCell and AffineCell on vector
// lanes.
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

// Folds a row's cell h (col j) into the "max" reduction of the lanes whose
// pair contains it: the first largest in row-major order, NaN first of all.
template <int VL>
SOFTSW_VINLINE void fold_max(typename V<VL>::F h, typename V<VL>::I inside, typename V<VL>::I iv,
                             typename V<VL>::I jv, typename V<VL>::F& best, typename V<VL>::I& bi,
                             typename V<VL>::I& bj) {
  using X = V<VL>;
  const auto upd = inside & ((h > best) | ((h != h) & (best == best)));
  best = X::sel(upd, h, best);
  bi = X::seli(upd, iv, bi);
  bj = X::seli(upd, jv, bj);
}

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
      if constexpr (!SOFT) fold_max<VL>(h, rowok[k] & (jv <= nl[k]), iv, jv, best[k], bi[k], bj[k]);
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
SOFTSW_TARGET_AVX2 void row_avx2(const float* s, const float* g,
                                                  const float* prev, float* cur, int32_t n,
                                                  int32_t i, Lanes& ln, RowPrefetcher& pf) {
  row_body<8, HARD, SOFT>(s, g, prev, cur, n, i, ln, pf);
}
template <bool HARD, bool SOFT>
SOFTSW_TARGET_AVX512 void row_avx512(
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

// One row of an affine group in hard mode (forward_affine of forward.h on
// the lanes): C, A, U of the row above and of the row (col j at j * W, col 0
// the boundary), L of the row, the row's scores and gap scores at
// (j - 1) * W; the "max" reduction on the way.
struct AffineLogRows {
  const float *s, *open, *extend;
  const float *c_up, *a_up, *u_up;
  float *c, *a, *u, *l;
};

template <int VL>
SOFTSW_VINLINE void affine_hard_row_body(const AffineLogRows& rows, int32_t n, int32_t i,
                                         Lanes& ln, RowPrefetcher& pf) {
  const AffineLogRows r = rows;  // a local copy: the stores could alias `rows`
  using X = V<VL>;
  using F = typename X::F;
  using I = typename X::I;
  using Fl = Floats<VL>;
  using Lin = LinearCell<Fl, true, VecMath<VL>>;
  using Aff = AffineCell<Fl, true, VecMath<VL>>;
  constexpr int K = W / VL;
  const I iv = X::splati(i);
  I nl[K], rowok[K], bi[K], bj[K];
  F cd[K], bl[K], ll[K], best[K];
  for (int k = 0; k < K; ++k) {
    nl[k] = X::loadi(ln.n + k * VL);
    rowok[k] = iv <= X::loadi(ln.m + k * VL);
    cd[k] = X::load(r.c_up + k * VL);
    bl[k] = X::splat(0.0f);  // B[i, 0] = 0, L[i, 0] = -inf
    ll[k] = X::splat(-kInf<float>);
    best[k] = X::load(ln.best + k * VL);
    bi[k] = X::loadi(ln.bi + k * VL);
    bj[k] = X::loadi(ln.bj + k * VL);
  }
  for (int32_t j = 1; j <= n; ++j) {
    const I jv = X::splati(j);
    pf.step();
    for (int k = 0; k < K; ++k) {
      const int64_t c = int64_t(j) * W + k * VL, c1 = c - W;
      const Fl o = X::load(r.open + c1), e = X::load(r.extend + c1);
      const Fl d = Fl(cd[k]) + X::load(r.s + c1);
      const Fl u = Aff::gap(Fl(X::load(r.a_up + c)) + o, Fl(X::load(r.u_up + c)) + e);
      const Fl l = Aff::gap(Fl(bl[k]) + o, Fl(ll[k]) + e);
      const F h = Lin::value(d, u, l).v;
      X::store(r.c + c, h);
      X::store(r.a + c, Aff::prime(d, l).v);
      X::store(r.u + c, u.v);
      X::store(r.l + c, l.v);
      cd[k] = X::load(r.c_up + c);
      bl[k] = Aff::prime(d, u).v;
      ll[k] = l.v;
      fold_max<VL>(h, rowok[k] & (jv <= nl[k]), iv, jv, best[k], bi[k], bj[k]);
    }
  }
  for (int k = 0; k < K; ++k) {
    X::store(ln.best + k * VL, best[k]);
    X::storei(ln.bi + k * VL, bi[k]);
    X::storei(ln.bj + k * VL, bj[k]);
  }
}

using AffineRowFn = void (*)(const AffineLogRows&, int32_t, int32_t, Lanes&, RowPrefetcher&);

inline void affine_hard_row_baseline(const AffineLogRows& r, int32_t n, int32_t i, Lanes& ln,
                                     RowPrefetcher& pf) {
  affine_hard_row_body<4>(r, n, i, ln, pf);
}
#if defined(__x86_64__)
SOFTSW_TARGET_AVX2 inline void affine_hard_row_avx2(const AffineLogRows& r,
                                                                     int32_t n, int32_t i,
                                                                     Lanes& ln,
                                                                     RowPrefetcher& pf) {
  affine_hard_row_body<8>(r, n, i, ln, pf);
}
#endif
// AVX2 for AVX-512 too: 512-bit vectors measured no faster (simd.h).
inline AffineRowFn pick_affine_hard_row() {
#if defined(__x86_64__)
  if (isa_level() >= 1) return &affine_hard_row_avx2;
#endif
  return &affine_hard_row_baseline;
}

// The row kernels of a log-domain group: `linear` for linear gaps, `affine`
// (hard mode) for affine gaps.
struct LogRowFns {
  RowFn linear = nullptr;
  AffineRowFn affine = nullptr;
};

// One group of up to W pairs (valid and non-empty), start to finish: linear
// gaps (fns.linear), or affine gaps in hard mode (fns.affine). `hidden`: the
// state (linear: H; affine: the C, U, L planes), or nullptr.
template <typename T>
void forward_log_group(const Setup<T>& su, const int64_t* pairs, int count, const LogRowFns& fns,
                       float* hidden, const ForwardOutputs& out, std::vector<float>& mem) {
  const Problem& p = su.p;
  const int64_t N = su.N, MN = su.MN;
  const bool affine = p.affine;
  Lanes ln;
  const T* S[W] = {};
  GapView<T> go[W], ge[W];
  float* hid[W] = {};
  int64_t mg = 0, ng = 0;
  for (int l = 0; l < W; ++l) {
    int64_t m = 0, n = 0;
    if (l < count) {
      const int64_t b = pairs[l];
      su.extents(b, m, n);
      S[l] = static_cast<const T*>(p.scores) + b * MN;
      go[l] = su.gap(p.gap_open, b);
      if (affine) ge[l] = su.gap(p.gap_extend, b);
      hid[l] = hidden ? hidden + b * su.planes * MN : nullptr;
      if (hid[l])
        for (int64_t k = 0; k < su.planes; ++k)
          fill_outside<float>(hid[l] + k * MN, su.M, N, m, n, 0.0f);
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
  // Lane-interleaved rows: scores and gap scores of the row (linear: one gap
  // row), then the nodes of the row above and of the row (linear: H; affine:
  // C, A, U, and L of the row).
  const int64_t stride = (ng + 1) * W;
  const int rows = affine ? 10 : 4;
  mem.assign(static_cast<size_t>(rows * stride + 16), 0.0f);
  float* base = mem.data();
  while (reinterpret_cast<uintptr_t>(base) % 64 != 0) ++base;
  float* buf[10];
  for (int k = 0; k < rows; ++k) buf[k] = base + k * stride;
  float *sb = buf[0], *ob = buf[1], *eb = affine ? buf[2] : nullptr;
  float *prev = buf[affine ? 3 : 2], *cur = buf[affine ? 4 : 3];  // H, or C
  float *a_prev = nullptr, *a_cur = nullptr, *u_prev = nullptr, *u_cur = nullptr, *lb = nullptr;
  if (affine) {
    a_prev = buf[5];
    a_cur = buf[6];
    u_prev = buf[7];
    u_cur = buf[8];
    lb = buf[9];
    std::fill(u_prev, u_prev + stride, -kInf<float>);  // row 0: U = -inf, C = A = 0
  }
  const bool gap_const = p.gap_open.data == nullptr && (!affine || p.gap_extend.data == nullptr);
  if (gap_const) {
    std::fill(ob, ob + ng * W, go[0].value);
    if (affine) std::fill(eb, eb + ng * W, ge[0].value);
  }
  for (int64_t i = 1; i <= mg; ++i) {
    // The next row's scores (float: spread over this row, with its state) ...
    RowPrefetcher next;
    if constexpr (std::is_same_v<T, float>) {
      for (int l = 0; l < count; ++l) {
        if (i >= ln.m[l]) continue;
        next.add(S[l] + i * N);
        if (hid[l])
          for (int64_t k = 0; k < su.planes; ++k) next.add(hid[l] + k * MN + i * N);
      }
      next.pace(ng, ng);
    } else {  // ... else in one burst
      const T* rows_next[W];
      for (int l = 0; l < count; ++l) rows_next[l] = i < ln.m[l] ? S[l] + i * N : nullptr;
      prefetch_rows(rows_next, count, ng);
    }
    if constexpr (std::is_same_v<T, float>) {
      const float* src[W] = {};
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
        for (int64_t j = 0; j < ng; ++j) {
          ob[j * W + l] = go[l].at(i, j + 1);
          if (affine) eb[j * W + l] = ge[l].at(i, j + 1);
        }
    }
    if (affine) {
      const AffineLogRows r{sb, ob, eb, prev, a_prev, u_prev, cur, a_cur, u_cur, lb};
      fns.affine(r, static_cast<int32_t>(ng), static_cast<int32_t>(i), ln, next);
    } else {
      fns.linear(sb, ob, prev, cur, static_cast<int32_t>(ng), static_cast<int32_t>(i), ln, next);
    }
    if (hidden) {
      const float* planes[3] = {cur, u_cur, lb};
      for (int64_t k = 0; k < su.planes; ++k) {
        float* dst[W];
        for (int l = 0; l < count; ++l)
          dst[l] = i <= ln.m[l] ? hid[l] + k * MN + (i - 1) * N : nullptr;
        deinterleave_rows(dst, planes[k] + W, lane_n, count);
      }
    }
    std::swap(prev, cur);
    if (affine) {
      std::swap(a_prev, a_cur);
      std::swap(u_prev, u_cur);
    }
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
