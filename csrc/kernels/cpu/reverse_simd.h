// The SIMD reverse pass of the linear-gap backward (soft, float accumulate):
// one SIMD lane per pair, groups of W = 16 pairs as in the SIMD forward
// (forward_simd.h), one row of the group at a time from the last row up. A
// row's H, the row above it, its scores and gap scores are gathered into
// lane-interleaved buffers; the gradients of the row are scattered back. The
// weights are recurrence.h's LinearCell on vector lanes. Each lane only
// counts the cells of its own region (rows 1..mr, cols 1..nr): outside it the
// weights and the seed are zero, so no message leaves the region.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "cell.h"
#include "reverse.h"
#include "setup.h"
#include "simd.h"

#if SOFTSW_CPU_VECTOR
namespace softsw::cpu::simd {

// Per-lane constants of a reverse group.
struct alignas(64) ReverseLanes {
  int32_t mr[W];       // the lane's region (0 for an unused lane)
  int32_t nr[W];
  float total[W];      // soft: e0 = 2^(h - total) * scale; max: 1 at (mr, nr)
  float scale[W];
  float grad[W];       // d loss / d score
};

// Lane-interleaved rows of a group (col j at j * W, col 0 the boundary):
// H of row i and of row i - 1, the messages into row i (from row i + 1) and
// out of it; scores and gap scores of row i and the gradients of row i at
// (j - 1) * W.
struct ReverseRows {
  const float* h;
  const float* h_up;
  const float* s;
  const float* g;
  const float* in;
  float* out;
  float* grad_s;
  float* grad_g;  // nullptr when not wanted
  RowPrefetcher* prefetch;  // the next row's inputs and outputs, one step per column
};

template <int VL, bool SOFT>
SOFTSW_VINLINE void reverse_row_body(const ReverseRows& rows, int32_t n, int32_t i,
                                     const ReverseLanes& ln) {
  // A local copy: the stores (memcpy) could alias `rows`, whose pointers
  // would then be reloaded at every column.
  const ReverseRows r = rows;
  using X = V<VL>;
  using F = typename X::F;
  using I = typename X::I;
  using Cell = LinearCell<Floats<VL>, false, VecMath<VL>>;
  constexpr int K = W / VL;
  const I iv = X::splati(i);
  I rowok[K], nr[K], corner_row[K];
  F right[K], pend[K], total[K], scale[K], gs[K];
  for (int k = 0; k < K; ++k) {
    const I mr = X::loadi(ln.mr + k * VL);
    rowok[k] = iv <= mr;
    corner_row[k] = iv == mr;
    nr[k] = X::loadi(ln.nr + k * VL);
    right[k] = X::splat(0.0f);
    pend[k] = X::splat(0.0f);
    total[k] = X::load(ln.total + k * VL);
    scale[k] = X::load(ln.scale + k * VL);
    gs[k] = X::load(ln.grad + k * VL);
  }
  const F zero = X::splat(0.0f);
  for (int32_t j = n; j >= 1; --j) {
    const I jv = X::splati(j);
    r.prefetch->step();
    for (int k = 0; k < K; ++k) {
      const int64_t c = int64_t(j) * W + k * VL, c1 = c - W;
      const F h = X::load(r.h + c), g = X::load(r.g + c1);
      const Weights<Floats<VL>> w = Cell::normalized_weights(
          h, X::load(r.h_up + c1) + X::load(r.s + c1), X::load(r.h_up + c) + g,
          X::load(r.h + c1) + g);
      const I active = rowok[k] & (jv <= nr[k]);
      F e0;
      if constexpr (SOFT) e0 = X::sel(active, X::exp2(h - total[k]) * scale[k], zero);
      else e0 = X::sel(corner_row[k] & (jv == nr[k]), X::splat(1.0f), zero);
      const F E = e0 + X::load(r.in + c) + right[k];
      const F m1 = E * X::sel(active, w.p1.v, zero);
      const F m2 = E * X::sel(active, w.p2.v, zero);
      const F m3 = E * X::sel(active, w.p3.v, zero);
      X::store(r.grad_s + c1, gs[k] * m1);
      if (r.grad_g) X::store(r.grad_g + c1, gs[k] * (m2 + m3));
      X::store(r.out + c, pend[k] + m2);
      pend[k] = m1;
      right[k] = m3;
    }
  }
  for (int k = 0; k < K; ++k) X::store(r.out + k * VL, pend[k]);
}

using ReverseRowFn = void (*)(const ReverseRows&, int32_t, int32_t, const ReverseLanes&);

template <bool SOFT>
void reverse_row_baseline(const ReverseRows& r, int32_t n, int32_t i, const ReverseLanes& ln) {
  reverse_row_body<4, SOFT>(r, n, i, ln);
}
#if defined(__x86_64__)
template <bool SOFT>
__attribute__((target("avx2,fma"))) void reverse_row_avx2(const ReverseRows& r, int32_t n,
                                                          int32_t i, const ReverseLanes& ln) {
  reverse_row_body<8, SOFT>(r, n, i, ln);
}
template <bool SOFT>
__attribute__((target("avx512f,avx512dq,avx512vl,avx512bw,avx2,fma"))) void reverse_row_avx512(
    const ReverseRows& r, int32_t n, int32_t i, const ReverseLanes& ln) {
  reverse_row_body<8, SOFT>(r, n, i, ln);
}
#endif

template <bool SOFT>
ReverseRowFn pick_reverse_row() {
#if defined(__x86_64__)
  switch (isa_level()) {
    case 2: return &reverse_row_avx512<SOFT>;
    case 1: return &reverse_row_avx2<SOFT>;
    default: break;
  }
#endif
  return &reverse_row_baseline<SOFT>;
}

// Sum of 2^(x[i * N + j] - total) over an (m, n) block: the normalisation of
// the "soft" seeds (seed_scale of reverse.h), along rows.
template <int VL>
SOFTSW_VINLINE float sum_exp2_body(const float* x, int64_t N, int64_t m, int64_t n, float total) {
  using X = V<VL>;
  using F = typename X::F;
  F acc = X::splat(0.0f);
  float tail = 0.0f;
  const F t = X::splat(total);
  for (int64_t i = 0; i < m; ++i) {
    const float* row = x + i * N;
    int64_t j = 0;
    for (; j + VL <= n; j += VL) acc += X::exp2(X::load(row + j) - t);
    for (; j < n; ++j) tail += CpuMath::exp2(row[j] - total);
  }
  for (int l = 0; l < VL; ++l) tail += acc[l];
  return tail;
}
using SumExp2Fn = float (*)(const float*, int64_t, int64_t, int64_t, float);
inline float sum_exp2_baseline(const float* x, int64_t N, int64_t m, int64_t n, float total) {
  return sum_exp2_body<4>(x, N, m, n, total);
}
#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) inline float sum_exp2_avx2(const float* x, int64_t N,
                                                               int64_t m, int64_t n,
                                                               float total) {
  return sum_exp2_body<8>(x, N, m, n, total);
}
#endif
inline float sum_exp2(const float* x, int64_t N, int64_t m, int64_t n, float total) {
#if defined(__x86_64__)
  if (isa_level() >= 1) return sum_exp2_avx2(x, N, m, n, total);
#endif
  return sum_exp2_baseline(x, N, m, n, total);
}

