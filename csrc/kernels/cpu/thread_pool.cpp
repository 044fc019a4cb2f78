#include "thread_pool.h"

#include <algorithm>
#include <cstdlib>

#if defined(__linux__)
#include <sched.h>
#endif

namespace softsw::cpu {
namespace {

thread_local int limit = 0;  // ThreadLimit's, on this thread; 0: none

// SOFTSW_NUM_THREADS=k, read once; 0 when unset.
int env_threads() {
  static const int n = [] {
    const char* env = std::getenv("SOFTSW_NUM_THREADS");
    return env ? std::max(std::atoi(env), 0) : 0;
  }();
  return n;
}

// The CPUs this process may run on (containers, taskset), read once.
int cpus() {
  static const int n = [] {
    int c = static_cast<int>(std::thread::hardware_concurrency());
#if defined(__linux__)
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) c = CPU_COUNT(&set);
#endif
    return std::max(c, 1);
  }();
  return n;
}

}  // namespace

ThreadLimit::ThreadLimit(int threads) : before_(limit) { limit = std::max(threads, 0); }
ThreadLimit::~ThreadLimit() { limit = before_; }

int thread_count(int64_t items, double work) {
  const int most = env_threads() > 0 ? env_threads() : limit > 0 ? limit : cpus();
  const double per_thread = 1 << 15;
  const int64_t by_work = static_cast<int64_t>(work / per_thread) + 1;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>({most, items, by_work})));
}

}  // namespace softsw::cpu
