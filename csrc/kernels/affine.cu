// Affine gaps on CUDA: the backward of the three-state recurrence (SPEC.md
// §1, MATH.md "Affine gaps") on the band wavefront of wavefront.cuh, with the
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
// three edge planes per column of its last row: the C, A and U adjoint
// contributions of the band's first row.
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

template <typename T, typename A>
struct AffineBackwardArgs {
  int64_t batch, rows, cols, nbands;
  const T* scores;
  const int64_t* lengths;
  GapReader<T, A> open, extend;
  A scale;
  bool soft_reduction;
  const T* grad_score;
  const A* hidden;
  const int64_t* argmax;
  const A* total;
  T* grad_scores;
  T* grad_open;    // or nullptr
  T* grad_extend;  // or nullptr
  Workspace ws;
};

template <typename T, typename A, int R, bool HARD, bool GAP_TENSOR>
__global__ void __launch_bounds__(kWarp* kWarpsPerBlock)
    affine_backward_wavefront(const AffineBackwardArgs<T, A> a) {
  using Cell = LinearCell<A, HARD>;
  using Aff = AffineCell<A, HARD>;
  constexpr int kBandRows = kWarp * R;
  const A kNegInf = neg_inf<A>();
  const int lane = threadIdx.x & (kWarp - 1);
  const bool soft_reduction = a.soft_reduction && !HARD;
  A* const edges = static_cast<A*>(a.ws.edges);
  const int64_t plane = a.rows * a.cols;

  for (;;) {
    const long long unit = next_unit(a.ws.ticket);
    if (unit >= a.batch * a.nbands) return;
    const int64_t b = unit / a.nbands;
    const int64_t band = a.nbands - 1 - unit % a.nbands;  // bottom band first
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
      if (band == 0) {
        for (int64_t e = lane; e < plane; e += kWarp) {
          a.grad_scores[pair_offset + e] = store_as<T>(quiet_nan<A>());
          if (a.grad_open) a.grad_open[pair_offset + e] = store_as<T>(quiet_nan<A>());
          if (a.grad_extend) a.grad_extend[pair_offset + e] = store_as<T>(quiet_nan<A>());
        }
      }
      continue;
    }
    const int64_t top = band * kBandRows;
    if (mc == 0 || nc == 0 || top >= mc) continue;  // outputs were cleared
    // Rows this unit computes, and rows of this band in `hidden` (the forward's).
    const int rows_here = static_cast<int>(mc - top < kBandRows ? mc - top : kBandRows);
    const int rows_stored = static_cast<int>(m - top < kBandRows ? m - top : kBandRows);
    const bool has_above = band > 0;
    const bool has_below = top + kBandRows < mc;
    const int64_t unit_id = b * a.nbands + band;
    const A* edge_below = edges + (unit_id + 1) * 3 * a.cols;
    A* edge_above = edges + unit_id * 3 * a.cols;
    const T* S = a.scores + pair_offset;
    const A* hid = a.hidden + b * 3 * plane;
    const A* hidden = hid + top * n;  // C plane of this band; U at + plane, L at + 2 * plane
    const A* hidden_above = hid + (top - kBandRows) * n;  // the band above (full height)
    const A g_out = load_as<A>(a.grad_score + b);
    const PairTotal<A> total = PairTotal<A>::load(a.total, b);

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

    // Saved C of this lane's rows on anti-diagonals t, t-1, t-2, t-3; U and L
    // on t and t-1; the scores on t-1.
    A c0[R], c1[R], c2[R], c3[R], u0[R], u1[R], l0[R], l1[R];
    T s1[R];
    // Recomputed D, A, B on anti-diagonal t (x0) and t-1 (x1).
    A d0[R], a0[R], b0[R], d1[R], a1[R], b1[R];
    // Adjoint contributions this lane's rows made on the last steps: to C
    // (from D) on the last two, to A and U (from U), to B and L (from L).
    A mD[R], mDp[R], mA[R], mU[R], mB[R], mL[R];
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
    // Slots of anti-diagonals t-4 and t-2 (the loads at the end of step t),
    // stepped down with t; meaningless once the diagonal is negative (no
    // cell of it is then inside).
    int64_t slot4 = slot_of(steps - 4), slot2 = slot_of(steps - 2);
    load_scores(steps - 1, s1);
#pragma unroll
    for (int k = 0; k < R; ++k) {
      d0[k] = d1[k] = kNegInf;
      a0[k] = b0[k] = a1[k] = b1[k] = A(0);
      mD[k] = mDp[k] = mA[k] = mU[k] = mB[k] = mL[k] = A(0);
    }
    // The row above the band, for lane 0, per column cc of a 32-column chunk:
    // C of (top-1, cc-2), A and U of (top-1, cc).
    A above_c = A(0), above_a = A(0), above_u = kNegInf;
    // Contributions of the band below to the band's last row (lane 31's chunk).
    A below_c = A(0), below_a = A(0), below_u = A(0);

    for (int64_t t = steps; t >= 0; --t) {
      if (has_above && t <= nc && ((t & (kWarp - 1)) == kWarp - 1 || t == nc)) {
        const int64_t cc = (t & ~int64_t(kWarp - 1)) + lane;
        above_c = (cc >= 2 && cc - 2 < n) ? above_at(0, kBandRows - 1, cc - 2) : A(0);
        above_u = cc < n ? above_at(1, kBandRows - 1, cc) : kNegInf;
        if (cc < n) {
          // A of (top-1, cc) = prime(D, L), D = C(top-2, cc-1) + S(top-1, cc): the forward's arithmetic.
          const A cd = cc >= 1 ? above_at(0, kBandRows - 2, cc - 1) : A(0);
          const A s = load_as<A>(S + (top - 1) * a.cols + cc) * a.scale;
          above_a = Aff::prime(cd + s, above_at(2, kBandRows - 1, cc));
        } else {
          above_a = A(0);
        }
      }
      // Contributions of the band below, for lane 31's last row.
      const int64_t c_last = t - (kBandRows - 1);
      if (has_below && c_last >= 0 && c_last < nc &&
          ((c_last & (kWarp - 1)) == kWarp - 1 || c_last == nc - 1)) {
        const int64_t base = c_last & ~int64_t(kWarp - 1);
        wait_for(a.ws.flags + unit_id + 1, static_cast<int>(nc - base));
        const bool in = base + lane < nc;
        below_c = in ? __ldcg(edge_below + base + lane) : A(0);
        below_a = in ? __ldcg(edge_below + a.cols + base + lane) : A(0);
        below_u = in ? __ldcg(edge_below + 2 * a.cols + base + lane) : A(0);
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
          const A D = cd + to_acc<A>(s1[k]) * a.scale;
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

      A nD[R], nA[R], nU[R], nB[R], nL[R];
#pragma unroll
      for (int k = 0; k < R; ++k) {
        const int64_t c = t - r0 - k;
        const int64_t r = top + r0 + k;
        nD[k] = nA[k] = nU[k] = nB[k] = nL[k] = A(0);
        if (c >= 0 && c < nc && r < mc) {
          const A up_a = k == 0 ? up_a0 : a1[k - 1];
          const A up_u = k == 0 ? up_u0 : u1[k - 1];
          const A o = a.open.template at<GAP_TENSOR>(b, r, c);
          const A e = a.extend.template at<GAP_TENSOR>(b, r, c);
          const A C = c0[k], U = u0[k], L = l0[k], D = d0[k];
          const Weights<A> wc = Cell::weights(C, D, U, L);       // p1 = D, p2 = U, p3 = L
          const PrimeWeights<A> wa = Aff::prime_weights(a0[k], D, L);  // p1 = D, p2 = L
          const PrimeWeights<A> wb = Aff::prime_weights(b0[k], D, U);  // p1 = D, p2 = U
          const GapWeights<A> wu = Aff::gap_weights(U, up_a + o, up_u + e);
          const GapWeights<A> wl = Aff::gap_weights(L, b1[k] + o, l1[k] + e);
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
          a.grad_scores[at] = store_as<T>(ED * g_out);
          if (a.grad_open) a.grad_open[at] = store_as<T>((nA[k] + nB[k]) * g_out);
          if (a.grad_extend) a.grad_extend[at] = store_as<T>((nU[k] + nL[k]) * g_out);
        }
      }

      // Lane 0's first row is the band's top row: hand its contributions to
      // the row above up (to C of (top-1, t) from D of (top, t+1), last step;
      // to A and U of (top-1, t) from U of (top, t)).
      if (has_above && lane == 0 && t < nc) {
        edge_above[t] = mD[0];
        edge_above[a.cols + t] = nA[0];
        edge_above[2 * a.cols + t] = nU[0];
        const int64_t done = nc - t;
        if ((done & (kWarp - 1)) == 0 || t == 0)
          store_release(a.ws.flags + unit_id, static_cast<int>(t == 0 ? nc : done));
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
      }
      if (t > 0) {
        load_diagonal(hidden, t - 4, slot4, A(0), c3);
        load_diagonal(hidden + plane, t - 2, slot2, kNegInf, u1);
        load_diagonal(hidden + 2 * plane, t - 2, slot2, kNegInf, l1);
        load_scores(t - 2, s1);
      }
      slot4 = slot4 == 0 ? n - 1 : slot4 - 1;
      slot2 = slot2 == 0 ? n - 1 : slot2 - 1;
    }
  }
}

}  // namespace cuda

