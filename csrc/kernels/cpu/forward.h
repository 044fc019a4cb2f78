// The scalar forward passes: one pair, row by row, H (linear) or C, U, L
// (affine) written to `hidden` when it is given, the reduction on the way.
#pragma once

#include <algorithm>
#include <cstdint>

#include "cell.h"
#include "setup.h"

namespace softsw::cpu {

template <typename T, bool HARD>
PairResult<Acc<T>> forward_linear(const PairView<T>& pv, int64_t m, int64_t n, Acc<T>* hid,
                                  bool soft_reduction, Scratch<Acc<T>>& sc) {
  using A = Acc<T>;
  using Cell = CpuLinearCell<A, HARD>;
  const int64_t N = pv.N;
  A* prev = sc.c_prev.get(n + 1);
  A* cur = sc.c_cur.get(n + 1);
  std::fill(prev, prev + n + 1, A(0));
  cur[0] = A(0);
  CpuSoftTotal<A> soft;
  MaxArg<A> best;
  for (int64_t i = 1; i <= m; ++i) {
    for (int64_t j = 1; j <= n; ++j) {
      const A g = pv.open.at(i, j);
      const A h = Cell::value(prev[j - 1] + pv.s(i, j), prev[j] + g, cur[j - 1] + g);
      cur[j] = h;
      if (soft_reduction) soft.add(h); else best.add(h, (i - 1) * N + (j - 1));
    }
    if (hid) std::copy(cur + 1, cur + n + 1, hid + (i - 1) * N);
    std::swap(prev, cur);
  }
  PairResult<A> r;
  if (soft_reduction) r.total = soft.value();
  else { r.total = best.best; r.argmax = best.index; }
  return r;
}

template <typename T, bool HARD>
PairResult<Acc<T>> forward_affine(const PairView<T>& pv, int64_t m, int64_t n, int64_t MN,
                                  Acc<T>* hid, bool soft_reduction, Scratch<Acc<T>>& sc) {
  using A = Acc<T>;
  using Lin = CpuLinearCell<A, HARD>;
  using Aff = CpuAffineCell<A, HARD>;
  const int64_t N = pv.N;
  // Previous row (p) and current row (c) of C, A and U; B and L of the left cell.
  A *Cp = sc.c_prev.get(n + 1), *Ap = sc.a_prev.get(n + 1), *Up = sc.u_prev.get(n + 1);
  A *Cc = sc.c_cur.get(n + 1), *Ac = sc.a_cur.get(n + 1), *Uc = sc.u_cur.get(n + 1);
  std::fill(Cp, Cp + n + 1, A(0));
  std::fill(Ap, Ap + n + 1, A(0));
  std::fill(Up, Up + n + 1, -kInf<A>);
  Cc[0] = A(0);
  CpuSoftTotal<A> soft;
  MaxArg<A> best;
  for (int64_t i = 1; i <= m; ++i) {
    A Bl = A(0), Ll = -kInf<A>;
    for (int64_t j = 1; j <= n; ++j) {
      const A o = pv.open.at(i, j), e = pv.ext.at(i, j);
      const A D = Cp[j - 1] + pv.s(i, j);
      const A U = Aff::gap(Ap[j] + o, Up[j] + e);
      const A L = Aff::gap(Bl + o, Ll + e);
      const A C = Lin::value(D, U, L);
      Ac[j] = Aff::prime(D, L);
      Bl = Aff::prime(D, U);
      Ll = L;
      Cc[j] = C;
      Uc[j] = U;
      if (hid) {
        const int64_t k = (i - 1) * N + (j - 1);
        hid[k] = C;
        hid[MN + k] = U;
        hid[2 * MN + k] = L;
      }
      if (soft_reduction) soft.add(C); else best.add(C, (i - 1) * N + (j - 1));
    }
    std::swap(Cp, Cc);
    std::swap(Ap, Ac);
    std::swap(Up, Uc);
  }
  PairResult<A> r;
  if (soft_reduction) r.total = soft.value();
  else { r.total = best.best; r.argmax = best.index; }
  return r;
}

}  // namespace softsw::cpu
