// Batch parallelism of the CPU kernels: work items (pairs, or groups of
// pairs) are handed out dynamically to std::threads, each with its own
// scratch, in the floating-point mode of the calling thread (float_mode.h).
// An exception in a worker (bad_alloc) is rethrown on the calling thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "float_mode.h"

namespace softsw::cpu {

// How many threads `items` items of `work` cells in all deserve: at most the
// calling thread's ThreadLimit (else the CPUs this process may run on;
// SOFTSW_NUM_THREADS=k overrides both), at most one per item, and one per
// ~32k cells (below, a thread costs more than it saves).
int thread_count(int64_t items, double work);

// While it lives, thread_count on the thread that made it is at most
// `threads` (0: no limit). The entry points set the op's Problem::cpu_threads.
class ThreadLimit {
 public:
  explicit ThreadLimit(int threads);
  ~ThreadLimit();
  ThreadLimit(const ThreadLimit&) = delete;
  ThreadLimit& operator=(const ThreadLimit&) = delete;

 private:
  int before_;
};

// body(k, scratch) for every k in [0, items), `Work` being the type of a
// thread's scratch (default-constructed once per thread).
template <typename Work, typename Body>
void parallel_for(int64_t items, double work, Body&& body) {
  if (items <= 0) return;
  const int nt = thread_count(items, work);
  std::atomic<int64_t> next{0};
  std::exception_ptr error;
  std::mutex mutex;
  const FloatMode mode = FloatMode::current();
  auto worker = [&] {
    const FloatModeScope in_mode(mode);
    try {
      Work scratch;
      for (int64_t k; (k = next.fetch_add(1)) < items;) body(k, scratch);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex);
      if (!error) error = std::current_exception();
      next.store(items);
    }
  };
  std::vector<std::thread> threads;
  for (int t = 1; t < nt; ++t) {
    try {
      threads.emplace_back(worker);
    } catch (...) {
      break;  // no more threads: the others do the work
    }
  }
  worker();
  for (auto& t : threads) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace softsw::cpu
