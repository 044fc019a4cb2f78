#include "simd.h"

#include <algorithm>
#include <cstdlib>
#include <string>

namespace softsw::cpu::simd {

int isa_level() {
  static const int level = [] {
#if !SOFTSW_CPU_VECTOR
    return -1;
#else
    int best = 0;
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) best = 1;
    if (best == 1 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw"))
      best = 2;
#endif
    if (const char* env = std::getenv("SOFTSW_CPU_ISA")) {
      const std::string want(env);
      const int asked = want == "avx512"     ? 2
                        : want == "avx2"     ? 1
                        : want == "baseline" ? 0
                        : want == "scalar"   ? -1
                                             : best;
      best = std::min(best, asked);
    }
    return best;
#endif
  }();
  return level;
}

}  // namespace softsw::cpu::simd
