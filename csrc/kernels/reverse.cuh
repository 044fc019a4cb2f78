// What the CUDA reverse passes share: their one argument struct, filled in one
// place (reverse_args), and the merge of the double backward's <W, A>. The
// passes: backward.cu (linear backward), affine.cu (affine backward, and its
// double-backward reverse pass), double_backward.cu (linear reverse tangent
// pass).
#pragma once

#include "problem.h"
#include "wavefront.cuh"

namespace softsw {
namespace cuda {

template <typename T, typename A>
struct ReverseArgs : WavefrontArgs<T, A> {
  bool vector_ok;  // 16-byte access lines up for scores and grad_scores
  const T* grad_score;
  int64_t grad_score_stride;  // BackwardArgs has it
  const A* hidden;
  const int64_t* argmax;
  const A* total;
  // The outputs: the gradient, or in the double backward the Hessian-vector
  // product (hvp_*); gap outputs nullptr when not wanted.
  T* grad_scores;
  T* grad_open = nullptr;
  T* grad_extend = nullptr;
  // The double backward's reverse pass only: the direction W (B, M, N)
  // contiguous, each nullptr for zero; the tangent pass's state (hdot,
  // hidden's layout) and soft-seed tangent (sdot, (B,), caller units); 1 / T
  // in caller units (0 when hard); <W, A> per pair; and for affine gaps the
  // second edge buffer (the contributions' tangents).
  const T* dir_scores = nullptr;
  const T* dir_open = nullptr;
  const T* dir_extend = nullptr;
  const A* hdot = nullptr;
  const A* sdot = nullptr;
  A inv_t = A(0);
  T* grad_grad_score = nullptr;
  unsigned long long* edges_dot = nullptr;
};

// The fields every reverse pass reads, for outputs of which `grad_scores` is
// the first.
template <typename T, typename A>
ReverseArgs<T, A> common_reverse_args(const Problem& p, const ForwardState& state,
                                      const void* grad_score, int64_t grad_score_stride,
                                      void* grad_scores, const Workspace& ws) {
  ReverseArgs<T, A> k;
  static_cast<WavefrontArgs<T, A>&>(k) = wavefront_args<T, A>(p, ws);
  k.vector_ok = vector_access_ok(p, p.scores) && vector_access_ok(p, grad_scores);
  k.grad_score = static_cast<const T*>(grad_score);
  k.grad_score_stride = grad_score_stride;
  k.hidden = static_cast<const A*>(state.hidden);
  k.argmax = state.argmax;
  k.total = static_cast<const A*>(state.total);
  k.grad_scores = static_cast<T*>(grad_scores);
  return k;
}

// The backward's arguments.
template <typename T, typename A>
ReverseArgs<T, A> reverse_args(const Problem& p, const BackwardArgs& args, const Workspace& ws) {
  ReverseArgs<T, A> k = common_reverse_args<T, A>(p, args.state, args.grad_score,
                                                  args.grad_score_stride, args.grad_scores, ws);
  k.grad_open = static_cast<T*>(args.grad_gap_open);
  k.grad_extend = static_cast<T*>(args.grad_gap_extend);
  return k;
}

// The double backward's reverse pass: the HVP as the outputs, the direction,
// the tangent pass's state, <W, A>.
template <typename T, typename A>
ReverseArgs<T, A> reverse_args(const Problem& p, const DoubleBackwardArgs& args,
                               const DoubleBackwardWorkspace& dws) {
  ReverseArgs<T, A> k = common_reverse_args<T, A>(p, args.state, args.grad_score,
                                                  args.grad_score_stride, args.hvp_scores, dws.ws);
  k.grad_open = static_cast<T*>(args.hvp_gap_open);
  k.grad_extend = static_cast<T*>(args.hvp_gap_extend);
  k.dir_scores = static_cast<const T*>(args.dir_scores);
  k.dir_open = static_cast<const T*>(args.dir_gap_open);
  k.dir_extend = static_cast<const T*>(args.dir_gap_extend);
  k.hdot = static_cast<const A*>(dws.hdot);
  k.sdot = static_cast<const A*>(dws.sdot);
  k.inv_t = runs_hard(p) ? A(0) : A(1.0 / p.temperature);
  k.grad_grad_score = static_cast<T*>(args.grad_grad_score);
  k.edges_dot = static_cast<unsigned long long*>(dws.edges_dot);
  return k;
}

// The double backward's <W, A> per pair, from each band's share (`share`,
// this lane's; reduced over the warp here; every lane calls this): a band
// below the top one publishes its share with a release flag; the pair's top
// band (band 0) waits for those of bands 1 .. `last` (they hold earlier
// tickets) and adds them in band order, a result independent of scheduling,
// into out[b].
template <typename T, typename A>
__device__ void merge_band_shares(const Workspace& ws, int64_t unit_id, int64_t band, int64_t last,
                                  A share, int64_t b, T* out) {
  share = warp_sum(share);
  if ((threadIdx.x & (kWarp - 1)) != 0) return;
  if (band > 0) {
    __stcg(&ws.partials[unit_id].a, double(share));
    store_release(ws.flags + unit_id, 1);
    return;
  }
  A acc = A(0) + share;
  for (int64_t k = 1; k <= last; ++k) {
    wait_for(ws.flags + unit_id + k, 1);
    acc += A(__ldcg(&ws.partials[unit_id + k].a));
  }
  out[b] = store_as<T>(acc);
}

}  // namespace cuda
}  // namespace softsw
