// The float64 exp2 / log2 of csrc/kernels/cpu/simd.h measured: the largest
// error in ulp (against long double) over the whole range, and the edge rules
// (exp2: 0 below 2^-1022, -inf -> 0, NaN -> NaN; log2: NaN -> NaN, 1 -> 0).
// Build and run (baseline, then AVX2 + FMA, as the two row kernels compile):
//   g++ -O2 -std=c++20 -Icsrc/kernels/cpu dev/simd_math_accuracy.cpp -o /tmp/acc && /tmp/acc
//   g++ -O2 -std=c++20 -mavx2 -mfma -Icsrc/kernels/cpu dev/simd_math_accuracy.cpp -o /tmp/acc && /tmp/acc
// Measured (x86-64, 4e6 points each): exp2 <= 1.2 ulp (0.9 with FMA), log2 <= 2.9 ulp.
#include <cmath>
#include <cstdio>
#include <random>

#include "simd.h"

using X = softsw::cpu::simd::Vec<double, 2>;

static double at(double (*f)(X::F), double x) { return f(X::splat(x)); }
static double vexp2(X::F x) { return X::exp2(x)[0]; }
static double vlog2(X::F x) { return X::log2(x)[0]; }
static double ulps(double a, long double ref) {
  int e;
  frexpl(ref, &e);
  return static_cast<double>(fabsl(static_cast<long double>(a) - ref) / ldexpl(1.0L, e - 53));
}

int main() {
  std::mt19937_64 gen(1);
  std::uniform_real_distribution<double> wide(-1022.0, 1023.0), unit(-1.0, 1.0);
  double worst = 0, where = 0;
  int bad = 0;
  for (int k = 0; k < 4000000; ++k) {
    const double x = k % 2 ? wide(gen) : unit(gen) * (k % 6 == 0 ? 1e-10 : 30.0);
    const double r = at(vexp2, x);
    const long double ref = exp2l(static_cast<long double>(x));
    if (ref < 0x1p-1022L) {
      bad += r != 0.0;
      continue;
    }
    if (ulps(r, ref) > worst) worst = ulps(r, ref), where = x;
  }
  std::printf("exp2: %.3f ulp at most (at %.17g), %d subnormal results not flushed\n", worst, where,
              bad);
  std::printf("exp2 edges: -1022.5 -> %g, -inf -> %g, NaN -> %g, -1022 -> %g\n",
              at(vexp2, -1022.5), at(vexp2, -INFINITY), at(vexp2, NAN), at(vexp2, -1022.0));
  worst = 0;
  for (int k = 0; k < 4000000; ++k) {
    const double y = k % 3 == 0 ? std::exp2(wide(gen)) : 1.0 + unit(gen) * (k % 5 ? 0.5 : 1e-9);
    const double r = at(vlog2, y);
    const double u = ulps(r, log2l(static_cast<long double>(y)));
    if (r != 0.0 && u > worst) worst = u, where = y;
  }
  std::printf("log2: %.3f ulp at most (at %.17g)\n", worst, where);
  std::printf("log2 edges: NaN -> %g, 1 -> %g, 2^-1022 -> %g\n", at(vlog2, NAN), at(vlog2, 1.0),
              at(vlog2, 0x1p-1022));
  return 0;
}
