// Affine gaps on CUDA: the backward of the three-state recurrence
// (docs/semantics.md, docs/math.md "Affine gaps") on the band wavefront of wavefront.cuh, with the
// cell math of AffineCell / LinearCell (recurrence.h) so that the CPU and CUDA
// kernels cannot drift. (The forward is forward.cu's, with AffineRow.) Per
// cell (i, j), nodes named as in recurrence.h:
//   D = C[i-1,j-1] + S_ij
//   U = gap(A[i-1,j] + open_ij, U[i-1,j] + extend_ij)
//   L = gap(B[i,j-1] + open_ij, L[i,j-1] + extend_ij)
//   C = softmax_T(0, D, U, L),  A = softmax_T(0, D, L),  B = softmax_T(0, D, U)
// with C = A = B = 0 and D = U = L = -inf on the boundary.
//
// Structure: the linear backward's (backward.cu), same names where the role
// is the same. A cell's adjoints go to C of (i-1,j-1) (from D), to A and to U
// of (i-1,j) (from U) and to B and L of (i,j-1) (from L). The band above gets
// three values per column of its last row, as tagged words (TaggedEdge, as
// every pass hands its edges): the C, A and U adjoint contributions of the
// band's first row (and their tangents in the double backward).
//
// Saved state ("hidden", 3*B*M*N accumulate-type elements, written by the
// forward): per pair three planes of M*N, plane 0 = C, 1 = U, 2 = L; each
// plane of a pair uses the band / anti-diagonal layout of wavefront.cuh (band
// at `top * n`, cell (r, c) of a band with `rows` rows at ((r + c) mod n) *
// rows + r). Slots outside the pair's m*n cells are not written. The backward
// recomputes D, A and B from C, U, L and the scores with the forward's
// arithmetic (bit-identical, so hard-mode ties resolve as in the forward and
// as on the CPU), one anti-diagonal ahead of the cells that read them.
#include <cmath>
#include <limits>
#include <type_traits>

#include "affine.cuh"
#include "reverse.cuh"
#include "tangent.cuh"
#include "wavefront.cuh"

