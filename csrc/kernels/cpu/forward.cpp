// The forward's entry point (problem.h): which pass each pair takes
// (forward_impl), and the passes' work spread over threads.
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include "../problem.h"
#include "affine_long_pair.h"
#include "float_mode.h"
#include "forward.h"
#include "forward_probability.h"
#include "forward_simd.h"
#include "memory.h"
#include "setup.h"
#include "thread_pool.h"

namespace softsw {
namespace cpu {
namespace {

// One pair on the scalar passes of forward.h (log domain), results written.
template <typename T>
void forward_one(const Setup<T>& su, const ForwardOutputs& out, int64_t b, Scratch<Acc<T>>& sc) {
  using A = Acc<T>;
  const Problem& p = su.p;
  int64_t m = 0, n = 0;
  const bool ok = su.extents(b, m, n);
  if (!ok) m = n = 0;
  A* hid = out.hidden ? static_cast<A*>(out.hidden) + b * su.planes * su.MN : nullptr;
  if (hid)
    for (int64_t k = 0; k < su.planes; ++k) fill_outside<A>(hid + k * su.MN, su.M, su.N, m, n, A(0));
  PairResult<A> r;
  if (m > 0 && n > 0) {
    const PairView<T> pv = su.pair(b);
    if (p.affine)
      r = su.hard ? forward_affine<T, true>(pv, m, n, su.MN, hid, false, sc)
                  : forward_affine<T, false>(pv, m, n, su.MN, hid, su.soft_reduction, sc);
    else
      r = su.hard ? forward_linear<T, true>(pv, m, n, hid, false, sc)
                  : forward_linear<T, false>(pv, m, n, hid, su.soft_reduction, sc);
  }
  if (!ok) r.total = quiet_nan<A>();
  if (p.reduction == Reduction::Soft) r.argmax = -1;
  st(static_cast<T*>(out.score), b, r.total * su.unit);
  PairTotal<A>::of(r.total).store(static_cast<A*>(out.total), b);
  out.argmax[b] = r.argmax;
}

// Work items of the forward: groups of up to W pairs of one SIMD pass (pairs
// of similar shape together: fewer idle lanes), or single pairs.
struct Groups {
  std::vector<int64_t> pairs;
  int64_t count = 0;  // groups
  int64_t lo(int64_t g) const { return g * static_cast<int64_t>(pairs.size()) / count; }
};

template <typename T>
Groups make_groups(const Setup<T>& su, std::vector<int64_t> pairs, double work) {
  std::stable_sort(pairs.begin(), pairs.end(), [&](int64_t a, int64_t b) {
    int64_t ma, na, mb, nb;
    su.extents(a, ma, na);
    su.extents(b, mb, nb);
    return std::make_pair(na, ma) > std::make_pair(nb, mb);
  });
  Groups g;
  const int64_t P = static_cast<int64_t>(pairs.size());
#if SOFTSW_CPU_VECTOR
  constexpr int64_t W = simd::W;
#else
  constexpr int64_t W = 1;
#endif
  g.count = P == 0 ? 0 : std::max<int64_t>((P + W - 1) / W, std::min<int64_t>(P, thread_count(P, work)));
  g.pairs = std::move(pairs);
  return g;
}

// The plan: pairs that are empty or invalid get their result at once; at
// T > 0, the pairs the range rule of their accumulate type admits run in the
// probability domain (forward_probability.h; float64 pairs too, keeping the
// log-domain state, H or the C, U, L planes, that their backward reads);
// the other linear-gap float pairs, and in hard mode (T = 0) the affine-gap
// float pairs, on the SIMD log-domain forward (forward_simd.h); the rest on
// the scalar passes.
template <typename T>
void forward_impl(const Problem& p, const ForwardOutputs& out) {
  using A = Acc<T>;
  const Setup<T> su(p);
  const FlushSubnormals mode(!su.hard);
  constexpr bool kFloat = std::is_same_v<A, float>;
  const bool simd_passes = SOFTSW_CPU_VECTOR && su.M < (int64_t(1) << 30) &&
                    su.N < (int64_t(1) << 30) && simd::isa_level() >= 0;
  const bool vector = simd_passes && kFloat;  // the float-only SIMD passes
  // Affine pairs in the probability domain keep a few rows (checkpoints.h),
  // in a state mostly never touched: a huge page would fault in all of it.
  if (out.hidden && !(vector && p.affine && !su.hard))
    advise_huge_pages(out.hidden, static_cast<size_t>(p.batch * su.planes * su.MN) * sizeof(A));
  std::vector<int64_t> pairs;
  double work = 0;
  for (int64_t b = 0; b < p.batch; ++b) {
    int64_t m = 0, n = 0;
    const bool ok = su.extents(b, m, n);
    if (ok && m > 0 && n > 0) {
      pairs.push_back(b);
      work += double(m) * n * su.planes;
      continue;
    }
    // Empty pair (score 0) or lengths out of range (NaN).
    if (out.hidden)
      for (int64_t k = 0; k < su.planes; ++k)
        fill_outside<A>(static_cast<A*>(out.hidden) + (b * su.planes + k) * su.MN, su.M, su.N, 0, 0, A(0));
    const A t = ok ? A(0) : quiet_nan<A>();
    PairTotal<A>::of(t).store(static_cast<A*>(out.total), b);
    st(static_cast<T*>(out.score), b, t);
    out.argmax[b] = -1;
  }
  if (pairs.empty()) return;
  std::vector<int64_t> scaled;
  if (simd_passes && !su.hard) {
    std::vector<char> in_range(pairs.size(), 0);
    parallel_for<char>(static_cast<int64_t>(pairs.size()), work, [&](int64_t k, char&) {
      int64_t m = 0, n = 0;
      su.extents(pairs[k], m, n);
      in_range[k] = fits_probability_range(su, pairs[k], m, n);
    });
    std::vector<int64_t> rest;
    for (size_t k = 0; k < pairs.size(); ++k) (in_range[k] ? scaled : rest).push_back(pairs[k]);
    pairs.swap(rest);
  }
  // The log-domain SIMD groups: linear gaps, or affine gaps in hard mode.
  const bool log_groups = vector && (!p.affine || su.hard);
  const Groups prob = make_groups(su, std::move(scaled), work);
  const Groups logd = log_groups ? make_groups(su, std::move(pairs), work) : Groups{};
  const int64_t singles = log_groups ? 0 : static_cast<int64_t>(pairs.size());
#if SOFTSW_CPU_VECTOR
  const simd::ProbabilityRowFnsOf<A> prob_rows =
      simd::pick_probability_rows<A>(p, out.hidden != nullptr);
  simd::LogRowFns log_rows;
  if (p.affine) log_rows.affine = simd::pick_affine_hard_row();
  else log_rows.linear = simd::pick_row(su.hard, su.soft_reduction);
#endif
  parallel_for<Scratch<A>>(prob.count + logd.count + singles, work, [&](int64_t g, Scratch<A>& sc) {
#if SOFTSW_CPU_VECTOR
    if (g < prob.count) {
      const int64_t lo = prob.lo(g), hi = prob.lo(g + 1);
      int64_t m = 0, n = 0;
      su.extents(prob.pairs[lo], m, n);
      // A lone long pair: its column blocks on the lanes (affine gaps, float:
      // when its training state fits; linear gaps: a constant gap).
      const bool lone_long = hi - lo == 1 && n >= 4 * simd::W;
      if constexpr (kFloat) {
        if (lone_long && p.affine &&
            (!out.hidden || simd::affine_long_pair_state_fits(su, prob.pairs[lo]))) {
          simd::probability_affine_long_pair<T>(su, prob.pairs[lo], prob_rows, out, sc.lanes);
          return;
        }
      }
      if (lone_long && !p.affine && !p.gap_open.data)
        simd::probability_long_pair<T>(su, prob.pairs[lo], prob_rows, out, group_rows(sc));
      else  // (affine float pairs keep checkpoints, float64 pairs the C, U, L planes)
        simd::probability_group<T>(su, prob.pairs.data() + lo, static_cast<int>(hi - lo),
                                   prob_rows, out, group_rows(sc), /*checkpoints=*/p.affine);
      return;
    }
    g -= prob.count;
    if constexpr (kFloat) {
      if (g < logd.count) {
        const int64_t lo = logd.lo(g), hi = logd.lo(g + 1);
        if (hi - lo > 1)
          simd::forward_log_group<T>(su, logd.pairs.data() + lo, static_cast<int>(hi - lo),
                                     log_rows, static_cast<float*>(out.hidden), out, sc.lanes);
        else  // a lone pair: one busy lane of W is slower than the scalar loop
          forward_one<T>(su, out, logd.pairs[lo], sc);
        return;
      }
      g -= logd.count;
    }
#endif
    forward_one<T>(su, out, pairs[g], sc);
  });
}

}  // namespace
}  // namespace cpu

void forward_cpu(const Problem& problem, const ForwardOutputs& out) {
  const cpu::ThreadLimit limit(problem.cpu_threads);
  switch (problem.dtype) {
    case Dtype::Float16: return cpu::forward_impl<cpu::Half>(problem, out);
    case Dtype::BFloat16: return cpu::forward_impl<cpu::BFloat16>(problem, out);
    case Dtype::Float32: return cpu::forward_impl<float>(problem, out);
    case Dtype::Float64: return cpu::forward_impl<double>(problem, out);
  }
}

}  // namespace softsw
