// Double backward on CUDA: the Hessian-vector product of docs/math.md ("Double
// backward"), linear gaps, as two more band wavefronts (wavefront.cuh):
//
// 1. The tangent pass (tangent.cuh):
//      Hdot[i,j] = p1 (Hdot[i-1,j-1] + W_ij) + p2 (Hdot[i-1,j] + Wg_ij)
//                + p3 (Hdot[i,j-1] + Wg_ij)
//    stored in a workspace buffer with the layout of `hidden`: with a
//    constant gap in the probability domain as Y = Z Hdot next to Z
//    (forward_probability.cu), else with LinearTangentRow (forward.cu: the
//    weights from the forward's saved H). For
//    reduction="soft" also the seed's tangent sdot = sum_ij q_ij Hdot_ij,
//    q = 2^(H - total) (kernel units), per pair (seed_tangent_cuda).
//
// 2. The reverse pass (backward order): reverse_staged with TangentAdjointRow
//    (reverse.cuh's skeleton, S and W staged through shared memory) where
//    the forward ran one row per lane, else reverse_tangent_wavefront (four
//    rows per lane, tall log-domain problems). It carries the
//    adjoint E of backward.cu and its tangent
//      Edot = e0dot + sum over readers r of (Edot[r] p_k(r) + E[r] pdot_k(r)),
//      pdot_k = p_k (vdot_k - Hdot) / T,  e0dot = q (Hdot - sdot) / T (soft), 0 (max),
//    writing hvp_S = g_out (Edot p1 + E pdot1), hvp_g = g_out (Edot (p2+p3) + E (pdot2+pdot3))
//    and grad_grad_score = sum_ij W_ij E p1 + Wg_ij E (p2+p3) = <W, A>, reduced
//    per warp and merged in band order by the pair's top band (the last to
//    finish in reverse order, merge_band_shares). Band edges carry two tagged
//    values per column (TaggedEdge, as backward.cu's): the E- and the
//    Edot-contributions.
//
// Units. p_k, q and the weights are computed exactly as in backward.cu, from
// H, S, g in kernel units (soft: caller units / (T ln 2)). Everything tangent
// (W, Wg, Hdot, sdot, and hence pdot = p (vdot - Hdot) * inv_t with
// inv_t = 1 / T) stays in caller units, as in the CPU passes (cpu/reverse.h),
// so no tangent is ever rescaled. E is a ratio of two caller-unit quantities (d score / d H), so
// it is the same number in both unit systems.
//
// T = 0: the Hessian is zero almost everywhere. The tangent pass is skipped,
// hvp is cleared, and the reverse pass (HARD) computes E only, for <W, A>.
#include "affine.cuh"
#include "reverse.cuh"
#include "tangent.cuh"
#include "wavefront.cuh"