namespace softsw {
namespace cuda {

template <typename A>
__device__ __forceinline__ constexpr A neg_inf() {
  return -std::numeric_limits<A>::infinity();
}

// --------------------------------------------------------------------------
// Backward
// --------------------------------------------------------------------------

// TAN: the reverse pass of the double backward (docs/math.md, the CPU's
// reverse_affine<TAN> in cpu/reverse.h): with the adjoint E also its tangent Edot (unless
// HARD, where the Hessian is zero and the outputs stay cleared), writing the
// Hessian-vector product instead of the gradient, and grad_grad_score =
// <W, d score / d inputs> per pair.
template <typename T, typename A, int R, bool HARD, bool GAP_TENSOR, bool TAN = false>
__global__ void __launch_bounds__(kWarp* kWarpsPerBlock)
    affine_backward_wavefront(const ReverseArgs<T, A> a) {
  using Cell = LinearCell<A, HARD>;
  using Aff = AffineCell<A, HARD>;
  constexpr int kBandRows = kWarp * R;
  constexpr bool kTangent = TAN && !HARD;
  // A band's edge: per column the C, A, U contributions of its first row, as
  // tagged words (TaggedEdge) in ws.edges; with kTangent their tangents in
  // edges_dot, likewise.
  constexpr int kEdgeValues = 3;
  using Edge = TaggedEdge<A>;
  const A kNegInf = neg_inf<A>();
  const int lane = threadIdx.x & (kWarp - 1);
  const bool soft_reduction = a.soft_reduction && !HARD;
  unsigned long long* const edges = static_cast<unsigned long long*>(a.ws.edges);
  const int64_t plane = a.rows * a.cols;

  for (;;) {
    const TakenUnit unit = take_unit</*REVERSE=*/true>(a);
    if (!unit.taken) return;
    const int64_t b = unit.b, band = unit.band;
    const PairLengths len = pair_lengths(a.lengths, b, a.rows, a.cols);
    const int64_t m = len.m, n = len.n;
    const int64_t pair_offset = b * plane;

    // The region the adjoint reaches: the whole pair (soft), or the rows and
    // columns up to the argmax cell (max: an adjoint only flows up and left),
    // nothing when the max is a boundary zero. An argmax outside the pair is
    // a corrupt state: NaN, like invalid lengths.
    int64_t mc = m, nc = n;
    bool ok = len.valid;
    if (ok && !soft_reduction && m > 0 && n > 0) {
      const int64_t target = a.argmax[b];
      if (target < 0) {
        mc = nc = 0;
      } else {
        mc = target / a.cols + 1;
        nc = target % a.cols + 1;
        ok = mc <= m && nc <= n;
      }
    }
    if (!ok) {
      if (band == 0) fill_invalid_pair(a, b, lane);
      continue;
    }
    const int64_t top = band * kBandRows;
    if (TAN && band == 0 && lane == 0 && (mc == 0 || nc == 0))
      a.grad_grad_score[b] = store_as<T>(A(0));
    if (mc == 0 || nc == 0 || top >= mc) continue;  // outputs were cleared
    // Rows this unit computes, and rows of this band in `hidden` (the forward's).
    const int rows_here = static_cast<int>(mc - top < kBandRows ? mc - top : kBandRows);
    const int rows_stored = static_cast<int>(m - top < kBandRows ? m - top : kBandRows);
    const bool has_above = band > 0;
    const bool has_below = top + kBandRows < mc;
    const int64_t unit_id = b * a.nbands + band;
    const int64_t edge_words = a.cols * kEdgeValues * Edge::kWords;  // a band's edge
    const unsigned long long* edge_below = edges + (unit_id + 1) * edge_words;
    unsigned long long* edge_above = edges + unit_id * edge_words;
    const unsigned long long* edge_dot_below = kTangent ? a.edges_dot + (unit_id + 1) * edge_words : nullptr;
    unsigned long long* edge_dot_above = kTangent ? a.edges_dot + unit_id * edge_words : nullptr;
    EdgeChunk<A, kEdgeValues> to_above, to_above_dot;  // the band's first row, for the band above
    const T* S = a.scores + pair_offset;
    const A* hid = a.hidden + b * 3 * plane;
    const A* hidden = hid + top * n;  // C plane of this band; U at + plane, L at + 2 * plane
    const A* hidden_above = hid + (top - kBandRows) * n;  // the band above (full height)
    const A g_out = load_as<A>(a.grad_score + b * a.grad_score_stride);
    const PairTotal<A> total = PairTotal<A>::load(a.total, b);
    // Tangent planes of this band and of the band above (plane p at + p * plane).
    const A* hdot = kTangent ? a.hdot + b * 5 * plane + top * n : nullptr;
    const A* hdot_above = kTangent ? a.hdot + b * 5 * plane + (top - kBandRows) * n : nullptr;
    const A sdot = kTangent && soft_reduction ? a.sdot[b] : A(0);
    const A inv_t = a.inv_t;
    auto dir_at = [&](const T* d, int64_t r, int64_t c) {
      return d ? load_as<A>(d + pair_offset + r * a.cols + c) : A(0);
    };
    A gg = A(0);  // TAN: this thread's share of <W, d score / d inputs>

    const int r0 = lane * R;
    const int lanes_active = (rows_here + R - 1) / R;
    const int64_t steps = nc + int64_t(lanes_active) * R - 1;

    // A saved plane of this lane's rows on anti-diagonal d, stored at `slot`
    // = d mod n (`outside` where the cell is outside the region).
    auto slot_of = [&](int64_t d) { return d >= 0 ? d % n : 0; };
    auto load_diagonal = [&](const A* base, int64_t d, int64_t slot, A outside, A* out) {
#pragma unroll
      for (int k = 0; k < R; ++k) {
        const int64_t c = d - r0 - k;
        out[k] = (c >= 0 && c < nc && top + r0 + k < mc)
                     ? __ldg(base + slot * rows_stored + r0 + k)
                     : outside;
      }
    };
    auto load_scores = [&](int64_t d, T* out) {  // raw: converted when used (load_raw)
#pragma unroll
      for (int k = 0; k < R; ++k) {
        const int64_t c = d - r0 - k;
        const int64_t r = top + r0 + k;
        out[k] = (c >= 0 && c < nc && r < mc) ? load_raw(S + r * a.cols + c) : raw_zero<T>();
      }
    };
    // Row `row` (within the band above) at column `col` of one saved plane.
    auto above_at = [&](int64_t p, int row, int64_t col) {
      return __ldg(hidden_above + p * plane + ((row + col) % n) * kBandRows + row);
    };
    auto above_dot_at = [&](int64_t p, int64_t col) {
      const int row = kBandRows - 1;
      return __ldg(hdot_above + p * plane + ((row + col) % n) * kBandRows + row);
    };

    // Saved C of this lane's rows on anti-diagonals t, t-1, t-2, t-3; U and L
    // on t and t-1; the scores on t-1.
    A c0[R], c1[R], c2[R], c3[R], u0[R], u1[R], l0[R], l1[R];
    T s1[R];
    // Recomputed D, A, B on anti-diagonal t (x0) and t-1 (x1).
    A d0[R], a0[R], b0[R], d1[R], a1[R], b1[R];
    // Adjoint contributions this lane's rows made on the last steps: to C
    // (from D) on the last two, to A and U (from U), to B and L (from L).
    A mD[R], mDp[R], mA[R], mU[R], mB[R], mL[R];
    // kTangent: the tangent planes (0 Cd, 1 Ud, 2 Ld, 3 Ad, 4 Bd) of this
    // lane's rows on anti-diagonals t (td0) and t-1 (td1), Cd on t-2 (cd2);
    // and the tangents of the contributions above (q*).
    A td0[5][R], td1[5][R], cd2[R];
    A qD[R], qDp[R], qA[R], qU[R], qB[R], qL[R];
    // The loop starts one step past the last anti-diagonal (every cell
    // outside) so that D, A, B of anti-diagonal steps-1 get computed.
    load_diagonal(hidden, steps, slot_of(steps), A(0), c0);
    load_diagonal(hidden, steps - 1, slot_of(steps - 1), A(0), c1);
    load_diagonal(hidden, steps - 2, slot_of(steps - 2), A(0), c2);
    load_diagonal(hidden, steps - 3, slot_of(steps - 3), A(0), c3);
    load_diagonal(hidden + plane, steps, slot_of(steps), kNegInf, u0);
    load_diagonal(hidden + plane, steps - 1, slot_of(steps - 1), kNegInf, u1);
    load_diagonal(hidden + 2 * plane, steps, slot_of(steps), kNegInf, l0);
    load_diagonal(hidden + 2 * plane, steps - 1, slot_of(steps - 1), kNegInf, l1);
    // Slots of anti-diagonals t-4, t-3 and t-2 (the loads at the end of step t),
    // stepped down with t; meaningless once the diagonal is negative (no
    // cell of it is then inside).
    int64_t slot4 = slot_of(steps - 4), slot3 = slot_of(steps - 3), slot2 = slot_of(steps - 2);
    load_scores(steps - 1, s1);
#pragma unroll
    for (int k = 0; k < R; ++k) {
      d0[k] = d1[k] = kNegInf;
      a0[k] = b0[k] = a1[k] = b1[k] = A(0);
      mD[k] = mDp[k] = mA[k] = mU[k] = mB[k] = mL[k] = A(0);
      qD[k] = qDp[k] = qA[k] = qU[k] = qB[k] = qL[k] = A(0);
    }
    if constexpr (kTangent) {
#pragma unroll
      for (int p = 0; p < 5; ++p) {
        load_diagonal(hdot + p * plane, steps, slot_of(steps), A(0), td0[p]);
        load_diagonal(hdot + p * plane, steps - 1, slot_of(steps - 1), A(0), td1[p]);
      }
      load_diagonal(hdot, steps - 2, slot_of(steps - 2), A(0), cd2);
    }
    // The row above the band, for lane 0, per column cc of a 32-column chunk:
    // C of (top-1, cc-2), A and U of (top-1, cc).
    A above_c = A(0), above_a = A(0), above_u = kNegInf;
    // Contributions of the band below to the band's last row (lane 31's chunk).
    A below_c = A(0), below_a = A(0), below_u = A(0);
    // kTangent: the same for the tangents: Cd of (top-1, cc-1), Ad and Ud of
    // (top-1, cc); the tangent contributions of the band below.
    A above_cd = A(0), above_ad = A(0), above_ud = A(0);
    A below_cd = A(0), below_ad = A(0), below_ud = A(0);

    for (int64_t t = steps; t >= 0; --t) {
      if (has_above && t <= nc && ((t & (kWarp - 1)) == kWarp - 1 || t == nc)) {
        const int64_t cc = (t & ~int64_t(kWarp - 1)) + lane;
        above_c = (cc >= 2 && cc - 2 < n) ? above_at(0, kBandRows - 1, cc - 2) : A(0);
        above_u = cc < n ? above_at(1, kBandRows - 1, cc) : kNegInf;
        if (cc < n) {
          // A of (top-1, cc) = prime(D, L), D = C(top-2, cc-1) + S(top-1, cc): the forward's arithmetic.
          const A cd = cc >= 1 ? above_at(0, kBandRows - 2, cc - 1) : A(0);
          const A s = scaled(load_as<A>(S + (top - 1) * a.cols + cc), a.scale);
          above_a = Aff::prime(cd + s, above_at(2, kBandRows - 1, cc));
        } else {
          above_a = A(0);
        }
        if constexpr (kTangent) {
          above_cd = (cc >= 1 && cc - 1 < n) ? above_dot_at(0, cc - 1) : A(0);
          above_ud = cc < n ? above_dot_at(1, cc) : A(0);
          above_ad = cc < n ? above_dot_at(3, cc) : A(0);
        }
      }
      // Contributions of the band below, for lane 31's last row.
      const int64_t c_last = t - (kBandRows - 1);
      if (has_below && c_last >= 0 && c_last < nc &&
          ((c_last & (kWarp - 1)) == kWarp - 1 || c_last == nc - 1)) {
        const int col = static_cast<int>(c_last & ~int64_t(kWarp - 1)) + lane;
        const bool in = col <= c_last;
        const int64_t at = int64_t(col) * kEdgeValues * Edge::kWords;
        below_c = in ? Edge::get(edge_below + at, col) : A(0);
        below_a = in ? Edge::get(edge_below + at + Edge::kWords, col) : A(0);
        below_u = in ? Edge::get(edge_below + at + 2 * Edge::kWords, col) : A(0);
        if constexpr (kTangent) {
          below_cd = in ? Edge::get(edge_dot_below + at, col) : A(0);
          below_ad = in ? Edge::get(edge_dot_below + at + Edge::kWords, col) : A(0);
          below_ud = in ? Edge::get(edge_dot_below + at + 2 * Edge::kWords, col) : A(0);
        }
      }
      const int src = static_cast<int>(t & (kWarp - 1));

      // D, A, B on anti-diagonal t-1 (column c-1 of each row): D reads C of
      // the row above on anti-diagonal t-3.
      A cup3 = __shfl_up_sync(kFullMask, c3[R - 1], 1);
      const A chunk_c = __shfl_sync(kFullMask, above_c, src);
      if (lane == 0) cup3 = has_above ? chunk_c : A(0);
#pragma unroll
      for (int k = 0; k < R; ++k) {
        const int64_t c = t - 1 - r0 - k;
        const int64_t r = top + r0 + k;
        const A cd = k == 0 ? cup3 : c3[k - 1];
        if (c >= 0 && c < nc && r < mc) {
          const A D = cd + scaled(to_acc<A>(s1[k]), a.scale);
          d1[k] = D;
          a1[k] = Aff::prime(D, l1[k]);
          b1[k] = Aff::prime(D, u1[k]);
        } else {
          d1[k] = kNegInf;
          a1[k] = b1[k] = A(0);
        }
      }

      // A and U of the cell above (anti-diagonal t-1 of the row above).
      A up_a0 = __shfl_up_sync(kFullMask, a1[R - 1], 1);
      A up_u0 = __shfl_up_sync(kFullMask, u1[R - 1], 1);
      const A chunk_a = __shfl_sync(kFullMask, above_a, src);
      const A chunk_u = __shfl_sync(kFullMask, above_u, src);
      if (lane == 0) {
        up_a0 = has_above ? chunk_a : A(0);
        up_u0 = has_above ? chunk_u : kNegInf;
      }
      // What the row below sent: to C from D (two steps ago), to A and U from U (last step).
      A down_d = __shfl_down_sync(kFullMask, mDp[0], 1);
      A down_a = __shfl_down_sync(kFullMask, mA[0], 1);
      A down_u = __shfl_down_sync(kFullMask, mU[0], 1);
      const int src_below = static_cast<int>(c_last & (kWarp - 1));
      const A chunk_bc = __shfl_sync(kFullMask, below_c, src_below);
      const A chunk_ba = __shfl_sync(kFullMask, below_a, src_below);
      const A chunk_bu = __shfl_sync(kFullMask, below_u, src_below);
      if (lane == kWarp - 1) {
        down_d = has_below ? chunk_bc : A(0);
        down_a = has_below ? chunk_ba : A(0);
        down_u = has_below ? chunk_bu : A(0);
      }
      // kTangent: the same exchanges for the tangents: Cd of the row above on
      // t-2, Ad and Ud on t-1; the row below's tangent contributions.
      A up_cd0 = A(0), up_ad0 = A(0), up_ud0 = A(0);
      A down_dd = A(0), down_ad = A(0), down_ud = A(0);
      if constexpr (kTangent) {
        up_cd0 = __shfl_up_sync(kFullMask, cd2[R - 1], 1);
        up_ad0 = __shfl_up_sync(kFullMask, td1[3][R - 1], 1);
        up_ud0 = __shfl_up_sync(kFullMask, td1[1][R - 1], 1);
        const A chunk_cd = __shfl_sync(kFullMask, above_cd, src);
        const A chunk_ad = __shfl_sync(kFullMask, above_ad, src);
        const A chunk_ud = __shfl_sync(kFullMask, above_ud, src);
        if (lane == 0) {
          up_cd0 = has_above ? chunk_cd : A(0);
          up_ad0 = has_above ? chunk_ad : A(0);
          up_ud0 = has_above ? chunk_ud : A(0);
        }
        down_dd = __shfl_down_sync(kFullMask, qDp[0], 1);
        down_ad = __shfl_down_sync(kFullMask, qA[0], 1);
        down_ud = __shfl_down_sync(kFullMask, qU[0], 1);
        const A chunk_bcd = __shfl_sync(kFullMask, below_cd, src_below);
        const A chunk_bad = __shfl_sync(kFullMask, below_ad, src_below);
        const A chunk_bud = __shfl_sync(kFullMask, below_ud, src_below);
        if (lane == kWarp - 1) {
          down_dd = has_below ? chunk_bcd : A(0);
          down_ad = has_below ? chunk_bad : A(0);
          down_ud = has_below ? chunk_bud : A(0);
        }
      }

      A nD[R], nA[R], nU[R], nB[R], nL[R];
      A nDd[R], nAd[R], nUd[R], nBd[R], nLd[R];
#pragma unroll
      for (int k = 0; k < R; ++k) {
        const int64_t c = t - r0 - k;
        const int64_t r = top + r0 + k;
        nD[k] = nA[k] = nU[k] = nB[k] = nL[k] = A(0);
        nDd[k] = nAd[k] = nUd[k] = nBd[k] = nLd[k] = A(0);
        if (c >= 0 && c < nc && r < mc) {
          const A up_a = k == 0 ? up_a0 : a1[k - 1];
          const A up_u = k == 0 ? up_u0 : u1[k - 1];
          const A o = a.open.template at<GAP_TENSOR>(b, r, c);
          const A e = a.extend.template at<GAP_TENSOR>(b, r, c);
          const A C = c0[k], U = u0[k], L = l0[k], D = d0[k];
          const Weights<A> wc = Cell::normalized_weights(C, D, U, L);  // p1 = D, p2 = U, p3 = L
          const PrimeWeights<A> wa = Aff::normalized_prime_weights(a0[k], D, L);  // p1 = D, p2 = L
          const PrimeWeights<A> wb = Aff::normalized_prime_weights(b0[k], D, U);  // p1 = D, p2 = U
          const GapWeights<A> wu = Aff::normalized_gap_weights(U, up_a + o, up_u + e);
          const GapWeights<A> wl = Aff::normalized_gap_weights(L, b1[k] + o, l1[k] + e);
          const A seed = soft_reduction ? total.seed(C)
                                        : (r == mc - 1 && c == nc - 1 ? A(1) : A(0));
          const A EC = seed + (k == R - 1 ? down_d : mDp[k + 1]);
          const A EA = k == R - 1 ? down_a : mA[k + 1];
          const A EB = mB[k];
          const A EU = (k == R - 1 ? down_u : mU[k + 1]) + EC * wc.p2 + EB * wb.p2;
          const A EL = mL[k] + EC * wc.p3 + EA * wa.p2;
          const A ED = EC * wc.p1 + EA * wa.p1 + EB * wb.p1;
          nD[k] = ED;
          nA[k] = EU * wu.open;
          nU[k] = EU * wu.extend;
          nB[k] = EL * wl.open;
          nL[k] = EL * wl.extend;
          const int64_t at = pair_offset + r * a.cols + c;
          if constexpr (!TAN) {
            a.grad_scores[at] = store_as<T>(ED * g_out);
            if (a.grad_open) a.grad_open[at] = store_as<T>((nA[k] + nB[k]) * g_out);
            if (a.grad_extend) a.grad_extend[at] = store_as<T>((nU[k] + nL[k]) * g_out);
          } else {
            const A dS = dir_at(a.dir_scores, r, c);
            const A dO = dir_at(a.dir_open, r, c);
            const A dE = dir_at(a.dir_extend, r, c);
            gg += dS * ED + dO * (nA[k] + nB[k]) + dE * (nU[k] + nL[k]);
            if constexpr (kTangent) {
              // Tangents of the nodes, and pdot = p (input tangent - node tangent) / T.
              const A Cd = td0[0][k], Ud = td0[1][k], Ld = td0[2][k];
              const A Ad = td0[3][k], Bd = td0[4][k];
              const A Dd = (k == 0 ? up_cd0 : cd2[k - 1]) + dS;
              const A ad_up = k == 0 ? up_ad0 : td1[3][k - 1];
              const A ud_up = k == 0 ? up_ud0 : td1[1][k - 1];
              const A c1 = wc.p1 * (Dd - Cd) * inv_t, c2 = wc.p2 * (Ud - Cd) * inv_t,
                      c3 = wc.p3 * (Ld - Cd) * inv_t;
              const A a1d = wa.p1 * (Dd - Ad) * inv_t, a2d = wa.p2 * (Ld - Ad) * inv_t;
              const A b1d = wb.p1 * (Dd - Bd) * inv_t, b2d = wb.p2 * (Ud - Bd) * inv_t;
              const A uo = wu.open * (ad_up + dO - Ud) * inv_t;
              const A ue = wu.extend * (ud_up + dE - Ud) * inv_t;
              const A lo = wl.open * (td1[4][k] + dO - Ld) * inv_t;
              const A le = wl.extend * (td1[2][k] + dE - Ld) * inv_t;
              const A seed_d = soft_reduction ? seed * (Cd - sdot) * inv_t : A(0);
              const A ECd = seed_d + (k == R - 1 ? down_dd : qDp[k + 1]);
              const A EAd = k == R - 1 ? down_ad : qA[k + 1];
              const A EBd = qB[k];
              const A EUd = (k == R - 1 ? down_ud : qU[k + 1]) + ECd * wc.p2 + EC * c2 +
                            EBd * wb.p2 + EB * b2d;
              const A ELd = qL[k] + ECd * wc.p3 + EC * c3 + EAd * wa.p2 + EA * a2d;
              const A EDd = ECd * wc.p1 + EC * c1 + EAd * wa.p1 + EA * a1d + EBd * wb.p1 + EB * b1d;
              nDd[k] = EDd;
              nAd[k] = EUd * wu.open + EU * uo;
              nUd[k] = EUd * wu.extend + EU * ue;
              nBd[k] = ELd * wl.open + EL * lo;
              nLd[k] = ELd * wl.extend + EL * le;
              a.grad_scores[at] = store_as<T>(EDd * g_out);
              if (a.grad_open) a.grad_open[at] = store_as<T>((nAd[k] + nBd[k]) * g_out);
              if (a.grad_extend) a.grad_extend[at] = store_as<T>((nUd[k] + nLd[k]) * g_out);
            }
          }
        }
      }

      // Lane 0's first row is the band's top row: hand its contributions to
      // the row above up (to C of (top-1, t) from D of (top, t+1), last step;
      // to A and U of (top-1, t) from U of (top, t)).
      // 32 columns at a time, stored at the chunk's first column (columns run
      // downwards).
      if (has_above) {
        const int col = static_cast<int>(t);
        to_above.collect(0, mD[0], 0, col, lane);
        to_above.collect(1, nA[0], 0, col, lane);
        to_above.collect(2, nU[0], 0, col, lane);
        if constexpr (kTangent) {
          to_above_dot.collect(0, qD[0], 0, col, lane);
          to_above_dot.collect(1, nAd[0], 0, col, lane);
          to_above_dot.collect(2, nUd[0], 0, col, lane);
        }
        if (t < nc && (t & (kWarp - 1)) == 0) {
          const int last = static_cast<int>(min(t + kWarp - 1, nc - 1));
          to_above.store(edge_above, col, last, lane);
          if constexpr (kTangent) to_above_dot.store(edge_dot_above, col, last, lane);
        }
      }

#pragma unroll
      for (int k = 0; k < R; ++k) {
        mDp[k] = mD[k];
        mD[k] = nD[k];
        mA[k] = nA[k];
        mU[k] = nU[k];
        mB[k] = nB[k];
        mL[k] = nL[k];
        c0[k] = c1[k];
        c1[k] = c2[k];
        c2[k] = c3[k];
        u0[k] = u1[k];
        l0[k] = l1[k];
        d0[k] = d1[k];
        a0[k] = a1[k];
        b0[k] = b1[k];
        if constexpr (kTangent) {
          qDp[k] = qD[k];
          qD[k] = nDd[k];
          qA[k] = nAd[k];
          qU[k] = nUd[k];
          qB[k] = nBd[k];
          qL[k] = nLd[k];
#pragma unroll
          for (int p = 0; p < 5; ++p) td0[p][k] = td1[p][k];
          td1[0][k] = cd2[k];
        }
      }
      if (t > 0) {
        load_diagonal(hidden, t - 4, slot4, A(0), c3);
        load_diagonal(hidden + plane, t - 2, slot2, kNegInf, u1);
        load_diagonal(hidden + 2 * plane, t - 2, slot2, kNegInf, l1);
        load_scores(t - 2, s1);
        if constexpr (kTangent) {
#pragma unroll
          for (int p = 1; p < 5; ++p) load_diagonal(hdot + p * plane, t - 2, slot2, A(0), td1[p]);
          load_diagonal(hdot, t - 3, slot3, A(0), cd2);
        }
      }
      slot4 = slot4 == 0 ? n - 1 : slot4 - 1;
      slot3 = slot3 == 0 ? n - 1 : slot3 - 1;
      slot2 = slot2 == 0 ? n - 1 : slot2 - 1;
    }

    // TAN: the band's share of <W, A>, published with a release flag; the
    // pair's top band merges the shares in band order once each is published
    // (the bands below hold earlier tickets).
    if constexpr (TAN) merge_band_shares(a.ws, unit_id, band, (mc - 1) / kBandRows, gg, b,
                                         a.grad_grad_score);
  }
}

// Zero every (B, M, N) output that a reverse pass does not write in full:
// all of them unless "soft" without lengths (padding, and "max", which visits
// only the cells up to the argmax, get exactly zero).
inline void clear_unwritten(const Problem& p, bool written_in_full, void* const* outs, int count,
                            cudaStream_t s) {
  if (written_in_full) return;
  const int64_t elem = element_bytes(p.dtype);
  for (int i = 0; i < count; ++i)
    if (outs[i]) cudaMemsetAsync(outs[i], 0, p.batch * p.rows * p.cols * elem, s);
}

}  // namespace cuda

void affine_backward_cuda(const Problem& p, const BackwardArgs& args, void* workspace,
                          void* stream) {
  using namespace cuda;
  if (p.batch == 0 || p.rows == 0 || p.cols == 0) return;
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const Workspace ws = carve_workspace(p, workspace);
  clear_workspace(p, ws, s);  // the tags of the edges too
  const bool hard = runs_hard(p);
  void* const outs[] = {args.grad_scores, args.grad_gap_open, args.grad_gap_extend};
  clear_unwritten(p, !p.lengths && p.reduction == Reduction::Soft && !hard, outs, 3, s);
  dispatch_dtype(p.dtype, [&](auto* tag, auto acc) {
    using T = std::remove_pointer_t<decltype(tag)>;
    using A = decltype(acc);
    const ReverseArgs<T, A> k = reverse_args<T, A>(p, args, ws);
    dispatch_variant<A, true>(p, hard, [&](auto r, auto hard_c, auto gap_tensor) {
      launch_persistent<affine_backward_wavefront<T, A, r(), hard_c(), gap_tensor()>>(
          k, s, "affine_backward_wavefront");
    });
  });
}

void affine_double_backward_cuda(const Problem& p, const DoubleBackwardArgs& args,
                                 void* workspace, void* stream) {
  using namespace cuda;
  if (p.batch == 0) return;
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const int64_t elem = element_bytes(p.dtype);
  const bool hard = runs_hard(p);
  const bool soft_reduction = p.reduction == Reduction::Soft && !hard;
  void* const outs[] = {args.hvp_scores, args.hvp_gap_open, args.hvp_gap_extend};
  // T = 0: the Hessian is zero; the reverse pass computes <W, A> only.
  clear_unwritten(p, !p.lengths && soft_reduction, outs, 3, s);
  if (p.rows == 0 || p.cols == 0) {  // empty pairs: <W, A> = 0
    cudaMemsetAsync(args.grad_grad_score, 0, p.batch * elem, s);
    return;
  }
  const DoubleBackwardWorkspace dws = carve_double_backward_workspace(p, workspace);
  if (!hard) {
    tangent_pass_cuda(p, args, dws, soft_reduction, s);
    // The reverse pass's tangent edges go to edges_dot, over the tangent pass's tags.
    cudaMemsetAsync(dws.edges_dot, 0, edges_dot_bytes(p), s);
  }
  clear_workspace(p, dws.ws, s);  // the tags of the edges too
  dispatch_dtype(p.dtype, [&](auto* tag, auto acc) {
    using T = std::remove_pointer_t<decltype(tag)>;
    using A = decltype(acc);
    const ReverseArgs<T, A> k = reverse_args<T, A>(p, args, dws);
    dispatch_variant<A, true>(p, hard, [&](auto r, auto hard_c, auto gap_tensor) {
      launch_persistent<affine_backward_wavefront<T, A, r(), hard_c(), gap_tensor(), true>>(
          k, s, "affine_backward_wavefront (double backward)");
    });
  });
}

}  // namespace softsw
