// The reverse passes of the backward and the double backward, scalar, one
// pair at a time: the seeds and the region a pass visits, the tangent
// forward (double backward), and the reverse pass that carries the adjoint
// (and with TAN its tangent too), linear and affine.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "affine_row_weights.h"
#include "cell.h"
#include "row_weights.h"
#include "setup.h"

namespace softsw::cpu {

// ---------------------------------------------------------------------------
// Seeds and the region a reverse pass visits.
// ---------------------------------------------------------------------------

template <typename A>
struct Seed {
  bool soft = false;  // soft: e0 = 2^(h - total) * scale everywhere; else 1 at the region's corner
  A total = 0;
  A scale = 1;  // 1 / sum of 2^(h - total) over the pair: 1 up to rounding (see "Weights")
  A sdot = 0;   // soft tangent: e0dot = e0 * (hdot - sdot) / T
  A inv_t = 0;
};

// 1 / sum over the pair's cells of 2^(h - total): normalises the "soft" seeds.
template <typename A>
A seed_scale(const A* hid_c, int64_t N, int64_t m, int64_t n, A total) {
  A z = A(0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) z += CpuMath::exp2(hid_c[i * N + j] - total);
  return z > A(0) ? A(1) / z : A(1);
}

// Rows 1..mr, cols 1..nr: the whole pair (soft), or up to the argmax (max).
// Returns false when the saved argmax does not fit the pair (corrupt state).
template <typename T>
bool region_of(const Setup<T>& su, const ForwardState& state, int64_t b, int64_t m, int64_t n,
               const Acc<T>* hid_c, int64_t& mr, int64_t& nr) {
  using A = Acc<T>;
  if (su.soft_reduction || m == 0 || n == 0) {
    mr = m;
    nr = n;
    return true;
  }
  int64_t a;
  if (su.p.reduction == Reduction::Soft) {  // T = 0 soft: the argmax again
    MaxArg<A> best;
    for (int64_t i = 1; i <= m; ++i)
      for (int64_t j = 1; j <= n; ++j) best.add(hid_c[(i - 1) * su.N + (j - 1)], (i - 1) * su.N + (j - 1));
    a = best.index;
  } else {
    a = state.argmax[b];
  }
  if (a < 0) {
    mr = nr = 0;
    return true;
  }
  mr = a / su.N + 1;
  nr = a % su.N + 1;
  return mr <= m && nr <= n;
}

// ---------------------------------------------------------------------------
// Linear gaps: tangent forward and the reverse pass (adjoint E, and with TAN
// its tangent Edot), docs/math.md.
// ---------------------------------------------------------------------------

// Hdot over the region, row stride nr.
template <typename T, bool HARD>
void tangent_linear(const PairView<T>& pv, int64_t mr, int64_t nr, const Acc<T>* hid,
                    const T* ws, const T* wo, Acc<T>* hdot, Scratch<Acc<T>>& sc) {
  using A = Acc<T>;
  using Cell = CpuLinearCell<A, HARD>;
  const int64_t N = pv.N;
  auto H = [&](int64_t i, int64_t j) { return i == 0 || j == 0 ? A(0) : hid[(i - 1) * N + (j - 1)]; };
  auto Hd = [&](int64_t i, int64_t j) { return i == 0 || j == 0 ? A(0) : hdot[(i - 1) * nr + (j - 1)]; };
  for (int64_t i = 1; i <= mr; ++i) {
    RowWeights rw{};
    if constexpr (std::is_same_v<A, float>)
      if (row_weights_apply<T, HARD>()) rw = row_weights(pv, hid, i, nr, false, 0.0f, 1.0f, sc);
    for (int64_t j = 1; j <= nr; ++j) {
      Weights<A> w;
      if (rw.p1) {
        w = Weights<A>{rw.p1[j], rw.p2[j], rw.p3[j]};
      } else {
        const A g = pv.open.at(i, j);
        w = Cell::normalized_weights(H(i, j), H(i - 1, j - 1) + pv.s(i, j), H(i - 1, j) + g,
                                     H(i, j - 1) + g);
      }
      const A gd = dir_at(wo, N, i, j);
      hdot[(i - 1) * nr + (j - 1)] = w.p1 * (Hd(i - 1, j - 1) + dir_at(ws, N, i, j)) +
                                     w.p2 * (Hd(i - 1, j) + gd) + w.p3 * (Hd(i, j - 1) + gd);
    }
  }
}

// Writes, over the region, outS = gs * d s / d S and outG = gs * d s / d g
// (TAN: gs * (Hessian . W) instead). Messages from row i+1 travel in `in`,
// from the right neighbour in `right`.
template <typename T, bool HARD, bool TAN>
void reverse_linear(const PairView<T>& pv, int64_t mr, int64_t nr, const Acc<T>* hid,
                    const Acc<T>* hdot, const T* ws, const T* wo, const Seed<Acc<T>>& seed,
                    Acc<T> gs, T* outS, T* outG, Scratch<Acc<T>>& sc) {
  using A = Acc<T>;
  using Cell = CpuLinearCell<A, HARD>;
  const int64_t N = pv.N;
  const A it = seed.inv_t;
  auto H = [&](int64_t i, int64_t j) { return i == 0 || j == 0 ? A(0) : hid[(i - 1) * N + (j - 1)]; };
  auto Hd = [&](int64_t i, int64_t j) { return i == 0 || j == 0 ? A(0) : hdot[(i - 1) * nr + (j - 1)]; };
  A *in = sc.to_c.in.get(nr + 1), *out = sc.to_c.out.get(nr + 1);
  A *ind = sc.to_c_dot.in.get(nr + 1), *outd = sc.to_c_dot.out.get(nr + 1);
  std::fill(in, in + nr + 1, A(0));
  std::fill(ind, ind + nr + 1, A(0));
  for (int64_t i = mr; i >= 1; --i) {
    out[nr] = A(0);
    outd[nr] = A(0);
    A right = 0, rightd = 0;
    RowWeights rw{};
    if constexpr (std::is_same_v<A, float>)
      if (row_weights_apply<T, HARD>())
        rw = row_weights(pv, hid, i, nr, seed.soft, seed.total, seed.scale, sc);
    for (int64_t j = nr; j >= 1; --j) {
      const int64_t k = (i - 1) * N + (j - 1);
      const A h = hid[k];
      Weights<A> w;
      A e0 = A(0);
      if (rw.p1) {
        w = Weights<A>{rw.p1[j], rw.p2[j], rw.p3[j]};
        if (seed.soft) e0 = rw.e0[j];
      } else {
        const A g = pv.open.at(i, j);
        w = Cell::normalized_weights(h, H(i - 1, j - 1) + pv.s(i, j), H(i - 1, j) + g,
                                     H(i, j - 1) + g);
        if (seed.soft) e0 = CpuMath::exp2(h - seed.total) * seed.scale;
      }
      if (!seed.soft && i == mr && j == nr) e0 = A(1);
      const A E = e0 + in[j] + right;
      const A m1 = E * w.p1, m2 = E * w.p2, m3 = E * w.p3;
      if constexpr (!TAN) {
        st(outS, k, gs * m1);
        if (outG) st(outG, k, gs * (m2 + m3));
      } else {
        const A hd = Hd(i, j), gd = dir_at(wo, N, i, j);
        const A d1 = w.p1 * (Hd(i - 1, j - 1) + dir_at(ws, N, i, j) - hd) * it;
        const A d2 = w.p2 * (Hd(i - 1, j) + gd - hd) * it;
        const A d3 = w.p3 * (Hd(i, j - 1) + gd - hd) * it;
        const A e0d = seed.soft ? e0 * (hd - seed.sdot) * it : A(0);
        const A Ed = e0d + ind[j] + rightd;
        const A md1 = Ed * w.p1 + E * d1, md2 = Ed * w.p2 + E * d2, md3 = Ed * w.p3 + E * d3;
        st(outS, k, gs * md1);
        if (outG) st(outG, k, gs * (md2 + md3));
        outd[j] += md2;
        outd[j - 1] = md1;
        rightd = md3;
      }
      out[j] += m2;
      out[j - 1] = m1;
      right = m3;
    }
    std::swap(in, out);
    std::swap(ind, outd);
  }
}

// ---------------------------------------------------------------------------
// Affine gaps: the same passes, node by node (D, U, L, A, B, C).
// ---------------------------------------------------------------------------

template <typename A>
struct AffineRow {  // derived values of one row, cols 0..nr
  A *D, *Ap, *Bp;
};

template <typename T>
struct AffineHidden {
  using A = Acc<T>;
  const A *C, *U, *L;
  int64_t N;
  A c(int64_t i, int64_t j) const { return i == 0 || j == 0 ? A(0) : C[(i - 1) * N + (j - 1)]; }
  A u(int64_t i, int64_t j) const { return i == 0 || j == 0 ? -kInf<A> : U[(i - 1) * N + (j - 1)]; }
  A l(int64_t i, int64_t j) const { return i == 0 || j == 0 ? -kInf<A> : L[(i - 1) * N + (j - 1)]; }
};

// D, A, B of row i over cols 1..nr, bit-identical to the forward's.
template <typename T, bool HARD>
void derive_affine_row(const PairView<T>& pv, const AffineHidden<T>& hv, int64_t i, int64_t nr,
                       const AffineRow<Acc<T>>& row) {
  using A = Acc<T>;
  using Aff = CpuAffineCell<A, HARD>;
  row.D[0] = -kInf<A>;
  row.Ap[0] = A(0);
  row.Bp[0] = A(0);
  for (int64_t j = 1; j <= nr; ++j) {
    if (i == 0) {
      row.D[j] = -kInf<A>;
      row.Ap[j] = row.Bp[j] = A(0);
      continue;
    }
    const A D = hv.c(i - 1, j - 1) + pv.s(i, j);
    row.D[j] = D;
    row.Ap[j] = Aff::prime(D, hv.l(i, j));
    row.Bp[j] = Aff::prime(D, hv.u(i, j));
  }
}

template <typename A>
struct AffineWeights {
  Weights<A> c;        // C node: p1 = D, p2 = U, p3 = L
  PrimeWeights<A> a;   // A node: p1 = D, p2 = L
  PrimeWeights<A> b;   // B node: p1 = D, p2 = U
  GapWeights<A> u, l;  // U and L nodes
};

// Weights of cell (i, j): `cur` is row i derived, `up` row i-1 derived.
template <typename T, bool HARD>
AffineWeights<Acc<T>> affine_weights(const PairView<T>& pv, const AffineHidden<T>& hv,
                                     const AffineRow<Acc<T>>& cur, const AffineRow<Acc<T>>& up,
                                     int64_t i, int64_t j) {
  using A = Acc<T>;
  using Lin = CpuLinearCell<A, HARD>;
  using Aff = CpuAffineCell<A, HARD>;
  AffineWeights<A> w{};
  // A C of -inf: the probability-domain forward flushed a node negligible
  // next to its row's chunk (forward_probability.h); it carries nothing.
  if (hv.c(i, j) == -kInf<A>) return w;
  const A o = pv.open.at(i, j), e = pv.ext.at(i, j);
  const A D = cur.D[j], U = hv.u(i, j), L = hv.l(i, j);
  w.c = Lin::normalized_weights(hv.c(i, j), D, U, L);
  w.a = Aff::normalized_prime_weights(cur.Ap[j], D, L);
  w.b = Aff::normalized_prime_weights(cur.Bp[j], D, U);
  w.u = Aff::normalized_gap_weights(U, up.Ap[j] + o, hv.u(i - 1, j) + e);
  w.l = Aff::normalized_gap_weights(L, cur.Bp[j - 1] + o, hv.l(i, j - 1) + e);
  return w;
}

// Cell j's weights from a row of affine_row_weights.h.
inline AffineWeights<float> affine_weights_of(const AffineRowWeights& rw, int64_t j) {
  using R = AffineRowWeights;
  AffineWeights<float> w;
  w.c = {rw.w[R::kC1][j], rw.w[R::kC2][j], rw.w[R::kC3][j]};
  w.a = {rw.w[R::kA1][j], rw.w[R::kA2][j]};
  w.b = {rw.w[R::kB1][j], rw.w[R::kB2][j]};
  w.u = {rw.w[R::kUo][j], rw.w[R::kUe][j]};
  w.l = {rw.w[R::kLo][j], rw.w[R::kLe][j]};
  return w;
}

// Whether the affine passes of a pair take their weights from
// affine_row_weights.h: soft, float accumulate, the pair inside the range rule
// (`in_range`, in_probability_range).
template <typename T, bool HARD>
bool affine_row_weights_apply(bool in_range) {
  return in_range && row_weights_apply<T, HARD>();
}

// Row i's weights when `rows` (affine_row_weights_apply), else none.
template <typename T>
AffineRowWeights affine_row(const PairView<T>& pv, const AffineHidden<T>& hv, int64_t i,
                            int64_t nr, bool rows, Scratch<Acc<T>>& sc) {
  AffineRowWeights rw{};
  if constexpr (std::is_same_v<Acc<T>, float>)
    if (rows) rw = affine_row_weights(pv, hv.C, hv.U, hv.L, i, nr, sc);
  return rw;
}

// Tangents of the affine nodes over the region (row stride nr): planes
// 0..4 of `tan` = Cdot, Udot, Ldot, Adot, Bdot.
template <typename A>
struct AffineTangents {
  A* t;
  int64_t nr, plane;
  A get(int k, int64_t i, int64_t j) const {
    return i == 0 || j == 0 ? A(0) : t[k * plane + (i - 1) * nr + (j - 1)];
  }
  A& at(int k, int64_t i, int64_t j) { return t[k * plane + (i - 1) * nr + (j - 1)]; }
};

template <typename T, bool HARD>
void tangent_affine(const PairView<T>& pv, const AffineHidden<T>& hv, int64_t mr, int64_t nr,
                    const T* ws, const T* wo, const T* we, AffineTangents<Acc<T>> td,
                    Scratch<Acc<T>>& sc, bool in_range = false) {
  using A = Acc<T>;
  const int64_t N = pv.N;
  const bool rows = affine_row_weights_apply<T, HARD>(in_range);
  AffineRow<A> cur{sc.d_cur.get(nr + 1), sc.ap_cur.get(nr + 1), sc.bp_cur.get(nr + 1)};
  AffineRow<A> up{sc.d_up.get(nr + 1), sc.ap_up.get(nr + 1), sc.bp_up.get(nr + 1)};
  if (!rows) derive_affine_row<T, HARD>(pv, hv, 0, nr, up);
  for (int64_t i = 1; i <= mr; ++i) {
    const AffineRowWeights rw = affine_row(pv, hv, i, nr, rows, sc);
    if (!rows) derive_affine_row<T, HARD>(pv, hv, i, nr, cur);
    for (int64_t j = 1; j <= nr; ++j) {
      AffineWeights<A> w;
      if constexpr (std::is_same_v<A, float>)
        if (rows) w = affine_weights_of(rw, j);
      if (!rows) w = affine_weights<T, HARD>(pv, hv, cur, up, i, j);
      const A dO = dir_at(wo, N, i, j), dE = dir_at(we, N, i, j);
      const A Dd = td.get(0, i - 1, j - 1) + dir_at(ws, N, i, j);
      const A Ud = w.u.open * (td.get(3, i - 1, j) + dO) + w.u.extend * (td.get(1, i - 1, j) + dE);
      const A Ld = w.l.open * (td.get(4, i, j - 1) + dO) + w.l.extend * (td.get(2, i, j - 1) + dE);
      td.at(0, i, j) = w.c.p1 * Dd + w.c.p2 * Ud + w.c.p3 * Ld;
      td.at(1, i, j) = Ud;
      td.at(2, i, j) = Ld;
      td.at(3, i, j) = w.a.p1 * Dd + w.a.p2 * Ld;
      td.at(4, i, j) = w.b.p1 * Dd + w.b.p2 * Ud;
    }
    std::swap(cur, up);
  }
}

template <typename T, bool HARD, bool TAN>
void reverse_affine(const PairView<T>& pv, const AffineHidden<T>& hv, int64_t mr, int64_t nr,
                    AffineTangents<Acc<T>> td, const T* ws, const T* wo, const T* we,
                    const Seed<Acc<T>>& seed, Acc<T> gs, T* outS, T* outO, T* outE,
                    Scratch<Acc<T>>& sc, bool in_range = false) {
  using A = Acc<T>;
  const int64_t N = pv.N;
  const A it = seed.inv_t;
  const bool rows = affine_row_weights_apply<T, HARD>(in_range);
  AffineRow<A> cur{sc.d_cur.get(nr + 1), sc.ap_cur.get(nr + 1), sc.bp_cur.get(nr + 1)};
  AffineRow<A> up{sc.d_up.get(nr + 1), sc.ap_up.get(nr + 1), sc.bp_up.get(nr + 1)};
  // Messages into row i from row i+1 (inX) and into row i-1 (outX):
  // to C from D[i+1,j+1], to A and to U from U[i+1,j]; plus their tangents.
  A *inC = sc.to_c.in.get(nr + 1), *outC = sc.to_c.out.get(nr + 1);
  A *inA = sc.to_a.in.get(nr + 1), *outA = sc.to_a.out.get(nr + 1);
  A *inU = sc.to_u.in.get(nr + 1), *outU = sc.to_u.out.get(nr + 1);
  A *inCd = sc.to_c_dot.in.get(nr + 1), *outCd = sc.to_c_dot.out.get(nr + 1);
  A *inAd = sc.to_a_dot.in.get(nr + 1), *outAd = sc.to_a_dot.out.get(nr + 1);
  A *inUd = sc.to_u_dot.in.get(nr + 1), *outUd = sc.to_u_dot.out.get(nr + 1);
  for (A* a : {inC, inA, inU, inCd, inAd, inUd}) std::fill(a, a + nr + 1, A(0));
  if (!rows) {
    derive_affine_row<T, HARD>(pv, hv, mr, nr, cur);
    derive_affine_row<T, HARD>(pv, hv, mr - 1, nr, up);
  }
  for (int64_t i = mr; i >= 1; --i) {
    outC[nr] = outCd[nr] = A(0);
    A rB = 0, rL = 0, rBd = 0, rLd = 0;  // messages from L[i,j+1] to B and L of (i,j)
    const AffineRowWeights rw = affine_row(pv, hv, i, nr, rows, sc);
    for (int64_t j = nr; j >= 1; --j) {
      const int64_t k = (i - 1) * N + (j - 1);
      AffineWeights<A> w;
      if constexpr (std::is_same_v<A, float>)
        if (rows) w = affine_weights_of(rw, j);
      if (!rows) w = affine_weights<T, HARD>(pv, hv, cur, up, i, j);
      A e0 = A(0);
      if (seed.soft) e0 = CpuMath::exp2(hv.C[k] - seed.total) * seed.scale;
      else if (i == mr && j == nr) e0 = A(1);
      const A EC = e0 + inC[j], EA = inA[j], EB = rB;
      const A EU = inU[j] + EC * w.c.p2 + EB * w.b.p2;
      const A EL = rL + EC * w.c.p3 + EA * w.a.p2;
      const A ED = EC * w.c.p1 + EA * w.a.p1 + EB * w.b.p1;
      if constexpr (!TAN) {
        st(outS, k, gs * ED);
        if (outO) st(outO, k, gs * (EU * w.u.open + EL * w.l.open));
        if (outE) st(outE, k, gs * (EU * w.u.extend + EL * w.l.extend));
      } else {
        const A dO = dir_at(wo, N, i, j), dE = dir_at(we, N, i, j);
        const A Cd = td.get(0, i, j), Ud = td.get(1, i, j), Ld = td.get(2, i, j);
        const A Ad = td.get(3, i, j), Bd = td.get(4, i, j);
        const A Dd = td.get(0, i - 1, j - 1) + dir_at(ws, N, i, j);
        const A c1 = w.c.p1 * (Dd - Cd) * it, c2 = w.c.p2 * (Ud - Cd) * it,
                c3 = w.c.p3 * (Ld - Cd) * it;
        const A a1 = w.a.p1 * (Dd - Ad) * it, a2 = w.a.p2 * (Ld - Ad) * it;
        const A b1 = w.b.p1 * (Dd - Bd) * it, b2 = w.b.p2 * (Ud - Bd) * it;
        const A uo = w.u.open * (td.get(3, i - 1, j) + dO - Ud) * it;
        const A ue = w.u.extend * (td.get(1, i - 1, j) + dE - Ud) * it;
        const A lo = w.l.open * (td.get(4, i, j - 1) + dO - Ld) * it;
        const A le = w.l.extend * (td.get(2, i, j - 1) + dE - Ld) * it;
        const A e0d = seed.soft ? e0 * (Cd - seed.sdot) * it : A(0);
        const A ECd = e0d + inCd[j], EAd = inAd[j], EBd = rBd;
        const A EUd = inUd[j] + ECd * w.c.p2 + EC * c2 + EBd * w.b.p2 + EB * b2;
        const A ELd = rLd + ECd * w.c.p3 + EC * c3 + EAd * w.a.p2 + EA * a2;
        const A EDd = ECd * w.c.p1 + EC * c1 + EAd * w.a.p1 + EA * a1 + EBd * w.b.p1 + EB * b1;
        const A mUo = EUd * w.u.open + EU * uo, mUe = EUd * w.u.extend + EU * ue;
        const A mLo = ELd * w.l.open + EL * lo, mLe = ELd * w.l.extend + EL * le;
        st(outS, k, gs * EDd);
        if (outO) st(outO, k, gs * (mUo + mLo));
        if (outE) st(outE, k, gs * (mUe + mLe));
        outCd[j - 1] = EDd;
        outAd[j] = mUo;
        outUd[j] = mUe;
        rBd = mLo;
        rLd = mLe;
      }
      outC[j - 1] = ED;
      outA[j] = EU * w.u.open;
      outU[j] = EU * w.u.extend;
      rB = EL * w.l.open;
      rL = EL * w.l.extend;
    }
    std::swap(inC, outC);
    std::swap(inA, outA);
    std::swap(inU, outU);
    std::swap(inCd, outCd);
    std::swap(inAd, outAd);
    std::swap(inUd, outUd);
    std::swap(cur, up);
    if (i >= 2 && !rows) derive_affine_row<T, HARD>(pv, hv, i - 2, nr, up);
  }
}

}  // namespace softsw::cpu