namespace softsw {
namespace cuda {

// --------------------------------------------------------------------------
// Pass 2: reverse wavefront carrying E and Edot (HARD: E only)
// --------------------------------------------------------------------------

template <typename T, typename A, int R, bool HARD>
__global__ void __launch_bounds__(kWarp* kWarpsPerBlock)
    reverse_tangent_wavefront(const ReverseArgs<T, A> a) {
  using Cell = LinearCell<A, HARD>;
  constexpr bool TAN = !HARD;  // carry the tangents (T > 0)
  constexpr int kBandRows = kWarp * R;
  const int lane = threadIdx.x & (kWarp - 1);
  const bool soft_reduction = a.soft_reduction && !HARD;
  // A band's edge: per column the E and (TAN) Edot contributions of its first
  // row, as tagged words (TaggedEdge) in ws.edges.
  constexpr int kEdgeValues = 2;
  using Edge = TaggedEdge<A>;
  unsigned long long* const edges = static_cast<unsigned long long*>(a.ws.edges);

  for (;;) {
    const TakenUnit unit = take_unit</*REVERSE=*/true>(a);
    if (!unit.taken) return;
    const int64_t b = unit.b, band = unit.band;
    const PairLengths len = pair_lengths(a.lengths, b, a.rows, a.cols);
    const int64_t m = len.m, n = len.n;
    if (!len.valid) {
      if (band == 0) fill_invalid_pair(a, b, lane);
      continue;
    }
    if (m == 0 || n == 0) {  // hvp was cleared
      if (band == 0 && lane == 0) a.grad_grad_score[b] = store_as<T>(A(0));
      continue;
    }
    const int64_t top = band * kBandRows;
    if (top >= m) continue;  // outputs were cleared
    const int rows_here = static_cast<int>(m - top < kBandRows ? m - top : kBandRows);
    const bool has_above = band > 0;
    const bool has_below = top + kBandRows < m;
    const int64_t unit_id = b * a.nbands + band;
    const int64_t edge_words = a.cols * kEdgeValues * Edge::kWords;  // a band's edge
    const unsigned long long* edge_below = edges + (unit_id + 1) * edge_words;
    unsigned long long* edge_above = edges + unit_id * edge_words;
    EdgeChunk<A, kEdgeValues> to_above;  // the band's first row, for the band above
    const int64_t pair_offset = b * a.rows * a.cols;
    const T* S = a.scores + pair_offset;
    const T* W = a.dir_scores ? a.dir_scores + pair_offset : nullptr;
    const T* Wg = a.dir_open ? a.dir_open + pair_offset : nullptr;
    const A* hidden = a.hidden + pair_offset + top * n;
    const A* hidden_above = a.hidden + pair_offset + (top - kBandRows) * n;
    const A* hdot = a.hdot + pair_offset + top * n;
    const A* hdot_above = a.hdot + pair_offset + (top - kBandRows) * n;
    const A g_out = load_as<A>(a.grad_score + b * a.grad_score_stride);
    const PairTotal<A> total = PairTotal<A>::load(a.total, b);
    const int64_t target = a.argmax[b];
    const A sdot = soft_reduction ? a.sdot[b] : A(0);
    const A inv_t = a.inv_t;

    const int r0 = lane * R;
    const int lanes_active = (rows_here + R - 1) / R;
    const int64_t steps = n + int64_t(lanes_active) * R - 1;

    // H (or Hdot) of this lane's rows on anti-diagonal d (0 where the cell is outside).
    auto load_diagonal = [&](const A* base, int64_t d, A* out) {
      const int64_t slot = d >= 0 ? d % n : 0;
#pragma unroll
      for (int k = 0; k < R; ++k) {
        const int64_t c = d - r0 - k;
        out[k] = (c >= 0 && c < n && top + r0 + k < m) ? __ldg(base + slot * rows_here + r0 + k)
                                                       : A(0);
      }
    };
    A w0[R], w1[R], w2[R];  // H on anti-diagonals t, t-1, t-2
    // Hdot on anti-diagonals t-1, t-2 (TAN; a cell's own is recomputed from
    // its candidates': linear_weight_tangents).
    A d1[R], d2[R];
    load_diagonal(hidden, steps - 1, w0);
    load_diagonal(hidden, steps - 2, w1);
    load_diagonal(hidden, steps - 3, w2);
    if constexpr (TAN) {
      load_diagonal(hdot, steps - 2, d1);
      load_diagonal(hdot, steps - 3, d2);
    }

    // Contributions E * p_k this lane's rows made on the last two steps, and
    // their tangents Edot * p_k + E * pdot_k (TAN).
    A m1[R], m1p[R], m2[R], m3[R];
    A q1[R], q1p[R], q2[R], q3[R];
#pragma unroll
    for (int k = 0; k < R; ++k) {
      m1[k] = m1p[k] = m2[k] = m3[k] = A(0);
      q1[k] = q1p[k] = q2[k] = q3[k] = A(0);
    }
    A above_up = A(0), above_diag = A(0);    // H of the row above the band (lane 0's chunk)
    A above_dup = A(0), above_ddiag = A(0);  // Hdot of the row above the band (TAN)
    A below_reg = A(0), below_dreg = A(0);   // contributions of the band below (lane 31's chunk)
    A gg = A(0);                             // this thread's share of <W, A>

    for (int64_t t = steps - 1; t >= 0; --t) {
      // Row above the band, for lane 0: H and Hdot at (top-1, t) and (top-1, t-1),
      // 32 columns at a time.
      if (has_above && t < n && ((t & (kWarp - 1)) == kWarp - 1 || t == n - 1)) {
        const int64_t c = (t & ~int64_t(kWarp - 1)) + lane;
        const int64_t slot_up = (kBandRows - 1 + c) % n;
        const int64_t slot_diag = (kBandRows - 1 + c - 1 + n) % n;
        const int64_t at_up = slot_up * kBandRows + kBandRows - 1;
        const int64_t at_diag = slot_diag * kBandRows + kBandRows - 1;
        const bool ok_up = c < n, ok_diag = c >= 1 && c - 1 < n;
        above_up = ok_up ? __ldg(hidden_above + at_up) : A(0);
        above_diag = ok_diag ? __ldg(hidden_above + at_diag) : A(0);
        if constexpr (TAN) {
          above_dup = ok_up ? __ldg(hdot_above + at_up) : A(0);
          above_ddiag = ok_diag ? __ldg(hdot_above + at_diag) : A(0);
        }
      }
      // Contributions of the band below, for lane 31's last row.
      const int64_t c_last = t - (kBandRows - 1);
      if (has_below && c_last >= 0 && c_last < n &&
          ((c_last & (kWarp - 1)) == kWarp - 1 || c_last == n - 1)) {
        const int col = static_cast<int>(c_last & ~int64_t(kWarp - 1)) + lane;
        const bool in = col <= c_last;
        const unsigned long long* at = edge_below + int64_t(col) * kEdgeValues * Edge::kWords;
        below_reg = in ? Edge::get(at, col) : A(0);
        if constexpr (TAN) below_dreg = in ? Edge::get(at + Edge::kWords, col) : A(0);
      }
      const int src = static_cast<int>(t & (kWarp - 1));
      const int src_below = static_cast<int>(c_last & (kWarp - 1));
      A up0 = __shfl_up_sync(kFullMask, w1[R - 1], 1);
      A diag0 = __shfl_up_sync(kFullMask, w2[R - 1], 1);
      const A chunk_up = __shfl_sync(kFullMask, above_up, src);
      const A chunk_diag = __shfl_sync(kFullMask, above_diag, src);
      if (lane == 0) {
        up0 = has_above ? chunk_up : A(0);
        diag0 = has_above ? chunk_diag : A(0);
      }
      A down = __shfl_down_sync(kFullMask, m2[0] + m1p[0], 1);
      const A chunk_below = __shfl_sync(kFullMask, below_reg, src_below);
      if (lane == kWarp - 1) down = has_below ? chunk_below : A(0);
      A dup0 = A(0), ddiag0 = A(0), down_d = A(0);
      if constexpr (TAN) {
        dup0 = __shfl_up_sync(kFullMask, d1[R - 1], 1);
        ddiag0 = __shfl_up_sync(kFullMask, d2[R - 1], 1);
        const A chunk_dup = __shfl_sync(kFullMask, above_dup, src);
        const A chunk_ddiag = __shfl_sync(kFullMask, above_ddiag, src);
        if (lane == 0) {
          dup0 = has_above ? chunk_dup : A(0);
          ddiag0 = has_above ? chunk_ddiag : A(0);
        }
        down_d = __shfl_down_sync(kFullMask, q2[0] + q1p[0], 1);
        const A chunk_dbelow = __shfl_sync(kFullMask, below_dreg, src_below);
        if (lane == kWarp - 1) down_d = has_below ? chunk_dbelow : A(0);
      }

      A n1[R], n2[R], n3[R];
      A nq1[R], nq2[R], nq3[R];
#pragma unroll
      for (int k = 0; k < R; ++k) {
        const int64_t c = t - r0 - k;
        const int64_t r = top + r0 + k;
        n1[k] = n2[k] = n3[k] = A(0);
        nq1[k] = nq2[k] = nq3[k] = A(0);
        if (c >= 0 && c < n && r < m) {
          const int64_t e = r * a.cols + c;
          const A up = k == 0 ? up0 : w1[k - 1];
          const A diag = k == 0 ? diag0 : w2[k - 1];
          const A left = w1[k];
          const A h = w0[k];
          const A g = a.open.at(b, r, c);
          const A s = scaled(load_as<A>(S + e), a.scale);
          const Weights<A> p = Cell::normalized_weights(h, diag + s, up + g, left + g);
          const A seed = soft_reduction ? total.seed(h) : (e == target ? A(1) : A(0));
          const A from_below = k == R - 1 ? down : m2[k + 1] + m1p[k + 1];
          const A E = seed + m3[k] + from_below;
          n1[k] = E * p.p1;
          n2[k] = E * p.p2;
          n3[k] = E * p.p3;
          const A w_s = W ? load_as<A>(W + e) : A(0);
          const A w_g = Wg ? load_as<A>(Wg + e) : A(0);
          gg += w_s * n1[k] + w_g * (n2[k] + n3[k]);
          if constexpr (TAN) {
            const A hd_up = k == 0 ? dup0 : d1[k - 1];
            const A hd_diag = k == 0 ? ddiag0 : d2[k - 1];
            const A hd_left = d1[k];
            const WeightTangents<A> pd =
                linear_weight_tangents(p, hd_diag + w_s, hd_up + w_g, hd_left + w_g, inv_t);
            const A seed_d = soft_reduction ? seed * (pd.hd - sdot) * inv_t : A(0);
            const A from_below_d = k == R - 1 ? down_d : q2[k + 1] + q1p[k + 1];
            const A Ed = seed_d + q3[k] + from_below_d;
            nq1[k] = Ed * p.p1 + E * pd.pd1;
            nq2[k] = Ed * p.p2 + E * pd.pd2;
            nq3[k] = Ed * p.p3 + E * pd.pd3;
            a.grad_scores[pair_offset + e] = store_as<T>(nq1[k] * g_out);
            if (a.grad_open) a.grad_open[pair_offset + e] = store_as<T>((nq2[k] + nq3[k]) * g_out);
          }
        }
      }

      // Lane 0's first row is the band's top row: hand its contributions up,
      // 32 columns at a time, stored at the chunk's first column (columns run
      // downwards).
      if (has_above) {
        const int col = static_cast<int>(t);
        to_above.collect(0, n2[0] + m1[0], 0, col, lane);
        if constexpr (TAN) to_above.collect(1, nq2[0] + q1[0], 0, col, lane);
        if (t < n && (t & (kWarp - 1)) == 0)
          to_above.store(edge_above, col, static_cast<int>(min(t + kWarp - 1, n - 1)), lane);
      }

#pragma unroll
      for (int k = 0; k < R; ++k) {
        m1p[k] = m1[k];
        m1[k] = n1[k];
        m2[k] = n2[k];
        m3[k] = n3[k];
        w0[k] = w1[k];
        w1[k] = w2[k];
        if constexpr (TAN) {
          q1p[k] = q1[k];
          q1[k] = nq1[k];
          q2[k] = nq2[k];
          q3[k] = nq3[k];
          d1[k] = d2[k];
        }
      }
      load_diagonal(hidden, t - 3, w2);
      if constexpr (TAN) load_diagonal(hdot, t - 3, d2);
    }

    merge_band_shares(a.ws, unit_id, band, (m - 1) / kBandRows, gg, b, a.grad_grad_score);
  }
}

// The double backward's row of the staged reverse skeleton (reverse.cuh, one
// row per lane): the cell of reverse_tangent_wavefront above. Planes H and
// Hdot, inputs S and W; E and Edot carried; the HVP's d/dS share into the
// slot, its gap share to grad_open, <W, A> summed per lane and merged per
// pair at the band's end. HARD: E alone (planes H, values E), for <W, A>; the
// slot gets 0 (the HVP is zero).
template <typename A, bool HARD>
struct TangentAdjointRow {
  static constexpr bool kHard = HARD;
  static constexpr int kValues = HARD ? 1 : 2, kPlanes = HARD ? 1 : 2, kStaged = 2;
  // Twice the backward's shared memory (two inputs, two rings): 3 blocks an
  // SM in float, 1 in double.
  static constexpr int kMinBlocks = sizeof(A) == 8 ? 1 : 3;
  // A gap tensor is read cell by cell (a third staging buffer would leave
  // room for 2 blocks an SM), as is the direction on it.
  static constexpr bool kStagesGap = false;
  A g_out, sdot, inv_t;
  A share = A(0);  // this lane's part of the band's <W, A>
  template <typename T>
  __device__ TangentAdjointRow(const ReverseArgs<T, A>& a, int64_t b)
      : g_out(load_as<A>(a.grad_score + b * a.grad_score_stride)),
        sdot(!HARD && a.soft_reduction ? a.sdot[b] : A(0)),
        inv_t(a.inv_t) {}
  template <typename T>
  __device__ void empty(const ReverseArgs<T, A>& a, int64_t b, int lane) {
    if (lane == 0) a.grad_grad_score[b] = store_as<T>(A(0));
  }
  template <typename T>
  __device__ void finish(const ReverseArgs<T, A>& a, int64_t unit_id, int64_t band, int64_t last,
                         int64_t b) {
    merge_band_shares(a.ws, unit_id, band, last, share, b, a.grad_grad_score);
  }
  template <bool SOFT, bool GAP_TENSOR, typename T>
  __device__ CellResult<A> cell(const ReverseArgs<T, A>& a, int64_t b, int r, int c,
                                const ReverseStencil<A, kPlanes>& h, const A (&in)[2], A g, A seed,
                                const A (&take)[2][kValues], A (&give)[3][kValues]) {
    A E;
    const Weights<A> p = linear_adjoint<A, HARD>(h, in[0], g, seed, take, give, E);
    const int64_t e = (b * a.rows + r) * a.cols + c;
    const A w_s = in[1];
    const A w_g = GAP_TENSOR && a.dir_open ? load_as<A>(a.dir_open + e) : A(0);
    share += w_s * give[0][0] + w_g * (give[1][0] + give[2][0]);
    if constexpr (HARD) {
      return {A(0), A(0)};
    } else {
      const WeightTangents<A> pd =
          linear_weight_tangents(p, h.diag[1] + w_s, h.up[1] + w_g, h.left[1] + w_g, inv_t);
      const A seed_d = SOFT ? seed * (pd.hd - sdot) * inv_t : A(0);
      const A Ed = seed_d + take[0][1] + take[1][1];
      give[0][1] = Ed * p.p1 + E * pd.pd1;
      give[1][1] = Ed * p.p2 + E * pd.pd2;
      give[2][1] = Ed * p.p3 + E * pd.pd3;
      return {give[0][1] * g_out, (give[1][1] + give[2][1]) * g_out};
    }
  }
};

template <typename T, typename A, int R, bool HARD>
void launch_reverse_tangent(const ReverseArgs<T, A>& args, cudaStream_t stream) {
  launch_persistent<reverse_tangent_wavefront<T, A, R, HARD>>(args, stream, "reverse_tangent_wavefront");
}

}  // namespace cuda

// The workspace double_backward_cuda needs (larger than cuda_workspace_bytes).
int64_t cuda_double_backward_workspace_bytes(const Problem& problem) {
  return cuda::double_backward_workspace_bytes(problem);
}

// `workspace` must hold cuda_double_backward_workspace_bytes(p) bytes.
void double_backward_cuda(const Problem& p, const DoubleBackwardArgs& args, void* workspace,
                          void* stream) {
  using namespace cuda;
  if (p.affine) return affine_double_backward_cuda(p, args, workspace, stream);
  if (p.batch == 0) return;
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const DoubleBackwardWorkspace dws = carve_double_backward_workspace(p, workspace);
  const bool hard = runs_hard(p);
  const int64_t cells = p.batch * p.rows * p.cols;
  const int64_t elem = element_bytes(p.dtype);
  const int r = rows_per_thread(p);
  const bool staged = r == 1 && staged_backward();
  // Cells outside the pairs get exactly zero; at T = 0 all of them, but the
  // staged pass writes the zeros of d/dS itself.
  if (p.lengths || (hard && !staged)) cudaMemsetAsync(args.hvp_scores, 0, cells * elem, s);
  if ((p.lengths || hard) && args.hvp_gap_open)
    cudaMemsetAsync(args.hvp_gap_open, 0, cells * elem, s);
  dispatch_dtype(p.dtype, [&](auto* tag, auto acc) {
    using T = std::remove_pointer_t<decltype(tag)>;
    using A = decltype(acc);
    const ReverseArgs<T, A> k = reverse_args<T, A>(p, args, dws);
    if (!hard) tangent_pass_cuda(p, args, dws, k.soft_reduction, s);
    clear_workspace(p, k.ws, s);  // the tags of the edges too
    if (staged) {
      dispatch_variant<A, false>(p, hard, [&](auto, auto hard_c, auto gap_tensor) {
        launch_reverse_staged<T, A, TangentAdjointRow<A, hard_c()>, 1, gap_tensor()>(
            k, s, "reverse_staged (double backward)");
      });
    } else if (hard) {
      if (r == 1) launch_reverse_tangent<T, A, 1, true>(k, s);
      else launch_reverse_tangent<T, A, 4, true>(k, s);
    } else {
      if (r == 1) launch_reverse_tangent<T, A, 1, false>(k, s);
      else launch_reverse_tangent<T, A, 4, false>(k, s);
    }
  });
}

}  // namespace softsw
