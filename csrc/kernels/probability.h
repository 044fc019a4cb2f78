// The probability-domain form of the soft recurrence, shared by the CPU and
// CUDA kernels: the cell, the power-of-two scaling, and the one rule that says
// when the scaled form is exact (so that every backend chooses alike).
//
// With Z = 2^H (H in kernel units, recurrence.h: scores pre-multiplied by
// 1 / (T ln 2)), w = 2^s for a cell's score s and c = 2^g for the gap g, the
// linear-gap recurrence is linear:
//
//   Z[i,j] = 1 + w[i,j] Z[i-1,j-1] + c (Z[i-1,j] + Z[i,j-1]),   Z = 1 on the border
//
// one exp2 (for w) and three adds/FMAs per cell, all terms positive (no
// cancellation). Z grows like 2^score, so a kernel keeps each row as
// z = Z 2^-o with an integer exponent o of its own, and every kRenormSteps
// cells brings z back to [1, 2): z *= 2^-e, o += e (exact: a power of two).
// The start term becomes 2^-o; a value handed from row i-1 (exponent o') is
// multiplied by 2^(o' - o).
//
// Why this is exact to rounding. The recurrence is linear with positive
// weights, so an error made at a cell travels on exactly as that cell's value
// does: a relative error at a cell stays relative. Each row keeps its own
// exponent near its own magnitude, so what underflows when a value is
// converted to another row's exponent is below 2^-126 (float) of the value it
// is added to: a relative error far under rounding. What remains is overflow
// between two renormalisations, and a weight w or c so small that it flushes
// to zero while the value it multiplies is large. Both are ruled out by
// bounding |s| and |g| (kernel units) by kMaxLog2Weight: in float, over
// kRenormSteps = 8 steps a value grows at most (1 + 2^12 + 2^13)^8 < 2^110
// (from a start in [1, 2) and a neighbour at most 2^12 larger), and
// 2^-12 never flushes. Cells outside the bound (small T, large |S| / T, large
// gaps) are computed in the log domain (recurrence.h).
//
// Two ways to apply it, both exact: the CPU kernels check the bound on a
// pair's scores before they start and run the pair in one domain; the CUDA
// forward (forward_probability.cu), which cannot afford a pass over the
// scores first, keeps the gap bound, computes a group of steps
// (kGroupSteps), checks that every value is finite and below the top binade
// (renormalising a value there would flush it to 0), and otherwise undoes the
// group and continues in the log domain. A weight below the bound only loses
// what is negligible (see above), so overflow is the one thing to detect
// there. The two may therefore choose
// different domains for a pair near the bound; the scores agree to rounding.
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>

#include "recurrence.h"

namespace softsw {

template <typename A>
struct ProbabilityRange {
  // Steps between two renormalisations of a row.
  static constexpr int kRenormSteps = 8;
  // The largest |s| and |g| (kernel units: log2 of the weights) that the
  // scaled form holds exactly; see the header comment.
  static constexpr double kMaxLog2Weight = sizeof(A) == 8 ? 100.0 : 12.0;

