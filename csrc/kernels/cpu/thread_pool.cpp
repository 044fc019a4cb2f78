#include "thread_pool.h"

#include <algorithm>
#include <cstdlib>

#if defined(__linux__)
#include <sched.h>
#endif

namespace softsw::cpu {

int thread_count(int64_t items, double work) {
  static const int hw = [] {
    int n = static_cast<int>(std::thread::hardware_concurrency());
#if defined(__linux__)
    cpu_set_t set;  // the CPUs this process may use (containers, taskset)
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) n = CPU_COUNT(&set);
#endif
    if (const char* env = std::getenv("SOFTSW_NUM_THREADS")) {
      const int e = std::atoi(env);
      if (e > 0) n = e;
    }
    return std::max(n, 1);
  }();
  const double per_thread = 1 << 15;
  const int64_t by_work = static_cast<int64_t>(work / per_thread) + 1;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>({hw, items, by_work})));
}

}  // namespace softsw::cpu
