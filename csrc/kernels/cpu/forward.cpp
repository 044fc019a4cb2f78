// The forward's entry point (problem.h): the SIMD forward where it applies
// (forward_simd.h), the scalar passes of forward.h otherwise.
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include "../problem.h"
#include "forward.h"
#include "forward_probability.h"
#include "forward_simd.h"
#include "setup.h"
#include "thread_pool.h"

namespace softsw {
namespace cpu {
namespace {

// The vectorised forward for linear gaps with a float accumulator; false
// when it does not apply (then the scalar forward runs).
template <typename T>
bool forward_linear_vector(const Setup<T>& su, const ForwardOutputs& out) {
#if SOFTSW_CPU_VECTOR
  const Problem& p = su.p;
  if constexpr (!std::is_same_v<Acc<T>, float>) {
    return false;
  } else {
    if (p.affine || su.M >= (int64_t(1) << 30) || su.N >= (int64_t(1) << 30) ||
        simd::isa_level() < 0)
      return false;
    float* hidden = static_cast<float*>(out.hidden);
    std::vector<int64_t> pairs;
    double work = 0;
    for (int64_t b = 0; b < p.batch; ++b) {
      int64_t m = 0, n = 0;
      const bool ok = su.extents(b, m, n);
      if (ok && m > 0 && n > 0) {
        pairs.push_back(b);
        work += double(m) * n;
        continue;
      }
      // Empty pair (score 0) or lengths out of range (NaN).
      if (hidden) fill_outside<float>(hidden + b * su.MN, su.M, su.N, 0, 0, 0.0f);
      const float t = ok ? 0.0f : quiet_nan<float>();
      PairTotal<float>::of(t).store(static_cast<float*>(out.total), b);
      st(static_cast<T*>(out.score), b, t);
      out.argmax[b] = -1;
    }
    if (pairs.empty()) return true;
    // Without state to keep (inference) at T > 0, the pairs that the range
    // rule admits run in the probability domain (forward_probability.h).
    std::vector<int64_t> scaled;
    if (!hidden && !su.hard) {
      std::vector<char> in_range(pairs.size(), 0);
      parallel_for<char>(static_cast<int64_t>(pairs.size()), work, [&](int64_t k, char&) {
        int64_t m = 0, n = 0;
        su.extents(pairs[k], m, n);
        in_range[k] = in_probability_range(su, pairs[k], m, n);
      });
      std::vector<int64_t> rest;
      for (size_t k = 0; k < pairs.size(); ++k) (in_range[k] ? scaled : rest).push_back(pairs[k]);
      pairs.swap(rest);
    }
    // Similar shapes share a group: fewer idle lanes.
    auto by_shape = [&](int64_t a, int64_t b) {
      int64_t ma, na, mb, nb;
      su.extents(a, ma, na);
      su.extents(b, mb, nb);
      return std::make_pair(na, ma) > std::make_pair(nb, mb);
    };
    std::stable_sort(pairs.begin(), pairs.end(), by_shape);
    std::stable_sort(scaled.begin(), scaled.end(), by_shape);
    const int64_t P = static_cast<int64_t>(pairs.size()), Q = static_cast<int64_t>(scaled.size());
    auto group_count = [&](int64_t count) {
      return count == 0 ? 0
                        : std::max<int64_t>((count + simd::W - 1) / simd::W,
                                            std::min<int64_t>(count, thread_count(count, work)));
    };
    const int64_t groups = group_count(P), scaled_groups = group_count(Q);
    const simd::RowFn row = simd::pick_row(su.hard, su.soft_reduction);
    const simd::ProbabilityRowFns scaled_rows = simd::pick_probability_rows();
    parallel_for<Scratch<float>>(groups + scaled_groups, work, [&](int64_t g, Scratch<float>& sc) {
      if (g >= groups) {
        g -= groups;
        const int64_t lo = g * Q / scaled_groups, hi = (g + 1) * Q / scaled_groups;
        simd::probability_group<T>(su, scaled.data() + lo, static_cast<int>(hi - lo), scaled_rows,
                                   out, sc.lanes);
        return;
      }
      const int64_t lo = g * P / groups, hi = (g + 1) * P / groups;
      if (hi - lo > 1) {
        forward_linear_group<T>(su, pairs.data() + lo, static_cast<int>(hi - lo), row, hidden,
                                out, sc.lanes);
        return;
      }
      // A lone pair: one busy lane of W is slower than the scalar loop.
      const int64_t b = pairs[lo];
      int64_t m = 0, n = 0;
      su.extents(b, m, n);
      float* hid = hidden ? hidden + b * su.MN : nullptr;
      if (hid) fill_outside<float>(hid, su.M, su.N, m, n, 0.0f);
      const PairView<T> pv = su.pair(b);
      const PairResult<float> r =
          su.hard ? forward_linear<T, true>(pv, m, n, hid, false, sc)
                  : forward_linear<T, false>(pv, m, n, hid, su.soft_reduction, sc);
      PairTotal<float>::of(r.total).store(static_cast<float*>(out.total), b);
      st(static_cast<T*>(out.score), b, r.total * su.unit);
      out.argmax[b] = p.reduction == Reduction::Soft ? -1 : r.argmax;
    });
    return true;
  }
#else
  (void)su;
  (void)out;
  return false;
#endif
}

template <typename T>
void forward_impl(const Problem& p, const ForwardOutputs& out) {
  using A = Acc<T>;
  const Setup<T> su(p);
  if (forward_linear_vector<T>(su, out)) return;
  A* hidden = static_cast<A*>(out.hidden);
  T* score = static_cast<T*>(out.score);
  A* total = static_cast<A*>(out.total);
  parallel_for<Scratch<A>>(
      p.batch, double(p.batch) * su.MN * su.planes, [&](int64_t b, Scratch<A>& sc) {
        int64_t m = 0, n = 0;
        const bool ok = su.extents(b, m, n);
        if (!ok) m = n = 0;
        A* hid = hidden ? hidden + b * su.planes * su.MN : nullptr;
        if (hid)
          for (int64_t k = 0; k < su.planes; ++k)
            fill_outside<A>(hid + k * su.MN, su.M, su.N, m, n, A(0));
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
        st(score, b, r.total * su.unit);
        PairTotal<A>::of(r.total).store(total, b);
        out.argmax[b] = r.argmax;
      });
}

}  // namespace
}  // namespace cpu

void forward_cpu(const Problem& problem, const ForwardOutputs& out) {
  switch (problem.dtype) {
    case Dtype::Float16: return cpu::forward_impl<cpu::Half>(problem, out);
    case Dtype::BFloat16: return cpu::forward_impl<cpu::BFloat16>(problem, out);
    case Dtype::Float32: return cpu::forward_impl<float>(problem, out);
    case Dtype::Float64: return cpu::forward_impl<double>(problem, out);
  }
}

}  // namespace softsw
