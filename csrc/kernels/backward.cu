// Backward pass on CUDA: the reverse wavefront of docs/math.md. The adjoint
// E = d score / d H flows from each cell to the three cells it read; a cell's
// transition weights are recomputed from the forward's saved H (wavefront.cuh
// gives the layout), and d score / d S = E * p1, d score / d g = E * (p2 + p3).
//
// The band skeleton is the forward's mirrored: steps run from the last
// anti-diagonal to the first, a lane's last row takes what the row below
// contributes from lane l+1 (one shuffle), and the band below hands its first
// row's contributions up through global memory (tagged words). Two kernels:
// reverse_staged with AdjointRow (the problems whose forward ran with one row
// per lane, wavefront.cuh's rows_per_thread; the skeleton in reverse.cuh; two
// rows a lane where reverse_staged_rows says so, bands of 64 rows over the
// forward's state bands of 32) reads the scores through shared memory and
// writes the gradient back the same way; backward_wavefront (four rows per
// lane, tall log-domain problems) runs the bulk of a tall band unchecked in
// groups of 4 steps with 16-byte loads of S and H and 16-byte stores of the
// gradient; the fill and drain check every cell.
#include "affine.cuh"
#include "reverse.cuh"
#include "staging.cuh"
#include "wavefront.cuh"

