// Backward pass on CUDA: the reverse wavefront of MATH.md. The adjoint
// E = d score / d H flows from each cell to the three cells it read; a cell's
// transition weights are recomputed from the forward's saved H (wavefront.cuh
// gives the layout), and d score / d S = E * p1, d score / d g = E * (p2 + p3).
//
// The band skeleton is the forward's mirrored: steps run from the last
// anti-diagonal to the first, a lane's last row takes what the row below
// contributes from lane l+1 (one shuffle), and the band below hands its first
// row's contributions up through global memory with progress flags.
#include "wavefront.cuh"

namespace softsw {
namespace cuda {

template <typename T, typename A>
struct BackwardKernelArgs {
  int64_t batch, rows, cols, nbands;
  const T* scores;
  const int64_t* lengths;
  GapReader<T, A> gap;
  A scale;
  bool soft_reduction;
  const T* grad_score;
  const A* hidden;
  const int64_t* argmax;
  const A* total;
  T* grad_scores;
  T* grad_gap;  // or nullptr
  Workspace ws;
};

template <typename T, typename A, int R, bool HARD>
__global__ void __launch_bounds__(kWarp* kWarpsPerBlock)
    backward_wavefront(const BackwardKernelArgs<T, A> a) {
  using Cell = LinearCell<A, HARD>;
  constexpr int kBandRows = kWarp * R;
  const int lane = threadIdx.x & (kWarp - 1);
  const bool soft_reduction = a.soft_reduction && !HARD;
  A* const edges = static_cast<A*>(a.ws.edges);

  for (;;) {
    const long long unit = next_unit(a.ws.ticket);
    if (unit >= a.batch * a.nbands) return;
    const int64_t b = unit / a.nbands;
    const int64_t band = a.nbands - 1 - unit % a.nbands;  // bottom band first
    const PairLengths len = pair_lengths(a.lengths, b, a.rows, a.cols);
    const int64_t m = len.m, n = len.n;
    if (!len.valid) {
      if (band == 0) {
        for (int64_t e = lane; e < a.rows * a.cols; e += kWarp) {
          a.grad_scores[b * a.rows * a.cols + e] = store_as<T>(quiet_nan<A>());
          if (a.grad_gap) a.grad_gap[b * a.rows * a.cols + e] = store_as<T>(quiet_nan<A>());
        }
      }
      continue;
    }
    const int64_t top = band * kBandRows;
    if (m == 0 || n == 0 || top >= m) continue;  // outputs were cleared
    const int rows_here = static_cast<int>(m - top < kBandRows ? m - top : kBandRows);
    const bool has_above = band > 0;
    const bool has_below = top + kBandRows < m;
    const int64_t unit_id = b * a.nbands + band;
    const A* edge_below = edges + (unit_id + 1) * a.cols;
    A* edge_above = edges + unit_id * a.cols;
    const int64_t pair_offset = b * a.rows * a.cols;
    const T* S = a.scores + pair_offset;
    const A* hidden = a.hidden + pair_offset + top * n;
    const A* hidden_above = a.hidden + pair_offset + (top - kBandRows) * n;
    const A g_out = load_as<A>(a.grad_score + b);
    const A total = a.total[b];
    const int64_t target = a.argmax[b];

    const int r0 = lane * R;
    const int lanes_active = (rows_here + R - 1) / R;
    const int64_t steps = n + int64_t(lanes_active) * R - 1;

    // H of this lane's rows on anti-diagonal d (0 where the cell is outside).
    auto load_diagonal = [&](int64_t d, A* out) {
      const int64_t slot = d >= 0 ? d % n : 0;
#pragma unroll
      for (int k = 0; k < R; ++k) {
        const int64_t c = d - r0 - k;
        out[k] = (c >= 0 && c < n && top + r0 + k < m) ? __ldg(hidden + slot * rows_here + r0 + k)
                                                       : A(0);
      }
    };
    A w0[R], w1[R], w2[R];  // H on anti-diagonals t, t-1, t-2
    load_diagonal(steps - 1, w0);
    load_diagonal(steps - 2, w1);
    load_diagonal(steps - 3, w2);

    // Contributions E * p_k this lane's rows made on the last two steps.
    A m1[R], m1p[R], m2[R], m3[R];
#pragma unroll
    for (int k = 0; k < R; ++k) m1[k] = m1p[k] = m2[k] = m3[k] = A(0);
    A above_up = A(0), above_diag = A(0);  // H of the row above the band (lane 0's chunk)
    A below_reg = A(0);                    // contributions of the band below (lane 31's chunk)

    for (int64_t t = steps - 1; t >= 0; --t) {
      // Row above the band, for lane 0: H(top-1, t) and H(top-1, t-1), 32 columns at a time.
      if (has_above && t < n && ((t & (kWarp - 1)) == kWarp - 1 || t == n - 1)) {
        const int64_t c = (t & ~int64_t(kWarp - 1)) + lane;
        const int64_t slot_up = (kBandRows - 1 + c) % n;
        const int64_t slot_diag = (kBandRows - 1 + c - 1 + n) % n;
        above_up = c < n ? __ldg(hidden_above + slot_up * kBandRows + kBandRows - 1) : A(0);
        above_diag = (c >= 1 && c - 1 < n)
                         ? __ldg(hidden_above + slot_diag * kBandRows + kBandRows - 1)
                         : A(0);
      }
      // Contributions of the band below, for lane 31's last row.
      const int64_t c_last = t - (kBandRows - 1);
      if (has_below && c_last >= 0 && c_last < n &&
          ((c_last & (kWarp - 1)) == kWarp - 1 || c_last == n - 1)) {
        const int64_t base = c_last & ~int64_t(kWarp - 1);
        wait_for(a.ws.flags + unit_id + 1, static_cast<int>(n - base));
        below_reg = base + lane < n ? __ldcg(edge_below + base + lane) : A(0);
      }
      const int src = static_cast<int>(t & (kWarp - 1));
      A up0 = __shfl_up_sync(kFullMask, w1[R - 1], 1);
      A diag0 = __shfl_up_sync(kFullMask, w2[R - 1], 1);
      const A chunk_up = __shfl_sync(kFullMask, above_up, src);
      const A chunk_diag = __shfl_sync(kFullMask, above_diag, src);
      if (lane == 0) {
        up0 = has_above ? chunk_up : A(0);
        diag0 = has_above ? chunk_diag : A(0);
      }
      A down = __shfl_down_sync(kFullMask, m2[0] + m1p[0], 1);
      const A chunk_below = __shfl_sync(kFullMask, below_reg, static_cast<int>(c_last & (kWarp - 1)));
      if (lane == kWarp - 1) down = has_below ? chunk_below : A(0);

      A n1[R], n2[R], n3[R];
#pragma unroll
      for (int k = 0; k < R; ++k) {
        const int64_t c = t - r0 - k;
        const int64_t r = top + r0 + k;
        n1[k] = n2[k] = n3[k] = A(0);
        if (c >= 0 && c < n && r < m) {
          const A up = k == 0 ? up0 : w1[k - 1];
          const A diag = k == 0 ? diag0 : w2[k - 1];
          const A left = w1[k];
          const A h = w0[k];
          const A g = a.gap.at(b, r, c);
          const A s = load_as<A>(S + r * a.cols + c) * a.scale;
          const Weights<A> p = Cell::weights(h, diag + s, up + g, left + g);
          const A seed = soft_reduction ? exp2_acc(h - total)
                                        : (r * a.cols + c == target ? A(1) : A(0));
          const A from_below = k == R - 1 ? down : m2[k + 1] + m1p[k + 1];
          const A E = seed + m3[k] + from_below;
          n1[k] = E * p.p1;
          n2[k] = E * p.p2;
          n3[k] = E * p.p3;
          a.grad_scores[pair_offset + r * a.cols + c] = store_as<T>(n1[k] * g_out);
          if (a.grad_gap)
            a.grad_gap[pair_offset + r * a.cols + c] = store_as<T>((n2[k] + n3[k]) * g_out);
        }
      }

      // Lane 0's first row is the band's top row: hand its contributions up.
      if (has_above && lane == 0 && t < n) {
        edge_above[t] = n2[0] + m1[0];
        const int64_t done = n - t;
        if ((done & (kWarp - 1)) == 0 || t == 0)
          store_release(a.ws.flags + unit_id, static_cast<int>(t == 0 ? n : done));
      }

#pragma unroll
      for (int k = 0; k < R; ++k) {
        m1p[k] = m1[k];
        m1[k] = n1[k];
        m2[k] = n2[k];
        m3[k] = n3[k];
        w0[k] = w1[k];
        w1[k] = w2[k];
      }
      load_diagonal(t - 3, w2);
    }
  }
}

template <typename T, typename A, int R, bool HARD>
void launch_backward(const BackwardKernelArgs<T, A>& args, cudaStream_t stream) {
  auto kernel = backward_wavefront<T, A, R, HARD>;
  const int blocks = persistent_blocks(kernel, args.batch * args.nbands);
  if (blocks == 0) return;
  kernel<<<blocks, kWarp * kWarpsPerBlock, 0, stream>>>(args);
  check_launch("backward_wavefront");
}

}  // namespace cuda

void backward_cuda(const Problem& p, const BackwardArgs& args, void* workspace, void* stream) {
  using namespace cuda;
  if (p.affine)
    throw std::runtime_error("softsw: affine gaps are not implemented in the CUDA kernels yet");
  if (p.batch == 0 || p.rows == 0 || p.cols == 0) return;
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const Workspace ws = carve_workspace(p, workspace);
  clear_sync_state(p, ws, s);
  const int64_t cells = p.batch * p.rows * p.cols;
  const int64_t elem = p.dtype == Dtype::Float64 ? 8 : p.dtype == Dtype::Float32 ? 4 : 2;
  if (p.lengths) {  // cells outside the pairs get exactly zero
    cudaMemsetAsync(args.grad_scores, 0, cells * elem, s);
    if (args.grad_gap_open) cudaMemsetAsync(args.grad_gap_open, 0, cells * elem, s);
  }
  dispatch_dtype(p.dtype, [&](auto* tag, auto acc) {
    using T = std::remove_pointer_t<decltype(tag)>;
    using A = decltype(acc);
    const A scale = A(kernel_scale(p));
    BackwardKernelArgs<T, A> k;
    k.batch = p.batch;
    k.rows = p.rows;
    k.cols = p.cols;
    k.nbands = band_count(p);
    k.scores = static_cast<const T*>(p.scores);
    k.lengths = p.lengths;
    k.gap = {static_cast<const T*>(p.gap_open.data), p.gap_open.stride[0], p.gap_open.stride[1],
             p.gap_open.stride[2], A(p.gap_open.value * double(scale)), scale};
    k.scale = scale;
    k.soft_reduction = p.reduction == Reduction::Soft;
    k.grad_score = static_cast<const T*>(args.grad_score);
    k.hidden = static_cast<const A*>(args.state.hidden);
    k.argmax = args.state.argmax;
    k.total = static_cast<const A*>(args.state.total);
    k.grad_scores = static_cast<T*>(args.grad_scores);
    k.grad_gap = static_cast<T*>(args.grad_gap_open);
    k.ws = ws;
    const bool hard = p.temperature == 0;
    const int r = rows_per_thread(p);
    if (hard) {
      if (r == 1) launch_backward<T, A, 1, true>(k, s);
      else launch_backward<T, A, 4, true>(k, s);
    } else {
      if (r == 1) launch_backward<T, A, 1, false>(k, s);
      else launch_backward<T, A, 4, false>(k, s);
    }
  });
}

void double_backward_cuda(const Problem&, const DoubleBackwardArgs&, void*, void*) {
  throw std::runtime_error("softsw: double backward is not implemented in the CUDA kernels yet");
}

}  // namespace softsw