void affine_backward_cuda(const Problem& p, const BackwardArgs& args, void* workspace,
                          void* stream) {
  using namespace cuda;
  if (p.batch == 0 || p.rows == 0 || p.cols == 0) return;
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const Workspace ws = carve_workspace(p, workspace);
  clear_sync_state(p, ws, s);
  const int64_t cells = p.batch * p.rows * p.cols;
  const int64_t elem = p.dtype == Dtype::Float64 ? 8 : p.dtype == Dtype::Float32 ? 4 : 2;
  dispatch_dtype(p.dtype, [&](auto* tag, auto acc) {
    using T = std::remove_pointer_t<decltype(tag)>;
    using A = decltype(acc);
    const bool hard = runs_hard(p);
    const bool soft_reduction = p.reduction == Reduction::Soft && !hard;
    // Every cell of every pair is written only for "soft" without lengths;
    // otherwise (padding, and "max", which visits only the cells up to the
    // argmax) the rest is exactly zero.
    if (p.lengths || !soft_reduction) {
      cudaMemsetAsync(args.grad_scores, 0, cells * elem, s);
      if (args.grad_gap_open) cudaMemsetAsync(args.grad_gap_open, 0, cells * elem, s);
      if (args.grad_gap_extend) cudaMemsetAsync(args.grad_gap_extend, 0, cells * elem, s);
    }
    const A scale = hard ? A(1) : A(kernel_scale(p));
    AffineBackwardArgs<T, A> k;
    k.batch = p.batch;
    k.rows = p.rows;
    k.cols = p.cols;
    k.nbands = band_count(p);
    k.scores = static_cast<const T*>(p.scores);
    k.lengths = p.lengths;
    k.open = gap_reader<T, A>(p.gap_open, scale);
    k.extend = gap_reader<T, A>(p.gap_extend, scale);
    k.scale = scale;
    k.soft_reduction = p.reduction == Reduction::Soft;
    k.grad_score = static_cast<const T*>(args.grad_score);
    k.hidden = static_cast<const A*>(args.state.hidden);
    k.argmax = args.state.argmax;
    k.total = static_cast<const A*>(args.state.total);
    k.grad_scores = static_cast<T*>(args.grad_scores);
    k.grad_open = static_cast<T*>(args.grad_gap_open);
    k.grad_extend = static_cast<T*>(args.grad_gap_extend);
    k.ws = ws;
    dispatch_variant<A, true>(p, hard, [&](auto r, auto hard_c, auto gap_tensor) {
      launch_persistent<affine_backward_wavefront<T, A, r(), hard_c(), gap_tensor()>>(
          k, s, "affine_backward_wavefront");
    });
  });
}

}  // namespace softsw