namespace softsw {
namespace cuda {

template <typename T, typename A, int R, bool HARD, bool GAP_TENSOR>
__global__ void __launch_bounds__(kWarp* kWarpsPerBlock)
    backward_wavefront(const ReverseArgs<T, A> a) {
  using Cell = LinearCell<A, HARD>;
  constexpr int kBandRows = kWarp * R;
  const int lane = threadIdx.x & (kWarp - 1);
  const bool soft_reduction = a.soft_reduction && !HARD;
  using Edge = TaggedEdge<A>;
  unsigned long long* const edges = static_cast<unsigned long long*>(a.ws.edges);

  for (;;) {
    const TakenUnit unit = take_unit</*REVERSE=*/true>(a);
    if (!unit.taken) return;
    const int64_t b = unit.b, band = unit.band;
    const PairLengths len = pair_lengths(a.lengths, b, a.rows, a.cols);
    const int m = static_cast<int>(len.m), n = static_cast<int>(len.n);
    const int64_t pair_offset = b * a.rows * a.cols;
    if (!len.valid) {
      if (band == 0) fill_invalid_pair(a, b, lane);
      continue;
    }
    const int top = static_cast<int>(band) * kBandRows;
    if (m == 0 || n == 0 || top >= m) continue;  // outputs were cleared
    const int rows_here = m - top < kBandRows ? m - top : kBandRows;
    const bool has_above = band > 0;
    const bool has_below = top + kBandRows < m;
    const int64_t unit_id = b * a.nbands + band;
    const unsigned long long* edge_below = edges + (unit_id + 1) * a.cols * Edge::kWords;
    unsigned long long* edge_above = edges + unit_id * a.cols * Edge::kWords;
    const A* hidden = a.hidden + pair_offset + int64_t(top) * n;
    const A* hidden_above = a.hidden + pair_offset + int64_t(top - kBandRows) * n;
    const A g_out = load_as<A>(a.grad_score + b * a.grad_score_stride);
    const PairTotal<A> total = PairTotal<A>::load(a.total, b);
    const int64_t target = a.argmax[b];
    const int target_r = target >= 0 ? static_cast<int>(target / a.cols) : -1;
    const int target_c = target >= 0 ? static_cast<int>(target % a.cols) : -1;

    const int r0 = lane * R;
    const T* srow[R];
    T* grow[R];
    bool row_ok[R];
#pragma unroll
    for (int k = 0; k < R; ++k) {
      row_ok[k] = top + r0 + k < m;
      srow[k] = a.scores + pair_offset + int64_t(top + r0 + k) * a.cols;
      grow[k] = a.grad_scores + pair_offset + int64_t(top + r0 + k) * a.cols;
    }

    // H of this lane's rows on anti-diagonal d (0 where the cell is outside).
    auto load_diagonal = [&](int d, A (&out)[R], bool checked) {
      const int slot = d >= 0 ? d % n : 0;
      const A* at = hidden + int64_t(slot) * rows_here + r0;
      if (!checked && R == 4 && a.vector_ok) {
        if constexpr (R == 4) load4<A, A>(at, A(1), out);
      } else {
#pragma unroll
        for (int k = 0; k < R; ++k) {
          const int c = d - r0 - k;
          out[k] = (c >= 0 && c < n && row_ok[k]) ? __ldg(at + k) : A(0);
        }
      }
    };
    // H on anti-diagonals t, t-1, t-2, and t-3: loaded one step before it is
    // first read (a load at the end of step t is read in step t-2), so that
    // its latency passes behind a whole step.
    A w0[R], w1[R], w2[R], w3[R];
    const int lanes_active = (rows_here + R - 1) / R;
    const int steps = n + lanes_active * R - 1;
    load_diagonal(steps - 1, w0, true);
    load_diagonal(steps - 2, w1, true);
    load_diagonal(steps - 3, w2, true);
    load_diagonal(steps - 4, w3, true);

    // Contributions E * p_k this lane's rows made on the last two steps.
    A m1[R], m1p[R], m2[R], m3[R];
#pragma unroll
    for (int k = 0; k < R; ++k) m1[k] = m1p[k] = m2[k] = m3[k] = A(0);
    A above_up = A(0), above_diag = A(0);  // H of the row above the band (lane 0's chunk)
    A below_reg = A(0);                    // contributions of the band below (lane 31's chunk)
    EdgeChunk<A, 1> to_above;  // the band's top row's contributions, for the band above

    // One reverse step; `s[k]` is row k's score (kernel units); returns each
    // row's d score / d S (times g_out) in `grad`.
    auto step = [&](const int t, const A (&s)[R], A (&grad)[R], const bool checked) {
      if (has_above && t < n && ((t & (kWarp - 1)) == kWarp - 1 || t == n - 1)) {
        const int c = (t & ~(kWarp - 1)) + lane;
        const int slot_up = (kBandRows - 1 + c) % n;
        const int slot_diag = (kBandRows - 1 + c - 1 + n) % n;
        above_up = c < n ? __ldg(hidden_above + int64_t(slot_up) * kBandRows + kBandRows - 1)
                         : A(0);
        above_diag = (c >= 1 && c - 1 < n)
                         ? __ldg(hidden_above + int64_t(slot_diag) * kBandRows + kBandRows - 1)
                         : A(0);
      }
      const int c_last = t - (kBandRows - 1);
      if (has_below && c_last >= 0 && c_last < n &&
          ((c_last & (kWarp - 1)) == kWarp - 1 || c_last == n - 1)) {
        const int c = (c_last & ~(kWarp - 1)) + lane;
        below_reg = c < n ? Edge::get(edge_below + int64_t(c) * Edge::kWords, c) : A(0);
      }
      const int src = t & (kWarp - 1);
      A up0 = __shfl_up_sync(kFullMask, w1[R - 1], 1);
      A diag0 = __shfl_up_sync(kFullMask, w2[R - 1], 1);
      const A chunk_up = __shfl_sync(kFullMask, above_up, src);
      const A chunk_diag = __shfl_sync(kFullMask, above_diag, src);
      if (lane == 0) {
        up0 = has_above ? chunk_up : A(0);
        diag0 = has_above ? chunk_diag : A(0);
      }
      A down = __shfl_down_sync(kFullMask, m2[0] + m1p[0], 1);
      const A chunk_below = __shfl_sync(kFullMask, below_reg, c_last & (kWarp - 1));
      if (lane == kWarp - 1) down = has_below ? chunk_below : A(0);

      A n1[R], n2[R], n3[R];
#pragma unroll
      for (int k = 0; k < R; ++k) {
        const int c = t - r0 - k;
        const int r = top + r0 + k;
        n1[k] = n2[k] = n3[k] = A(0);
        grad[k] = A(0);
        if (!checked || (c >= 0 && c < n && row_ok[k])) {
          const A up = k == 0 ? up0 : w1[k - 1];
          const A diag = k == 0 ? diag0 : w2[k - 1];
          const A h = w0[k];
          const A g = a.open.template at<GAP_TENSOR>(b, r, c);
          const Weights<A> p = Cell::normalized_weights(h, diag + s[k], up + g, w1[k] + g);
          const A seed = soft_reduction ? total.seed(h)
                                        : (r == target_r && c == target_c ? A(1) : A(0));
          const A from_below = k == R - 1 ? down : m2[k + 1] + m1p[k + 1];
          const A E = seed + m3[k] + from_below;
          n1[k] = E * p.p1;
          n2[k] = E * p.p2;
          n3[k] = E * p.p3;
          grad[k] = n1[k] * g_out;
          if (a.grad_open) a.grad_open[pair_offset + int64_t(r) * a.cols + c] =
              store_as<T>((n2[k] + n3[k]) * g_out);
        }
      }

      // Lane 0's first row is the band's top row: hand its contributions up.
      if (has_above) {
        to_above.collect(0, n2[0] + m1[0], 0, t, lane);
        // Columns run downwards: a chunk is done at its first column.
        if (t < n && (t & (kWarp - 1)) == 0) to_above.store(edge_above, t, min(t + kWarp - 1, n - 1), lane);
      }

#pragma unroll
      for (int k = 0; k < R; ++k) {
        m1p[k] = m1[k];
        m1[k] = n1[k];
        m2[k] = n2[k];
        m3[k] = n3[k];
        w0[k] = w1[k];
        w1[k] = w2[k];
        w2[k] = w3[k];
      }
    };

    // Steps to - 1 down to from. Unchecked (CHECKED false) only where every
    // cell of every lane is inside the pair.
    auto run_steps = [&](int from, int to, auto checked) {
      constexpr bool kChecked = decltype(checked)::value;
      auto load = [&](int t, T (&raw)[R]) {  // converted when used (load_raw)
#pragma unroll
        for (int k = 0; k < R; ++k) {
          const int c = t - r0 - k;
          const bool inside = kChecked ? (c >= 0 && c < n && row_ok[k]) : true;
          raw[k] = (t >= from && inside) ? load_raw(srow[k] + c) : raw_zero<T>();
        }
      };
      T s_next[R];
      load(to - 1, s_next);
      for (int t = to - 1; t >= from; --t) {
        A s[R], grad[R];
#pragma unroll
        for (int k = 0; k < R; ++k) s[k] = scaled(to_acc<A>(s_next[k]), a.scale);
        load(t - 1, s_next);
        step(t, s, grad, kChecked);
#pragma unroll
        for (int k = 0; k < R; ++k) {
          const int c = t - r0 - k;
          if (!kChecked || (c >= 0 && c < n && row_ok[k])) grow[k][c] = store_as<T>(grad[k]);
        }
        load_diagonal(t - 4, w3, kChecked || t - 4 < kBandRows - 1);
      }
    };

    // As in the forward: steps kBandRows - 1 .. n - 1 of a full band run
    // unchecked, whole aligned groups of 4 among them (R = 4) as the bulk.
    const bool full = rows_here == kBandRows && n > kBandRows - 1;
    const int plain_begin = full ? kBandRows - 1 : 0;
    const int plain_end = full ? n : 0;
    int bulk_begin = plain_end, bulk_end = plain_end;
    if constexpr (R == 4) {
      if (a.vector_ok && full) {
        const int first = (kBandRows - 1 + 3) & ~3;
        const int last = n & ~3;
        if (last > first) {
          bulk_begin = first;
          bulk_end = last;
        }
      }
    }
    run_steps(plain_end, steps, std::true_type{});
    run_steps(bulk_end, plain_end, std::false_type{});
    if constexpr (R == 4) {
      if (bulk_end > bulk_begin) {
        // Group g (steps 4g+3 .. 4g) touches, in row k, columns 4q + j - k
        // (q = g - l, j = 3..0): the head of vector q and the tail of q-1.
        A vp[R][4], vc[R][4];
        Raw4<T> vn[R];         // the next group's vectors, converted when used
        A gc[R][4], gn[R][4];  // gradient of vector q (completed this group) and q-1
        auto load_vec = [&](int k, int q) {
          return q >= 0 && 4 * q + 3 < a.cols ? load_raw4(srow[k] + 4 * q) : raw4_zero<T>();
        };
        const int q_top = (bulk_end - 4) / 4 - lane;
#pragma unroll
        for (int k = 0; k < R; ++k) {
          convert4(load_vec(k, q_top), a.scale, vc[k]);
          convert4(load_vec(k, q_top - 1), a.scale, vp[k]);
        }
        for (int t0 = bulk_end - 4; t0 >= bulk_begin; t0 -= 4) {
          const int q = t0 / 4 - lane;
          const bool first_group = t0 == bulk_end - 4;
#pragma unroll
          for (int k = 0; k < R; ++k) vn[k] = load_vec(k, q - 2);
#pragma unroll
          for (int j = 3; j >= 0; --j) {
            A s[R], grad[R];
#pragma unroll
            for (int k = 0; k < R; ++k) s[k] = j >= k ? vc[k][j - k] : vp[k][4 + j - k];
            step(t0 + j, s, grad, false);
#pragma unroll
            for (int k = 0; k < R; ++k) {
              if (j >= k) gc[k][j - k] = grad[k];
              else gn[k][4 + j - k] = grad[k];
            }
            // H four diagonals back: all inside unless near the fill.
            const int d = t0 + j - 4;
            load_diagonal(d, w3, d < kBandRows - 1);
          }
#pragma unroll
          for (int k = 0; k < R; ++k) {
            if (first_group) {  // the tail of vector q went out with the checked steps
#pragma unroll
              for (int i = 0; i < 4; ++i)
                if (i + k <= 3) grow[k][4 * q + i] = store_as<T>(gc[k][i]);
            } else {
              store4<T, A>(grow[k] + 4 * q, gc[k]);
            }
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              gc[k][i] = gn[k][i];
              vc[k][i] = vp[k][i];
            }
            convert4(vn[k], a.scale, vp[k]);
          }
        }
        // Vector q-1 of the lowest group is only partly done: store its tail,
        // the checked steps below write the rest.
        const int q_low = bulk_begin / 4 - lane - 1;
#pragma unroll
        for (int k = 0; k < R; ++k)
#pragma unroll
          for (int i = 0; i < 4; ++i)
            if (i >= 4 - k) grow[k][4 * q_low + i] = store_as<T>(gc[k][i]);
      }
    }
    run_steps(plain_begin, bulk_begin, std::false_type{});
    run_steps(0, plain_begin, std::true_type{});
  }
}


// The backward's row of the staged reverse skeleton (reverse.cuh, one or two
// rows per lane): E from the seed and what the cell's readers handed it, E p_k to the
// cells it read; d score / d S = g_out E p1 into the slot and, with gap
// tensors, d score / d g = g_out E (p2 + p3).
template <typename A, bool HARD>
struct AdjointRow {
  static constexpr bool kHard = HARD;
  static constexpr int kValues = 1, kPlanes = 1, kStaged = 1;
  // Registers for 6 blocks an SM (3 in double) at one row a lane, as the
  // shared memory allows (a staged gap tensor's second staging buffer leaves
  // room for 3; two rows a lane: kReverseMinBlocks).
  static constexpr int kMinBlocks = sizeof(A) == 8 ? 3 : 6;
  static constexpr bool kStagesGap = true;
  A g_out;
  template <typename T>
  __device__ AdjointRow(const ReverseArgs<T, A>& a, int64_t b)
      : g_out(load_as<A>(a.grad_score + b * a.grad_score_stride)) {}
  template <typename T> __device__ void empty(const ReverseArgs<T, A>&, int64_t, int) {}
  template <typename T> __device__ void finish(const ReverseArgs<T, A>&, int64_t, int64_t, int64_t, int64_t) {}
  template <bool SOFT, bool GAP_TENSOR, typename T>
  __device__ CellResult<A> cell(const ReverseArgs<T, A>&, int64_t, int, int, const ReverseStencil<A, 1>& h,
                                const A (&in)[1], A g, A seed, const A (&take)[2][1], A (&give)[3][1]) {
    A E;
    linear_adjoint<A, HARD>(h, in[0], g, seed, take, give, E);
    return {give[0][0] * g_out, (give[1][0] + give[2][0]) * g_out};
  }
};

}  // namespace cuda

