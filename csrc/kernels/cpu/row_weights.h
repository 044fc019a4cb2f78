// The soft weights of one row of one pair (linear gaps, float accumulate),
// computed with SIMD along the row: the scalar reverse and tangent passes
// (lone pairs, the double backward) then only run their recursions cell by
// cell. The weights of a cell depend on H alone, not on what the recursion
// carries, so a whole row of them can be computed first. Same cell as every
// other pass: recurrence.h's LinearCell, on vector lanes (simd.h).
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "cell.h"
#include "setup.h"
#include "simd.h"

namespace softsw::cpu {

// Row i's weights at index j = 1..n (index 0 unused): p1, p2, p3 and, when
// seeded, e0 = 2^(H - total) * scale (the soft reduction's seed).
struct RowWeights {
  const float *p1, *p2, *p3, *e0;
};

#if SOFTSW_CPU_VECTOR
namespace simd {

// h, h_up: H of rows i and i - 1 at index 0..n (index 0: the boundary 0);
// s, g: scores and gap scores (kernel units) at index 1..n. Every array is
// readable up to index n + 8.
template <int VL>
SOFTSW_VINLINE void row_weights_body(const float* h, const float* h_up, const float* s,
                                     const float* g, int64_t n, float total, float scale,
                                     bool seeded, float* p1, float* p2, float* p3, float* e0) {
  using X = V<VL>;
  using Cell = LinearCell<Floats<VL>, false, VecMath<VL>>;
  for (int64_t j = 1; j <= n; j += VL) {
    const typename X::F hh = X::load(h + j), gg = X::load(g + j);
    const Weights<Floats<VL>> w = Cell::normalized_weights(
        hh, X::load(h_up + j - 1) + X::load(s + j), X::load(h_up + j) + gg, X::load(h + j - 1) + gg);
    X::store(p1 + j, w.p1.v);
    X::store(p2 + j, w.p2.v);
    X::store(p3 + j, w.p3.v);
    if (seeded) X::store(e0 + j, X::exp2(hh - total) * scale);
  }
}

using RowWeightsFn = void (*)(const float*, const float*, const float*, const float*, int64_t,
                              float, float, bool, float*, float*, float*, float*);
inline void row_weights_baseline(const float* h, const float* h_up, const float* s,
                                 const float* g, int64_t n, float total, float scale,
                                 bool seeded, float* p1, float* p2, float* p3, float* e0) {
  row_weights_body<4>(h, h_up, s, g, n, total, scale, seeded, p1, p2, p3, e0);
}
#if defined(__x86_64__)
SOFTSW_TARGET_AVX2 inline void row_weights_avx2(
    const float* h, const float* h_up, const float* s, const float* g, int64_t n, float total,
    float scale, bool seeded, float* p1, float* p2, float* p3, float* e0) {
  row_weights_body<8>(h, h_up, s, g, n, total, scale, seeded, p1, p2, p3, e0);
}
#endif
inline RowWeightsFn pick_row_weights() {
#if defined(__x86_64__)
  if (isa_level() >= 1) return &row_weights_avx2;
#endif
  return &row_weights_baseline;
}

}  // namespace simd
#endif  // SOFTSW_CPU_VECTOR

// Whether the scalar passes of pair `pv` take their soft weights from here.
template <typename T, bool HARD>
bool row_weights_apply() {
#if SOFTSW_CPU_VECTOR
  return !HARD && std::is_same_v<Acc<T>, float> && simd::isa_level() >= 0;
#else
  return false;
#endif
}

// Row i (1-based, 1..n columns) of pair `pv` with hidden `hid` (row stride
// pv.N): its weights, and its seeds when `seeded`.
template <typename T>
RowWeights row_weights(const PairView<T>& pv, const float* hid, int64_t i, int64_t n,
                       bool seeded, float total, float scale, Scratch<float>& sc) {
  RowWeights r{};
#if SOFTSW_CPU_VECTOR
  const int64_t len = n + 1 + 8;
  float *h = sc.row_h.get(len), *h_up = sc.row_h_up.get(len);
  float *s = sc.row_s.get(len), *g = sc.row_g.get(len);
  float *p1 = sc.row_p1.get(len), *p2 = sc.row_p2.get(len), *p3 = sc.row_p3.get(len);
  float* e0 = sc.row_e0.get(len);
  const int64_t N = pv.N;
  h[0] = h_up[0] = 0.0f;
  std::copy(hid + (i - 1) * N, hid + (i - 1) * N + n, h + 1);
  if (i >= 2) std::copy(hid + (i - 2) * N, hid + (i - 2) * N + n, h_up + 1);
  else std::fill(h_up + 1, h_up + n + 1, 0.0f);
  for (int64_t j = 1; j <= n; ++j) {
    s[j] = pv.s(i, j);
    g[j] = pv.open.at(i, j);
  }
  for (float* a : {h, h_up, s, g}) std::fill(a + n + 1, a + len, 0.0f);
  static const simd::RowWeightsFn fn = simd::pick_row_weights();
  fn(h, h_up, s, g, n, total, scale, seeded, p1, p2, p3, e0);
  r = RowWeights{p1, p2, p3, e0};
#else
  (void)pv, (void)hid, (void)i, (void)n, (void)seeded, (void)total, (void)scale, (void)sc;
#endif
  return r;
}

}  // namespace softsw::cpu
