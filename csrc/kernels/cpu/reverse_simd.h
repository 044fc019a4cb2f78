// The SIMD reverse pass of the linear-gap backward (soft), templated on the
// accumulate type A (float: float32, float16, bfloat16; double: float64, as
// the probability-domain forward, forward_probability.h): one SIMD lane per
// pair, groups of W = 16 pairs as in the SIMD forward (forward_simd.h), one
// row of the group at a time from the last row up. A
// row's H, the row above it, its scores and gap scores are gathered into
// lane-interleaved buffers; the gradients of the row are scattered back. The
// weights are recurrence.h's LinearCell on vector lanes. Each lane only
// counts the cells of its own region (rows 1..mr, cols 1..nr): outside it the
// weights and the seed are zero, so no message leaves the region.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include "cell.h"
#include "reverse.h"
#include "setup.h"
#include "simd.h"

#if SOFTSW_CPU_VECTOR
namespace softsw::cpu::simd {

// Per-lane constants of a reverse group; integers as wide as A's lanes
// (IntOf).
template <typename A>
struct alignas(64) ReverseLanesOf {
  using Int = IntOf<A>;
  Int mr[W];       // the lane's region (0 for an unused lane)
  Int nr[W];
  A total[W];      // soft: e0 = 2^(h - total) * scale; max: 1 at (mr, nr)
  A scale[W];
  A grad[W];       // d loss / d score
};
using ReverseLanes = ReverseLanesOf<float>;

// Lane-interleaved rows of a group (col j at j * W, col 0 the boundary):
// H of row i and of row i - 1, the messages into row i (from row i + 1) and
// out of it; scores and gap scores of row i and the gradients of row i at
// (j - 1) * W.
template <typename A>
struct ReverseRowsOf {
  const A* h;
  const A* h_up;
  const A* s;
  const A* g;
  const A* in;
  A* out;
  A* grad_s;
  A* grad_g;  // nullptr when not wanted
  RowPrefetcher* prefetch;  // the next row's inputs and outputs, one step per column
  // A lone pair on column blocks (reverse_linear_long_pair): per lane, the
  // messages from the block to the right (into the row's last column from
  // its right neighbour, and the diagonal one into the row above, which
  // starts the row's pending message), and the lane's own message to the
  // left out of its first column. nullptr: none (the row's right border).
  const A* right_in = nullptr;
  const A* pend_in = nullptr;
  A* right_out = nullptr;
};

template <typename A, int VL, bool SOFT>
SOFTSW_VINLINE void reverse_row_body(const ReverseRowsOf<A>& rows, int32_t n, int32_t i,
                                     const ReverseLanesOf<A>& ln) {
  // A local copy: the stores (memcpy) could alias `rows`, whose pointers
  // would then be reloaded at every column.
  const ReverseRowsOf<A> r = rows;
  using X = Vec<A, VL>;
  using F = typename X::F;
  using I = typename X::I;
  using Cell = LinearCell<Packed<A, VL>, false, PackedMath<A, VL>>;
  constexpr int K = W / VL;
  const I iv = X::splati(i);
  I rowok[K], nr[K], corner_row[K];
  F right[K], pend[K], total[K], scale[K], gs[K];
  for (int k = 0; k < K; ++k) {
    const I mr = X::loadi(ln.mr + k * VL);
    rowok[k] = iv <= mr;
    corner_row[k] = iv == mr;
    nr[k] = X::loadi(ln.nr + k * VL);
    right[k] = r.right_in ? X::load(r.right_in + k * VL) : X::splat(A(0));
    pend[k] = r.pend_in ? X::load(r.pend_in + k * VL) : X::splat(A(0));
    total[k] = X::load(ln.total + k * VL);
    scale[k] = X::load(ln.scale + k * VL);
    gs[k] = X::load(ln.grad + k * VL);
  }
  const F zero = X::splat(A(0));
  for (int32_t j = n; j >= 1; --j) {
    const I jv = X::splati(j);
    r.prefetch->step();
    for (int k = 0; k < K; ++k) {
      const int64_t c = int64_t(j) * W + k * VL, c1 = c - W;
      const F h = X::load(r.h + c), g = X::load(r.g + c1);
      const Weights<Packed<A, VL>> w = Cell::normalized_weights(
          h, X::load(r.h_up + c1) + X::load(r.s + c1), X::load(r.h_up + c) + g,
          X::load(r.h + c1) + g);
      const I active = rowok[k] & (jv <= nr[k]);
      F e0;
      if constexpr (SOFT) e0 = X::sel(active, X::exp2(h - total[k]) * scale[k], zero);
      else e0 = X::sel(corner_row[k] & (jv == nr[k]), X::splat(A(1)), zero);
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
  for (int k = 0; k < K; ++k) {
    X::store(r.out + k * VL, pend[k]);
    if (r.right_out) X::store(r.right_out + k * VL, right[k]);
  }
}

template <typename A>
using ReverseRowFnOf = void (*)(const ReverseRowsOf<A>&, int32_t, int32_t, const ReverseLanesOf<A>&);
using ReverseRowFn = ReverseRowFnOf<float>;

// A row of VBYTES-byte vectors (16: the baseline, 32: AVX2 and AVX-512VL):
// 4 or 8 floats, 2 or 4 doubles to a vector.
template <typename A, int VBYTES, bool SOFT>
SOFTSW_VINLINE void reverse_row_of(const ReverseRowsOf<A>& r, int32_t n, int32_t i,
                                   const ReverseLanesOf<A>& ln) {
  reverse_row_body<A, VBYTES / static_cast<int>(sizeof(A)), SOFT>(r, n, i, ln);
}

template <typename A, bool SOFT>
void reverse_row_baseline(const ReverseRowsOf<A>& r, int32_t n, int32_t i,
                          const ReverseLanesOf<A>& ln) {
  reverse_row_of<A, 16, SOFT>(r, n, i, ln);
}
#if defined(__x86_64__)
template <typename A, bool SOFT>
SOFTSW_TARGET_AVX2 void reverse_row_avx2(const ReverseRowsOf<A>& r, int32_t n, int32_t i,
                                         const ReverseLanesOf<A>& ln) {
  reverse_row_of<A, 32, SOFT>(r, n, i, ln);
}
template <typename A, bool SOFT>
SOFTSW_TARGET_AVX512 void reverse_row_avx512(const ReverseRowsOf<A>& r, int32_t n, int32_t i,
                                             const ReverseLanesOf<A>& ln) {
  reverse_row_of<A, 32, SOFT>(r, n, i, ln);
}
#endif

template <typename A, bool SOFT>
ReverseRowFnOf<A> pick_reverse_row() {
#if defined(__x86_64__)
  switch (isa_level()) {
    case 2: return &reverse_row_avx512<A, SOFT>;
    case 1: return &reverse_row_avx2<A, SOFT>;
    default: break;
  }
#endif
  return &reverse_row_baseline<A, SOFT>;
}

// Sum of 2^(x[i * N + j] - total) over an (m, n) block: the normalisation of
// the "soft" seeds (seed_scale of reverse.h), along rows.
template <typename A, int VL>
SOFTSW_VINLINE A sum_exp2_body(const A* x, int64_t N, int64_t m, int64_t n, A total) {
  using X = Vec<A, VL>;
  using F = typename X::F;
  F acc = X::splat(A(0));
  A tail = A(0);
  const F t = X::splat(total);
  for (int64_t i = 0; i < m; ++i) {
    const A* row = x + i * N;
    int64_t j = 0;
    for (; j + VL <= n; j += VL) acc += X::exp2(X::load(row + j) - t);
    for (; j < n; ++j) tail += CpuMath::exp2(row[j] - total);
  }
  for (int l = 0; l < VL; ++l) tail += acc[l];
  return tail;
}
template <typename A>
inline A sum_exp2_baseline(const A* x, int64_t N, int64_t m, int64_t n, A total) {
  return sum_exp2_body<A, 16 / static_cast<int>(sizeof(A))>(x, N, m, n, total);
}
#if defined(__x86_64__)
template <typename A>
SOFTSW_TARGET_AVX2 inline A sum_exp2_avx2(const A* x, int64_t N, int64_t m, int64_t n, A total) {
  return sum_exp2_body<A, 32 / static_cast<int>(sizeof(A))>(x, N, m, n, total);
}
#endif
template <typename A>
inline A sum_exp2(const A* x, int64_t N, int64_t m, int64_t n, A total) {
#if defined(__x86_64__)
  if (isa_level() >= 1) return sum_exp2_avx2(x, N, m, n, total);
#endif
  return sum_exp2_baseline(x, N, m, n, total);
}

// A pair of a reverse group: its index, region and seed.
template <typename A>
struct ReversePairOf {
  int64_t b;
  int64_t mr, nr;
  A total, scale, grad;
};
using ReversePair = ReversePairOf<float>;

// The lanes of a group of `count` pairs (the other lanes idle: region 0), and
// the group's extents mg, ng: the largest region.
template <typename A>
ReverseLanesOf<A> lanes_of(const ReversePairOf<A>* pairs, int count, int64_t& mg, int64_t& ng) {
  using Int = IntOf<A>;
  ReverseLanesOf<A> ln;
  mg = ng = 0;
  for (int l = 0; l < W; ++l) {
    const ReversePairOf<A> q = l < count ? pairs[l] : ReversePairOf<A>{0, 0, 0, A(0), A(1), A(0)};
    ln.mr[l] = static_cast<Int>(q.mr);
    ln.nr[l] = static_cast<Int>(q.nr);
    ln.total[l] = q.total;
    ln.scale[l] = q.scale;
    ln.grad[l] = q.grad;
    mg = std::max(mg, q.mr);
    ng = std::max(ng, q.nr);
  }
  return ln;
}

// Row i of a group's output `g` ((B, M, N); nullptr: not wanted) from the
// lane-interleaved row `src`: cols 1..lane_n[l] of each pair whose region has
// row i.
template <typename T, typename A>
void scatter_row(const Setup<T>& su, const ReversePairOf<A>* pairs, int count, int64_t i,
                 const int64_t* lane_n, const A* src, T* g) {
  if (!g) return;
  T* dst[W] = {};
  for (int l = 0; l < count; ++l)
    if (i <= pairs[l].mr) dst[l] = g + pairs[l].b * su.MN + (i - 1) * su.N;
  deinterleave_rows_of(dst, src, lane_n, count);
}

// One group of up to W pairs (regions non-empty), start to finish: writes
// every entry of the pairs' gradients (zero outside the regions).
template <typename T>
void reverse_linear_group(const Setup<T>& su, const ReversePairOf<Acc<T>>* pairs, int count,
                          ReverseRowFnOf<Acc<T>> row, const Acc<T>* hidden, T* grad_s, T* grad_g,
                          std::vector<Acc<T>>& mem) {
  using A = Acc<T>;
  // Scores and gradients in the accumulate type (float32, float64) travel
  // through the row transposes, paced over the rows; the others are converted
  // element by element.
  constexpr bool kRowsOfA = std::is_same_v<T, A>;
  const Problem& p = su.p;
  const int64_t N = su.N;
  int64_t mg = 0, ng = 0;
  const ReverseLanesOf<A> ln = lanes_of(pairs, count, mg, ng);
  const T* S[W] = {};
  GapView<T> gv[W];
  for (int l = 0; l < count; ++l) {
    const ReversePairOf<A>& q = pairs[l];
    S[l] = static_cast<const T*>(p.scores) + q.b * su.MN;
    gv[l] = su.gap(p.gap_open, q.b);
    fill_outside(grad_s + q.b * su.MN, su.M, N, q.mr, q.nr, A(0));
    if (grad_g) fill_outside(grad_g + q.b * su.MN, su.M, N, q.mr, q.nr, A(0));
  }
  const int64_t stride = (ng + 1) * W;
  mem.assign(static_cast<size_t>(8 * stride + 64 / sizeof(A)), A(0));
  A* base = mem.data();
  while (reinterpret_cast<uintptr_t>(base) % 64 != 0) ++base;
  A *h = base, *h_up = base + stride, *in = base + 2 * stride, *out = base + 3 * stride;
  A *sb = base + 4 * stride, *gb = base + 5 * stride;
  A *os = base + 6 * stride, *og = base + 7 * stride;
  int64_t lane_nr[W];
  for (int l = 0; l < W; ++l) lane_nr[l] = ln.nr[l];
  const A* hid[W] = {};
  for (int l = 0; l < count; ++l) hid[l] = hidden + pairs[l].b * su.MN;
  // Row r of H (1-based; 0: the boundary) into `dst`, cols 1..ng.
  int64_t row_n[W];
  for (int l = 0; l < W; ++l) row_n[l] = ng;
  auto gather_h = [&](int64_t r, A* dst) {
    if (r == 0) {
      std::fill(dst + W, dst + (ng + 1) * W, A(0));
      return;
    }
    const A* src[W] = {};
    for (int l = 0; l < count; ++l) src[l] = hid[l] + (r - 1) * N;
    interleave_rows(dst + W, src, row_n, count, A(1));
  };
  const bool gap_const = p.gap_open.data == nullptr;
  if (gap_const) std::fill(gb, gb + ng * W, gv[0].value);
  gather_h(mg, h);
  for (int64_t i = mg; i >= 1; --i) {
    gather_h(i - 1, h_up);
    // The next row's H, scores and gradients, spread over this row (rows of
    // A), else in one burst.
    RowPrefetcher next;
    if (i >= 2) {
      const T* next_s[W] = {};
      for (int l = 0; l < count; ++l) {
        if (i >= 3) next.add(hid[l] + (i - 3) * N);
        if (i - 1 > pairs[l].mr) continue;
        next_s[l] = S[l] + (i - 2) * N;
        if constexpr (kRowsOfA) {
          next.add(next_s[l]);
          next.add(grad_s + pairs[l].b * su.MN + (i - 2) * N);
        }
      }
      if constexpr (!kRowsOfA) prefetch_rows(next_s, count, ng);
    }
    next.pace(ng, ng, sizeof(A));
    const T* src[W] = {};
    for (int l = 0; l < count; ++l) src[l] = i <= pairs[l].mr ? S[l] + (i - 1) * N : nullptr;
    interleave_rows_of(sb, src, row_n, count, su.beta);
    if (!gap_const)
      for (int l = 0; l < count; ++l)
        if (i <= pairs[l].mr)
          for (int64_t j = 0; j < ng; ++j) gb[j * W + l] = gv[l].at(i, j + 1);
    const ReverseRowsOf<A> rows{h, h_up, sb, gb, in, out, os, grad_g ? og : nullptr, &next};
    row(rows, static_cast<int32_t>(ng), static_cast<int32_t>(i), ln);
    scatter_row(su, pairs, count, i, lane_nr, os, grad_s);
    scatter_row(su, pairs, count, i, lane_nr, og, grad_g);
    std::swap(in, out);
    std::swap(h, h_up);
  }
}

// A lone pair (its region mr x nr) on column blocks, one per lane: the
// reverse of the forward's probability_long_pair. Block l holds columns
// l * nb + 1 .. of the region; it runs row i at step t = (mr - i) +
// (lanes - 1 - l) + 1, one step after block l + 1 ran the same row, whose
// messages into it (from its first column: to the right neighbour of row i,
// and diagonally into row i - 1) it takes as its row's start. The row kernel
// sees step t as row t: a lane is in its rows when t <= its mr (t + 1, or t
// at the region's corner, where "max" seeds 1).
template <typename T>
void reverse_linear_long_pair(const Setup<T>& su, const ReversePairOf<Acc<T>>& q,
                              ReverseRowFnOf<Acc<T>> row, const Acc<T>* hidden, T* grad_s,
                              T* grad_g, std::vector<Acc<T>>& mem) {
  using A = Acc<T>;
  const Problem& p = su.p;
  const int64_t N = su.N, mr = q.mr, nr = q.nr;
  const int64_t nb = (nr + W - 1) / W, lanes = (nr + nb - 1) / nb;
  int64_t width[W], first[W];
  for (int l = 0; l < W; ++l) {
    first[l] = l * nb;  // the block's first column, 0-based
    width[l] = l < lanes ? std::min(nb, nr - l * nb) : 0;
  }
  const T* S = static_cast<const T*>(p.scores) + q.b * su.MN;
  const A* H = hidden + q.b * su.MN;
  T* gS = grad_s + q.b * su.MN;
  T* gG = grad_g ? grad_g + q.b * su.MN : nullptr;
  for (T* g : {gS, gG})
    if (g) fill_outside(g, su.M, N, mr, nr, A(0));
  const GapView<T> gap = su.gap(p.gap_open, q.b);
  const int64_t stride = (nb + 1) * W;
  mem.assign(static_cast<size_t>(8 * stride + 6 * W + 64 / sizeof(A)), A(0));
  A* base = mem.data();
  while (reinterpret_cast<uintptr_t>(base) % 64 != 0) ++base;
  A *h = base, *h_up = base + stride, *in = base + 2 * stride, *out = base + 3 * stride;
  A *sb = base + 4 * stride, *gb = base + 5 * stride, *os = base + 6 * stride;
  A* og = base + 7 * stride;
  A *right_in = base + 8 * stride, *pend_in = right_in + W, *right_out = pend_in + W;
  ReverseLanesOf<A> ln;
  for (int l = 0; l < W; ++l) {
    ln.total[l] = q.total;
    ln.scale[l] = q.scale;
    ln.grad[l] = q.grad;
  }
  const bool gap_const = p.gap_open.data == nullptr;
  if (gap_const) std::fill(gb, gb + nb * W, gap.value);
  // Row r (1-based; 0: the boundary) of H for each busy lane, with the
  // column left of its block at local column 0 (0 left of the region).
  auto gather_h = [&](const int64_t* rows, A* dst) {
    const A* src[W] = {};
    int64_t n[W] = {};
    for (int l = 0; l < lanes; ++l) {
      const int64_t r = rows[l];
      if (r < 0) continue;
      if (r == 0) {
        for (int64_t j = 0; j <= width[l]; ++j) dst[j * W + l] = A(0);
        continue;
      }
      if (l == 0) {
        dst[l] = A(0);
        src[l] = H + (r - 1) * N;
      } else {
        src[l] = H + (r - 1) * N + first[l] - 1;
      }
      n[l] = l == 0 ? width[l] : width[l] + 1;
    }
    // Lane 0 starts at local column 1, the others at local column 0.
    A* lane0 = dst + W;
    const A* src0[W] = {src[0]};
    const int64_t n0[W] = {n[0]};
    interleave_rows(lane0, src0, n0, 1, A(1));
    src[0] = nullptr;
    n[0] = 0;
    interleave_rows(dst, src, n, lanes, A(1));
  };
  const int64_t steps = mr + lanes - 1;
  for (int64_t t = 1; t <= steps; ++t) {
    int64_t row_of[W], up_of[W];
    using Int = IntOf<A>;
    for (int l = 0; l < W; ++l) {
      const int64_t i = mr - (t - 1 - (lanes - 1 - l));
      const bool busy = l < lanes && i >= 1 && i <= mr;
      row_of[l] = busy ? i : -1;
      up_of[l] = busy ? i - 1 : -1;
      const bool corner = busy && i == mr && l == lanes - 1;
      ln.mr[l] = busy ? static_cast<Int>(corner ? t : t + 1) : 0;
      ln.nr[l] = static_cast<Int>(busy ? width[l] : 0);
      // From the block to the right, which ran this row the step before.
      right_in[l] = l + 1 < lanes ? right_out[l + 1] : A(0);
      pend_in[l] = l + 1 < lanes ? out[l + 1] : A(0);
    }
    // `out` of the previous step is this step's `in` (each lane's row below),
    // and its `h_up` this step's `h`, but for a lane that starts its rows.
    std::swap(in, out);
    std::swap(h, h_up);
    int64_t starts[W];
    for (int l = 0; l < W; ++l) starts[l] = row_of[l] == mr ? mr : -1;
    gather_h(starts, h);
    gather_h(up_of, h_up);
    // What the next step reads (each lane's next row above and its scores),
    // spread over this step's columns.
    RowPrefetcher next;
    for (int l = 0; l < lanes; ++l) {
      const int64_t i = row_of[l] >= 0 ? row_of[l] : (t + 1 > steps ? -1 : mr + 1);
      if (i - 2 >= 1) next.add(H + (i - 3) * N + first[l]);
      if (i - 1 >= 1) next.add(S + (i - 2) * N + first[l]);
    }
    next.pace(nb, nb, sizeof(A));
    // Each busy lane's row of its block in an (M, N) array `a`, and its width.
    auto block_rows = [&](auto* a, auto** ptr, int64_t* n) {
      for (int l = 0; l < lanes; ++l) {
        ptr[l] = row_of[l] > 0 ? a + (row_of[l] - 1) * N + first[l] : nullptr;
        n[l] = row_of[l] > 0 ? width[l] : 0;
      }
    };
    {
      const T* src[W] = {};
      int64_t n[W] = {};
      block_rows(S, src, n);
      interleave_rows_of(sb, src, n, lanes, su.beta);
      if (!gap_const)
        for (int l = 0; l < lanes; ++l)
          for (int64_t j = 0; j < n[l]; ++j) gb[j * W + l] = gap.at(row_of[l], first[l] + j + 1);
    }
    ReverseRowsOf<A> rows{h, h_up, sb, gb, in, out, os, gG ? og : nullptr, &next};
    rows.right_in = right_in;
    rows.pend_in = pend_in;
    rows.right_out = right_out;
    row(rows, static_cast<int32_t>(nb), static_cast<int32_t>(t), ln);
    const std::pair<T*, const A*> outs[] = {{gS, os}, {gG, og}};
    for (const auto& [g, src] : outs) {
      if (!g) continue;
      T* dst[W] = {};
      int64_t n[W] = {};
      block_rows(g, dst, n);
      deinterleave_rows_of(dst, src, n, lanes);
    }
  }
}

}  // namespace softsw::cpu::simd
#endif  // SOFTSW_CPU_VECTOR
