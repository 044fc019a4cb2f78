// Forward pass on CUDA: the linear-gap recurrence over a band wavefront
// (wavefront.cuh), the max/argmax or soft total reduced in registers and with
// warp shuffles, and optionally the per-cell state the backward reads.
#include "wavefront.cuh"

namespace softsw {
namespace cuda {

template <typename T, typename A>
struct ForwardArgs {
  int64_t batch, rows, cols, nbands;
  const T* scores;
  const int64_t* lengths;
  GapReader<T, A> gap;
  A scale;    // kernel units per caller unit
  A unscale;  // caller units per kernel unit
  bool soft_reduction;
  T* score;
  A* hidden;
  int64_t* argmax;
  A* total;
  Workspace ws;
};

template <typename T, typename A, int R, bool HARD>
__global__ void __launch_bounds__(kWarp* kWarpsPerBlock)
    forward_wavefront(const ForwardArgs<T, A> a) {
  using Cell = LinearCell<A, HARD>;
  constexpr int kBandRows = kWarp * R;
  const int lane = threadIdx.x & (kWarp - 1);
  const bool soft_reduction = a.soft_reduction && !HARD;
  A* const edges = static_cast<A*>(a.ws.edges);

  for (;;) {
    const long long unit = next_unit(a.ws.ticket);
    if (unit >= a.batch * a.nbands) return;
    const int64_t b = unit / a.nbands;
    const int64_t band = unit % a.nbands;
    const PairLengths len = pair_lengths(a.lengths, b, a.rows, a.cols);
    const int64_t m = len.m, n = len.n;
    if (m == 0 || n == 0) {
      if (band == 0 && lane == 0) {
        const A value = len.valid ? A(0) : quiet_nan<A>();
        a.score[b] = store_as<T>(value);
        a.total[b] = value;
        a.argmax[b] = -1;
      }
      continue;
    }
    const int64_t top = band * kBandRows;
    if (top >= m) continue;  // padding rows: no work
    const int rows_here = static_cast<int>(m - top < kBandRows ? m - top : kBandRows);
    const bool has_above = band > 0;
    const bool has_below = top + kBandRows < m;
    const int64_t unit_id = b * a.nbands + band;
    const A* edge_above = edges + (unit_id - 1) * a.cols;
    A* edge_below = edges + unit_id * a.cols;
    const T* S = a.scores + b * a.rows * a.cols;
    A* hidden = a.hidden ? a.hidden + b * a.rows * a.cols + top * n : nullptr;

    const int r0 = lane * R;  // first row of this lane, within the band
    A h[R], hp[R];            // each row's last two values (left, and diag of the row below)
#pragma unroll
    for (int k = 0; k < R; ++k) h[k] = hp[k] = A(0);
    A up_prev = A(0);         // what row 0 received last step: its diagonal now
    A edge_reg = A(0);
    MaxArg<A> best;
    SoftTotal<A> soft;

    const int lanes_active = (rows_here + R - 1) / R;
    const int64_t steps = n + int64_t(lanes_active) * R - 1;
    int64_t slot = 0;  // t mod n: where this step's anti-diagonal is stored

    A s_next[R];
    auto load_scores = [&](int64_t t, A* out) {
#pragma unroll
      for (int k = 0; k < R; ++k) {
        const int64_t c = t - r0 - k;
        const int64_t r = top + r0 + k;
        out[k] = (c >= 0 && c < n && r < m) ? load_as<A>(S + r * a.cols + c) * a.scale : A(0);
      }
    };
    load_scores(0, s_next);

    for (int64_t t = 0; t < steps; ++t) {
      A s_cur[R];
#pragma unroll
      for (int k = 0; k < R; ++k) s_cur[k] = s_next[k];
      if (t + 1 < steps) load_scores(t + 1, s_next);

      // The row above the band: published by the warp that owns the band above.
      if (has_above && (t & (kWarp - 1)) == 0 && t < n) {
        const int64_t need = t + kWarp < n ? t + kWarp : n;
        wait_for(a.ws.flags + unit_id - 1, static_cast<int>(need));
        edge_reg = t + lane < n ? __ldcg(edge_above + t + lane) : A(0);
      }
      const A from_above = __shfl_sync(kFullMask, edge_reg, static_cast<int>(t & (kWarp - 1)));
      A up0 = __shfl_up_sync(kFullMask, h[R - 1], 1);
      if (lane == 0) up0 = has_above ? from_above : A(0);
      const A diag0 = up_prev;
      up_prev = up0;

      A nh[R];
#pragma unroll
      for (int k = 0; k < R; ++k) {
        const int64_t c = t - r0 - k;
        const int64_t r = top + r0 + k;
        const A up = k == 0 ? up0 : h[k - 1];
        const A diag = k == 0 ? diag0 : hp[k - 1];
        if (c >= 0 && c < n && r < m) {
          const A g = a.gap.at(b, r, c);
          const A v = Cell::value(diag + s_cur[k], up + g, h[k] + g);
          nh[k] = v;
          if (soft_reduction) {
            soft.add(v);
          } else {
            best.add(v, r * a.cols + c);
          }
          if (hidden) hidden[slot * rows_here + r0 + k] = v;
        } else {
          nh[k] = c < 0 ? A(0) : h[k];
        }
      }
#pragma unroll
      for (int k = 0; k < R; ++k) {
        hp[k] = h[k];
        h[k] = nh[k];
      }

      // Hand the band's last row to the band below, 32 columns at a time.
      if (has_below && lane == kWarp - 1) {
        const int64_t c = t - (kBandRows - 1);
        if (c >= 0 && c < n) {
          edge_below[c] = h[R - 1];
          if (((c + 1) & (kWarp - 1)) == 0 && c + 1 < n)
            store_release(a.ws.flags + unit_id, static_cast<int>(c + 1));
        }
      }
      if (++slot == n) slot = 0;
    }

    // This band's share of the reduction, then the pair's result from the
    // last band (every band above has published its partial by then).
    Partial part;
    if (soft_reduction) {
      soft = warp_soft_total(soft);
      part = {double(soft.max), double(soft.sum)};
    } else {
      best = warp_max(best);
      part = {double(best.best), double(best.index)};
    }
    if (lane == kWarp - 1) {
      __stcg(&a.ws.partials[unit_id].a, part.a);
      __stcg(&a.ws.partials[unit_id].b, part.b);
      store_release(a.ws.flags + unit_id, static_cast<int>(n));
    }
    if (!has_below && lane == 0) {
      // Merge in band order for a result independent of scheduling.
      if (soft_reduction) {
        SoftTotal<A> acc;
        for (int64_t k = 0; k <= band; ++k) {
          SoftTotal<A> o;
          if (k == band) {
            o = soft;
          } else {
            o.max = A(__ldcg(&a.ws.partials[unit_id - band + k].a));
            o.sum = A(__ldcg(&a.ws.partials[unit_id - band + k].b));
          }
          acc.merge(o);
        }
        const A value = acc.value();
        a.total[b] = value;
        a.score[b] = store_as<T>(value * a.unscale);
        a.argmax[b] = -1;
      } else {
        MaxArg<A> acc;
        for (int64_t k = 0; k <= band; ++k) {
          MaxArg<A> o;
          if (k == band) {
            o = best;
          } else {
            o.best = A(__ldcg(&a.ws.partials[unit_id - band + k].a));
            o.index = static_cast<int64_t>(__ldcg(&a.ws.partials[unit_id - band + k].b));
          }
          acc.merge(o);
        }
        a.total[b] = acc.best;
        a.score[b] = store_as<T>(acc.best * a.unscale);
        a.argmax[b] = acc.index;
      }
    }
  }
}

template <typename T, typename A, int R, bool HARD>
void launch_forward(const ForwardArgs<T, A>& args, cudaStream_t stream) {
  auto kernel = forward_wavefront<T, A, R, HARD>;
  const int blocks = persistent_blocks(kernel, args.batch * args.nbands);
  if (blocks == 0) return;
  kernel<<<blocks, kWarp * kWarpsPerBlock, 0, stream>>>(args);
  check_launch("forward_wavefront");
}

}  // namespace cuda

int64_t cuda_workspace_bytes(const Problem& problem) { return cuda::workspace_bytes(problem); }

void forward_cuda(const Problem& p, const ForwardOutputs& out, void* workspace, void* stream) {
  using namespace cuda;
  if (p.affine)
    throw std::runtime_error("softsw: affine gaps are not implemented in the CUDA kernels yet");
  if (p.batch == 0) return;
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const Workspace ws = carve_workspace(p, workspace);
  clear_sync_state(p, ws, s);
  dispatch_dtype(p.dtype, [&](auto* tag, auto acc) {
    using T = std::remove_pointer_t<decltype(tag)>;
    using A = decltype(acc);
    const A scale = A(kernel_scale(p));
    ForwardArgs<T, A> args;
    args.batch = p.batch;
    args.rows = p.rows;
    args.cols = p.cols;
    args.nbands = band_count(p);
    args.scores = static_cast<const T*>(p.scores);
    args.lengths = p.lengths;
    args.gap = {static_cast<const T*>(p.gap_open.data), p.gap_open.stride[0],
                p.gap_open.stride[1], p.gap_open.stride[2], A(p.gap_open.value * double(scale)),
                scale};
    args.scale = scale;
    args.unscale = A(p.temperature > 0 ? p.temperature * kLn2 : 1.0);
    args.soft_reduction = p.reduction == Reduction::Soft;
    args.score = static_cast<T*>(out.score);
    args.hidden = static_cast<A*>(out.hidden);
    args.argmax = out.argmax;
    args.total = static_cast<A*>(out.total);
    args.ws = ws;
    const bool hard = p.temperature == 0;
    const int r = rows_per_thread(p);
    if (hard) {
      if (r == 1) launch_forward<T, A, 1, true>(args, s);
      else launch_forward<T, A, 4, true>(args, s);
    } else {
      if (r == 1) launch_forward<T, A, 1, false>(args, s);
      else launch_forward<T, A, 4, false>(args, s);
    }
  });
}

}  // namespace softsw