// A pair of a reverse group: its index, region and seed.
struct ReversePair {
  int64_t b;
  int64_t mr, nr;
  float total, scale, grad;
};

// The lanes of a group of `count` pairs (the other lanes idle: region 0), and
// the group's extents mg, ng: the largest region.
inline ReverseLanes lanes_of(const ReversePair* pairs, int count, int64_t& mg, int64_t& ng) {
  ReverseLanes ln;
  mg = ng = 0;
  for (int l = 0; l < W; ++l) {
    const ReversePair q = l < count ? pairs[l] : ReversePair{0, 0, 0, 0.0f, 1.0f, 0.0f};
    ln.mr[l] = static_cast<int32_t>(q.mr);
    ln.nr[l] = static_cast<int32_t>(q.nr);
    ln.total[l] = q.total;
    ln.scale[l] = q.scale;
    ln.grad[l] = q.grad;
    mg = std::max(mg, q.mr);
    ng = std::max(ng, q.nr);
  }
  return ln;
}

// One group of up to W pairs (regions non-empty), start to finish: writes
// every entry of the pairs' gradients (zero outside the regions).
template <typename T>
void reverse_linear_group(const Setup<T>& su, const ReversePair* pairs, int count,
                          ReverseRowFn row, const float* hidden, T* grad_s, T* grad_g,
                          std::vector<float>& mem) {
  const Problem& p = su.p;
  const int64_t N = su.N;
  int64_t mg = 0, ng = 0;
  const ReverseLanes ln = lanes_of(pairs, count, mg, ng);
  const T* S[W] = {};
  GapView<T> gv[W];
  for (int l = 0; l < count; ++l) {
    const ReversePair& q = pairs[l];
    S[l] = static_cast<const T*>(p.scores) + q.b * su.MN;
    gv[l] = su.gap(p.gap_open, q.b);
    fill_outside(grad_s + q.b * su.MN, su.M, N, q.mr, q.nr, 0.0f);
    if (grad_g) fill_outside(grad_g + q.b * su.MN, su.M, N, q.mr, q.nr, 0.0f);
  }
  const int64_t stride = (ng + 1) * W;
  mem.assign(static_cast<size_t>(8 * stride + 16), 0.0f);
  float* base = mem.data();
  while (reinterpret_cast<uintptr_t>(base) % 64 != 0) ++base;
  float *h = base, *h_up = base + stride, *in = base + 2 * stride, *out = base + 3 * stride;
  float *sb = base + 4 * stride, *gb = base + 5 * stride;
  float *os = base + 6 * stride, *og = base + 7 * stride;
  int64_t lane_nr[W];
  for (int l = 0; l < W; ++l) lane_nr[l] = ln.nr[l];
  const float* hid[W] = {};
  for (int l = 0; l < count; ++l) hid[l] = hidden + pairs[l].b * su.MN;
  // Row r of H (1-based; 0: the boundary) into `dst`, cols 1..ng.
  int64_t row_n[W];
  for (int l = 0; l < W; ++l) row_n[l] = ng;
  auto gather_h = [&](int64_t r, float* dst) {
    if (r == 0) {
      std::fill(dst + W, dst + (ng + 1) * W, 0.0f);
      return;
    }
    const float* src[W];
    for (int l = 0; l < count; ++l) src[l] = hid[l] + (r - 1) * N;
    interleave_rows(dst + W, src, row_n, count, 1.0f);
  };
  const bool gap_const = p.gap_open.data == nullptr;
  if (gap_const) std::fill(gb, gb + ng * W, gv[0].value);
  gather_h(mg, h);
  for (int64_t i = mg; i >= 1; --i) {
    gather_h(i - 1, h_up);
    // The next row's H, scores and (float) gradients, spread over this row.
    RowPrefetcher next;
    if (i >= 2) {
      const T* next_s[W] = {};
      for (int l = 0; l < count; ++l) {
        if (i >= 3) next.add(hid[l] + (i - 3) * N);
        if (i - 1 > pairs[l].mr) continue;
        next_s[l] = S[l] + (i - 2) * N;
        if constexpr (std::is_same_v<T, float>) {
          next.add(next_s[l]);
          next.add(grad_s + pairs[l].b * su.MN + (i - 2) * N);
        }
      }
      if constexpr (!std::is_same_v<T, float>) prefetch_rows(next_s, count, ng);
    }
    next.pace(ng, ng);
    if constexpr (std::is_same_v<T, float>) {
      const float* src[W];
      for (int l = 0; l < count; ++l) src[l] = i <= pairs[l].mr ? S[l] + (i - 1) * N : nullptr;
      interleave_rows(sb, src, row_n, count, su.beta);
    }
    for (int l = 0; l < count; ++l) {
      if (i > pairs[l].mr) continue;
      if constexpr (!std::is_same_v<T, float>) {
        const T* src = S[l] + (i - 1) * N;
        for (int64_t j = 0; j < ng; ++j) sb[j * W + l] = ld(src, j) * su.beta;
      }
      if (!gap_const)
        for (int64_t j = 0; j < ng; ++j) gb[j * W + l] = gv[l].at(i, j + 1);
    }
    const ReverseRows rows{h, h_up, sb, gb, in, out, os, grad_g ? og : nullptr, &next};
    row(rows, static_cast<int32_t>(ng), static_cast<int32_t>(i), ln);
    if constexpr (std::is_same_v<T, float>) {
      float* dst[W];
      for (int l = 0; l < count; ++l)
        dst[l] = i <= pairs[l].mr ? grad_s + pairs[l].b * su.MN + (i - 1) * N : nullptr;
      deinterleave_rows(dst, os, lane_nr, count);
      if (grad_g) {
        for (int l = 0; l < count; ++l)
          if (dst[l]) dst[l] += grad_g - grad_s;
        deinterleave_rows(dst, og, lane_nr, count);
      }
    } else {
      for (int l = 0; l < count; ++l) {
        if (i > pairs[l].mr) continue;
        const int64_t k0 = pairs[l].b * su.MN + (i - 1) * N;
        for (int64_t j = 0; j < pairs[l].nr; ++j) st(grad_s, k0 + j, os[j * W + l]);
        if (grad_g)
          for (int64_t j = 0; j < pairs[l].nr; ++j) st(grad_g, k0 + j, og[j * W + l]);
      }
    }
    std::swap(in, out);
    std::swap(h, h_up);
  }
}

}  // namespace softsw::cpu::simd
#endif  // SOFTSW_CPU_VECTOR