void backward_cuda(const Problem& p, const BackwardArgs& args, void* workspace, void* stream) {
  using namespace cuda;
  if (p.affine) return affine_backward_cuda(p, args, workspace, stream);
  if (p.batch == 0 || p.rows == 0 || p.cols == 0) return;
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const Workspace ws = carve_workspace(p, workspace);
  clear_workspace(p, ws, s);
  const int64_t cells = p.batch * p.rows * p.cols;
  const int64_t elem = element_bytes(p.dtype);
  if (p.lengths) {  // cells outside the pairs get exactly zero
    cudaMemsetAsync(args.grad_scores, 0, cells * elem, s);
    if (args.grad_gap_open) cudaMemsetAsync(args.grad_gap_open, 0, cells * elem, s);
  }
  dispatch_dtype(p.dtype, [&](auto* tag, auto acc) {
    using T = std::remove_pointer_t<decltype(tag)>;
    using A = decltype(acc);
    const ReverseArgs<T, A> k = reverse_args<T, A>(p, args, ws);
    dispatch_variant<A, false>(p, runs_hard(p), [&](auto r, auto hard_c, auto gap_tensor) {
      if constexpr (r() == 1) {
        if (staged_backward()) {
          if constexpr (sizeof(A) == 4 && !gap_tensor()) {
            if (reverse_staged_rows(p) == 2)
              return launch_reverse_staged<T, A, AdjointRow<A, hard_c()>, 2, false>(
                  k, s, "reverse_staged (backward, two rows)");
          }
          return launch_reverse_staged<T, A, AdjointRow<A, hard_c()>, 1, gap_tensor()>(
              k, s, "reverse_staged (backward)");
        }
      }
      launch_persistent<backward_wavefront<T, A, r(), hard_c(), gap_tensor()>>(
          k, s, "backward_wavefront");
    });
  });
}

}  // namespace softsw