  // Whether a linear gap of `gap` kernel units is in range.
  static bool gap_ok(double gap) { return gap >= -kMaxLog2Weight && gap <= kMaxLog2Weight; }
  // The largest |score| in caller units that is in range at kernel scale
  // `scale` (kernel units per caller unit).
  static double score_limit(double scale) { return kMaxLog2Weight / scale; }
};

// The exponent e of a positive finite x (x in [2^e, 2^(e+1))); 0 for zero.
SOFTSW_HD int exponent_of(float x) {
  uint32_t bits;
#if defined(__CUDA_ARCH__)
  bits = __float_as_uint(x);
#else
  std::memcpy(&bits, &x, sizeof bits);
#endif
  const int biased = static_cast<int>((bits >> 23) & 0xffu);
  return biased == 0 ? 0 : biased - 127;
}
SOFTSW_HD int exponent_of(double x) {
  uint64_t bits;
#if defined(__CUDA_ARCH__)
  bits = static_cast<uint64_t>(__double_as_longlong(x));
#else
  std::memcpy(&bits, &x, sizeof bits);
#endif
  const int biased = static_cast<int>((bits >> 52) & 0x7ffu);
  return biased == 0 ? 0 : biased - 1023;
}

// 2^e exactly, built from its exponent bits; 0 below the normal range (the
// values it scales are then negligible, see above), +inf above it.
template <typename A> SOFTSW_HD A pow2(int e);
template <> SOFTSW_HD float pow2<float>(int e) {
  const uint32_t bits = e < -126 ? 0u : e > 127 ? 0x7f800000u : static_cast<uint32_t>(e + 127) << 23;
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
#endif
}
template <> SOFTSW_HD double pow2<double>(int e) {
  const uint64_t bits = e < -1022 ? 0ull
                        : e > 1023 ? 0x7ff0000000000000ull
                                   : static_cast<uint64_t>(e + 1023) << 52;
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(static_cast<long long>(bits));
#else
  double x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
#endif
}

// The linear-gap cell in the probability domain, all values in the row's
// scale: `start` = 2^-o, `w` = 2^s, `diag` = Z[i-1,j-1], `up` = Z[i-1,j]
// (both already converted to this row's exponent), `left` = Z[i,j-1], `c` = 2^g.
template <typename A>
SOFTSW_HD A probability_cell(A start, A w, A diag, A c, A up, A left) {
  return w * diag + (c * (up + left) + start);
}

// The tangent of probability_cell along a direction dS on the cell's score
// (caller units; a constant gap has no direction). With Hdot = dH / de in
// caller units and Z = exp(H / T) (H in caller units), dZ = Z Hdot / T and
// dw = w dS / T; so Y = Z Hdot obeys Z's recurrence with a source w Zd dS:
//   Y[i,j] = w (Y[i-1,j-1] + Z[i-1,j-1] dS) + c (Y[i-1,j] + Y[i,j-1]),   Y = 0 on the border
// with the same weights: Y keeps Z's scale (y = Y 2^-o), and Hdot = y / z.
// Two FMAs and an add more than the cell; terms of either sign, as the log
// domain's Hdot = p1 (Hdot_diag + dS) + p2 Hdot_up + p3 Hdot_left has.
template <typename A>
SOFTSW_HD A probability_tangent_cell(A w, A diag, A ydiag, A ds, A c, A yup, A yleft) {
  return w * (ydiag + diag * ds) + c * (yup + yleft);
}

// The affine-gap nodes in the probability domain: recurrence.h's AffineCell
// with Z = 2^node, every node linear in its neighbours, all values in the
// row's scale. `start` = 2^-o, `w` = 2^s, `cdiag` = C[i-1,j-1], `aup` and
// `uup` the A and U of (i-1, j), `bleft` and `lleft` the B and L of (i, j-1),
// `open` = 2^open, `extend` = 2^extend:
//   D = w C[i-1,j-1]   U = open A[i-1,j] + extend U[i-1,j]
//   L = open B[i,j-1] + extend L[i,j-1]
//   A = 1 + D + L      B = 1 + D + U      C = 1 + D + U + L = A + U
// On the border A = B = C = 1 and U = L = 0. All terms positive, C the
// largest node: probability.h's argument holds node by node with both gaps
// in range (U >= min(open, extend) C[i-1,j], L likewise).
template <typename A>
struct AffineNodes {
  A c, a, u, b, l;
};
template <typename A>
SOFTSW_HD AffineNodes<A> probability_affine_cell(A start, A w, A cdiag, A open, A extend, A aup,
                                                 A uup, A bleft, A lleft) {
  const A u = open * aup + extend * uup;
  const A l = open * bleft + extend * lleft;
  const A sd = start + w * cdiag;
  const A a = sd + l;
  return {a + u, a, u, sd + u, l};
}

// The affine cell's weights in the probability domain, for a backward pass
// that reads the log-domain nodes C, U, L the forward kept (recurrence.h's
// AffineCell). With Z = 2^node, every node of a cell relative to its C node:
//   start = 1 / Z_C,  d = Z_D / Z_C,  u = Z_U / Z_C,  l = Z_L / Z_C
// (LinearCell::weights of the C node and one exp2), and A = 1 + D + L,
// B = 1 + D + U are sums of them: a = start + d + l, b = start + d + u. Every
// weight of the cell is a ratio of these shares: the C node's weight of D is
// d / c (c = start + d + u + l, 1 up to rounding), the A node's d / a and
// l / a, the B node's d / b and u / b, and the U node's weights of its open
// and extend moves o a' / g and e u' / g with g = o a' + e u', the shares '
// of cell (i-1, j) and o = 2^open, e = 2^extend (L alike, from cell (i, j-1)
// and b, l). 4 exp2 per cell instead of the ~20 exp2 and log2 of AffineCell's
// log-domain weights, and each node's weights sum to 1 (the rounding of a
// stored C scales all shares of its cell alike and cancels in the ratios).
//
// A pass carries the A and B nodes' adjoints divided by a and b: the
// adjoint U[i,j] hands to A[i-1,j] is E_U o a' / g, divided by a' it is
// E_U o / g, and A's weights times it are d E_U o / g and l E_U o / g. So a
// and b are never divided by (they may underflow to 0 where the U or L node
// holds the whole cell), and a cell costs 3 divisions: c, and g of U and L.
//
// Exact while o and e are normal and not huge: the range rule's gap bound
// (ProbabilityRange). A share that underflows is negligible next to the
// others (all are relative to the same Z_C). g does not vanish: a' + u' = c'
// (about 1), so g >= min(o, e) / 2.
template <typename A>
struct AffineShares {
  A start, d, u, l;
  SOFTSW_HD A a() const { return start + d + l; }
  SOFTSW_HD A b() const { return start + d + u; }
  SOFTSW_HD A c() const { return start + d + u + l; }
  // A boundary cell (row 0 or column 0): A = B = C = 1, U = L = D = 0.
  SOFTSW_HD static AffineShares boundary() { return {A(1), A(0), A(0), A(0)}; }
};

template <typename A, typename Math = AccMath>
struct AffineProbabilityWeights {
  // The shares of a cell with nodes c = C, d = D, u = U, l = L (kernel units).
  SOFTSW_HD static AffineShares<A> shares(A c, A d, A u, A l) {
    const Weights<A> w = LinearCell<A, false, Math>::weights(c, d, u, l);
    return {Math::exp2(-c), w.p1, w.p2, w.p3};
  }
  // C node: p1 = D, p2 = U, p3 = L.
  SOFTSW_HD static Weights<A> c(const AffineShares<A>& s) {
    const A inv = A(1) / s.c();
    return {s.d * inv, s.u * inv, s.l * inv};
  }
  // U[i,j]'s weights from the shares `up` of (i-1, j), its open weight
  // divided by up.a() (see above); L[i,j]'s from `left`, of (i, j-1), its
  // open weight divided by left.b(). open = 2^open_score, extend =
  // 2^extend_score at (i, j).
  SOFTSW_HD static GapWeights<A> u_per_a(const AffineShares<A>& up, A open, A extend) {
    return per_share(open, up.a(), extend * up.u);
  }
  SOFTSW_HD static GapWeights<A> l_per_b(const AffineShares<A>& left, A open, A extend) {
    return per_share(open, left.b(), extend * left.l);
  }
  // {o / g, ve / g} with g = o * share + ve.
  SOFTSW_HD static GapWeights<A> per_share(A open, A share, A ve) {
    const A inv = A(1) / (open * share + ve);
    return {open * inv, ve * inv};
  }
};

}  // namespace softsw
