// The first half of the CUDA double backward (docs/math.md "Double backward",
// steps 1 and 2), shared by the linear and affine passes:
//  * tangent_cuda (forward.cu) writes the tangents of every cell along the
//    direction into `hdot` (hidden's layout: 1 plane per pair, Hdot; affine 5
//    planes, Cdot Udot Ldot Adot Bdot): where the training forward ran in the
//    probability domain (linear, constant gap, T > 0) on its skeleton
//    (probability_tangent_cuda, forward_probability.cu: Y = Z Hdot next to
//    Z), else on the log-domain forward skeleton with LinearTangentRow or
//    AffineTangentRow;
//  * seed_tangent_cuda: for reduction "soft", the tangent of the seed's total
//    per pair, sdot = sum_ij 2^(C_ij - total) Cdot_ij (caller units).
// The reverse passes (double_backward.cu, affine.cu) read both.
#pragma once

#include "problem.h"
#include "wavefront.cuh"

namespace softsw {

// SOFTSW_PROBABILITY_TANGENT=0 runs the linear tangent pass on the log-domain
// skeleton (LinearTangentRow) also where probability_tangent_cuda would: for
// benchmarks of the choice in one build, and the emulation's check of that
// row with a constant gap.
inline bool probability_tangent() {
  static const bool on = !cuda::env_is_zero("SOFTSW_PROBABILITY_TANGENT");
  return on;
}

// `ws`: cleared sync state, and edges for the row's tagged values per column
// (edges_dot_bytes).
void tangent_cuda(const Problem& problem, const DoubleBackwardArgs& args, void* hdot,
                  const cuda::Workspace& ws, cudaStream_t stream);

namespace cuda {

// One block per pair and a fixed-order reduction (deterministic). The pair's
// cells are the first m * n slots of each plane (the band layout is a
// bijection onto them); C is plane 0 of `hidden`, Cdot plane 0 of `hdot`.
constexpr int kSeedTangentThreads = 256;

template <typename A>
__global__ void __launch_bounds__(kSeedTangentThreads)
    seed_tangent(const A* hidden, const A* hdot, const A* total, const int64_t* lengths,
                 int64_t rows, int64_t cols, int hidden_planes, int hdot_planes, A* sdot) {
  const int64_t b = blockIdx.x;
  const PairLengths len = pair_lengths(lengths, b, rows, cols);
  const int64_t plane = rows * cols;
  const A* C = hidden + b * hidden_planes * plane;
  const A* Cd = hdot + b * hdot_planes * plane;
  const PairTotal<A> t = PairTotal<A>::load(total, b);
  A acc = A(0), mass = A(0);
  for (int64_t i = threadIdx.x; i < len.m * len.n; i += kSeedTangentThreads) {
    const A seed = t.seed(C[i]);
    acc += seed * Cd[i];
    mass += seed;
  }
  static __shared__ A warps[2][kSeedTangentThreads / kWarp];
  acc = warp_sum(acc);
  mass = warp_sum(mass);
  if ((threadIdx.x & (kWarp - 1)) == 0) {
    warps[0][threadIdx.x / kWarp] = acc;
    warps[1][threadIdx.x / kWarp] = mass;
  }
  __syncthreads();
  if (threadIdx.x < kWarp) {
    const bool mine = threadIdx.x < kSeedTangentThreads / kWarp;
    const A v = warp_sum(mine ? warps[0][threadIdx.x] : A(0));
    const A w = warp_sum(mine ? warps[1][threadIdx.x] : A(0));
    // The seeds sum to 1, but only to the rounding of the stored H (~u |H|,
    // 1e-4 in float32 at |H| ~ 1e3); dividing by their sum makes sdot their
    // weighted mean exactly, so that the seeds' tangents seed (Hdot - sdot)
    // sum to 0 as they should, whatever the size of Hdot.
    if (threadIdx.x == 0) sdot[b] = w > A(0) ? v / w : v;
  }
}

}  // namespace cuda

inline void seed_tangent_cuda(const Problem& p, const void* hidden, const void* hdot,
                              const void* total, void* sdot, cudaStream_t s) {
  using namespace cuda;
  dispatch_dtype(p.dtype, [&](auto*, auto acc) {
    using A = decltype(acc);
    SOFTSW_LAUNCH(seed_tangent<A>, static_cast<unsigned>(p.batch), kSeedTangentThreads, 0, s,
        static_cast<const A*>(hidden), static_cast<const A*>(hdot), static_cast<const A*>(total),
        p.lengths, p.rows, p.cols, p.affine ? 3 : 1, p.affine ? 5 : 1, static_cast<A*>(sdot));
    check_launch("seed_tangent");
  });
}

// Steps 1 and 2 of the double backward at T > 0: the tangent pass into
// dws.hdot (its band edges as tagged words in dws.edges_dot, which the
// reverse pass reuses afterwards) and, for reduction "soft", the seed tangent
// into dws.sdot.
inline void tangent_pass_cuda(const Problem& p, const DoubleBackwardArgs& args,
                              const cuda::DoubleBackwardWorkspace& dws, bool soft_reduction,
                              cudaStream_t s) {
  using namespace cuda;
  Workspace tangent_ws = dws.ws;
  tangent_ws.edges = dws.edges_dot;
  clear_sync_state(p, tangent_ws, s);
  cudaMemsetAsync(dws.edges_dot, 0, edges_dot_bytes(p), s);
  tangent_cuda(p, args, dws.hdot, tangent_ws, s);
  if (soft_reduction) seed_tangent_cuda(p, args.state.hidden, dws.hdot, args.state.total, dws.sdot, s);
}

}  // namespace softsw
