// The affine weights of one row of one pair (float accumulate, T > 0, a pair
// inside the range rule of probability.h), computed with SIMD along the row
// from the probability-domain shares of its cells (AffineProbabilityWeights):
// the scalar tangent and reverse passes (the double backward, a lone pair's
// backward) then only run their recursions cell by cell. The counterpart of
// row_weights.h for affine gaps.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "../probability.h"
#include "cell.h"
#include "setup.h"
#include "simd.h"

namespace softsw::cpu {

// Row i's weights at index j = 1..n (index 0 unused), the node order of
// reverse.h's AffineWeights: C (D, U, L), A (D, L), B (D, U), U and L (open,
// extend). All zero at a cell whose C the forward flushed to -inf.
struct AffineRowWeights {
  enum { kC1, kC2, kC3, kA1, kA2, kB1, kB2, kUo, kUe, kLo, kLe, kCount };
  const float* w[kCount];
};

#if SOFTSW_CPU_VECTOR
namespace simd {

// Inputs of one row, index j at [j] (index 0: the boundary), readable up to
// index n + 8: C, U, L of row i and of row i - 1 (row 0: C = 0, U = L = -inf),
// C of row i - 2, scores of rows i and i - 1, the gap scores of row i (kernel
// units); `up_border`: row i - 1 is the boundary row.
struct AffineRowInputs {
  const float *c, *u, *l, *c_up, *u_up, *l_up, *c_up2, *s, *s_up, *open, *extend;
  bool up_border;
};
// Scratch: the shares of rows i and i - 1 (4 arrays each).
struct AffineRowShares {
  float* here[4];
  float* up[4];
};

// A cell's weights in AffineRowWeights' order from its shares (`here`), its
// left neighbour's (`left`, the L node opens from B there) and the shares of
// the cell above (`up`, the U node opens from A there); `o`, `e`: the gap
// weights 2^open, 2^extend at the cell. Lanes of the accumulate type A (the
// float rows, and the float64 double backward's).
template <typename A, int VL>
SOFTSW_VINLINE void affine_weights_of_shares(const AffineShares<Packed<A, VL>>& here,
                                             const AffineShares<Packed<A, VL>>& left,
                                             const AffineShares<Packed<A, VL>>& up,
                                             Packed<A, VL> o, Packed<A, VL> e,
                                             Packed<A, VL>* w) {
  using Fl = Packed<A, VL>;
  using Math = PackedMath<A, VL>;
  using P = AffineProbabilityWeights<Fl, Math>;
  const Weights<Fl> wc = P::c(here);
  // The A and B nodes' weights: d / a, l / a and d / b, u / b (0 where the
  // share underflowed to 0: then d, l, u are 0 too).
  const Fl tiny = std::numeric_limits<A>::min();
  const Fl ia = Fl(A(1)) / Math::larger(here.a(), tiny);
  const Fl ib = Fl(A(1)) / Math::larger(here.b(), tiny);
  const GapWeights<Fl> wu = P::u_per_a(up, o, e), wl = P::l_per_b(left, o, e);
  using R = AffineRowWeights;
  w[R::kC1] = wc.p1;
  w[R::kC2] = wc.p2;
  w[R::kC3] = wc.p3;
  w[R::kA1] = here.d * ia;
  w[R::kA2] = here.l * ia;
  w[R::kB1] = here.d * ib;
  w[R::kB2] = here.u * ib;
  w[R::kUo] = wu.open * up.a();
  w[R::kUe] = wu.extend;
  w[R::kLo] = wl.open * left.b();
  w[R::kLe] = wl.extend;
}

template <int VL>
SOFTSW_VINLINE void affine_row_weights_body(const AffineRowInputs& in, int64_t n,
                                            const AffineRowShares& sh, float* const* out) {
  using X = V<VL>;
  using F = typename X::F;
  using Fl = Floats<VL>;
  using P = AffineProbabilityWeights<Fl, VecMath<VL>>;
  const F zero = X::splat(0.0f), one = X::splat(1.0f), ninf = X::splat(-kInf<float>);
  // The shares of a row (cells flushed to -inf: a boundary cell's), index 0
  // the boundary.
  auto shares = [&](const float* c, const float* c_diag, const float* s, const float* u,
                    const float* l, float* const* dst) {
    for (int q = 0; q < 4; ++q) dst[q][0] = q == 0 ? 1.0f : 0.0f;
    for (int64_t j = 1; j <= n; j += VL) {
      const F cc = X::load(c + j);
      const AffineShares<Fl> v =
          P::shares(cc, X::load(c_diag + j - 1) + X::load(s + j), X::load(u + j), X::load(l + j));
      const auto live = cc > ninf;
      X::store(dst[0] + j, X::sel(live, v.start.v, one));
      X::store(dst[1] + j, X::sel(live, v.d.v, zero));
      X::store(dst[2] + j, X::sel(live, v.u.v, zero));
      X::store(dst[3] + j, X::sel(live, v.l.v, zero));
    }
  };
  shares(in.c, in.c_up, in.s, in.u, in.l, sh.here);
  if (in.up_border) {
    for (int q = 0; q < 4; ++q) std::fill(sh.up[q], sh.up[q] + n + 1, q == 0 ? 1.0f : 0.0f);
  } else {
    shares(in.c_up, in.c_up2, in.s_up, in.u_up, in.l_up, sh.up);
  }
  for (int64_t j = 1; j <= n; j += VL) {
    auto at = [&](float* const* a, int64_t k) {
      return AffineShares<Fl>{X::load(a[0] + k), X::load(a[1] + k), X::load(a[2] + k),
                              X::load(a[3] + k)};
    };
    const AffineShares<Fl> here = at(sh.here, j), left = at(sh.here, j - 1), up = at(sh.up, j);
    const Fl o = X::exp2(X::load(in.open + j)), e = X::exp2(X::load(in.extend + j));
    Fl v[AffineRowWeights::kCount];
    affine_weights_of_shares<float, VL>(here, left, up, o, e, v);
    const auto live = X::load(in.c + j) > ninf;
    for (int k = 0; k < AffineRowWeights::kCount; ++k) X::store(out[k] + j, X::sel(live, v[k].v, zero));
  }
}

using AffineRowWeightsFn = void (*)(const AffineRowInputs&, int64_t, const AffineRowShares&,
                                    float* const*);
inline void affine_row_weights_baseline(const AffineRowInputs& in, int64_t n,
                                        const AffineRowShares& sh, float* const* out) {
  affine_row_weights_body<4>(in, n, sh, out);
}
#if defined(__x86_64__)
SOFTSW_TARGET_AVX2 inline void affine_row_weights_avx2(
    const AffineRowInputs& in, int64_t n, const AffineRowShares& sh, float* const* out) {
  affine_row_weights_body<8>(in, n, sh, out);
}
#endif
inline AffineRowWeightsFn pick_affine_row_weights() {
#if defined(__x86_64__)
  if (isa_level() >= 1) return &affine_row_weights_avx2;
#endif
  return &affine_row_weights_baseline;
}

}  // namespace simd
#endif  // SOFTSW_CPU_VECTOR

// Row i (1-based, columns 1..n) of pair `pv`, nodes C, U, L at `c`, `u`, `l`
// (row stride pv.N): its weights.
template <typename T>
AffineRowWeights affine_row_weights(const PairView<T>& pv, const float* c, const float* u,
                                    const float* l, int64_t i, int64_t n, Scratch<float>& sc) {
  AffineRowWeights r{};
#if SOFTSW_CPU_VECTOR
  const int64_t len = n + 1 + 8, N = pv.N;
  float* base = sc.affine_rows.get((11 + 8 + AffineRowWeights::kCount) * len);
  float* in[11];
  for (int k = 0; k < 11; ++k) in[k] = base + k * len;
  // Row r of a plane at index 1..n; 0 at index 0 and on row 0 (C's boundary;
  // U and L are not read there).
  auto row = [&](const float* plane, int64_t r, float* dst) {
    dst[0] = 0.0f;
    if (r >= 1) std::copy(plane + (r - 1) * N, plane + (r - 1) * N + n, dst + 1);
    else std::fill(dst + 1, dst + n + 1, 0.0f);
    std::fill(dst + n + 1, dst + len, 0.0f);
  };
  row(c, i, in[0]);
  row(u, i, in[1]);
  row(l, i, in[2]);
  row(c, i - 1, in[3]);
  row(u, i - 1, in[4]);
  row(l, i - 1, in[5]);
  row(c, i - 2, in[6]);
  for (int64_t j = 1; j <= n; ++j) {
    in[7][j] = pv.s(i, j);
    in[8][j] = i >= 2 ? pv.s(i - 1, j) : 0.0f;
    in[9][j] = pv.open.at(i, j);
    in[10][j] = pv.ext.at(i, j);
  }
  for (int k = 7; k < 11; ++k) {
    in[k][0] = 0.0f;
    std::fill(in[k] + n + 1, in[k] + len, 0.0f);
  }
  simd::AffineRowShares sh;
  for (int q = 0; q < 4; ++q) {
    sh.here[q] = base + (11 + q) * len;
    sh.up[q] = base + (15 + q) * len;
  }
  float* out[AffineRowWeights::kCount];
  for (int k = 0; k < AffineRowWeights::kCount; ++k) {
    out[k] = base + (19 + k) * len;
    r.w[k] = out[k];
  }
  for (float* a : sh.here) std::fill(a + n + 1, a + len, 0.0f);
  const simd::AffineRowInputs inputs{in[0], in[1], in[2], in[3], in[4], in[5],
                                     in[6], in[7], in[8], in[9], in[10], i == 1};
  static const simd::AffineRowWeightsFn fn = simd::pick_affine_row_weights();
  fn(inputs, n, sh, out);
#else
  (void)pv, (void)c, (void)u, (void)l, (void)i, (void)n, (void)sc;
#endif
  return r;
}

}  // namespace softsw::cpu
