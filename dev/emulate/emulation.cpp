// The fiber scheduler of emulation.h.
#include "emulation.h"

#include <ucontext.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <vector>

namespace softsw::cuda {
// The kernels' `extern __shared__` buffers (one block runs at a time).
alignas(16) unsigned char stage_bytes[1 << 18];
}  // namespace softsw::cuda

namespace softsw_emulation {
namespace {

constexpr size_t kStackBytes = 512 * 1024;
// A hang (a band polling for an edge that never comes, a lane that left its
// warp): this many rounds of the scheduler in a row in which no warp
// exchange completed and no fiber finished.
constexpr uint64_t kIdleRounds = 100000;

struct Fiber {
  ucontext_t context;
  std::unique_ptr<char[]> stack;
  unsigned tid = 0;
  bool done = false;
};

struct Warp {
  int arrived = 0;
  uint64_t phase = 0;
  uint64_t values[2][32] = {};
};

struct Block {
  unsigned index = 0, threads = 0;
  std::vector<Fiber> fibers;
  std::vector<Warp> warps;
  int block_arrived = 0;
  uint64_t block_phase = 0;
  const std::function<void()>* body = nullptr;
};

ucontext_t scheduler;
// The scheduler's choices: seeded by EMULATE_SCHEDULE_SEED (default 1), so a
// run repeats.
std::mt19937_64 rng([] {
  const char* e = std::getenv("EMULATE_SCHEDULE_SEED");
  return e ? std::strtoull(e, nullptr, 10) : 1ull;
}());
Block* block = nullptr;
Fiber* running = nullptr;
uint64_t progress = 0;  // warp exchanges completed and fibers finished

void back_to_scheduler() { swapcontext(&running->context, &scheduler); }

void fiber_main() {
  (*block->body)();
  running->done = true;
  ++progress;
  swapcontext(&running->context, &scheduler);
}

}  // namespace

uint3 thread_index() { return {running->tid, 0, 0}; }
uint3 block_index() { return {block->index, 0, 0}; }
unsigned char* dynamic_shared() { return softsw::cuda::stage_bytes; }
void yield() { back_to_scheduler(); }

uint64_t exchange(uint64_t value, int source) {
  Warp& w = block->warps[running->tid / 32];
  const int lane = static_cast<int>(running->tid & 31);
  const uint64_t phase = w.phase;
  w.values[phase & 1][lane] = value;
  if (++w.arrived == 32) {
    w.arrived = 0;
    w.phase = phase + 1;
    ++progress;
  } else {
    while (w.phase == phase) {
      for (unsigned t = running->tid & ~31u; t < (running->tid & ~31u) + 32; ++t)
        if (block->fibers[t].done) {
          std::fprintf(stderr, "softsw emulation: lane %u of warp %u exchanges after lane %u returned\n",
                       running->tid & 31, running->tid / 32, t & 31);
          std::abort();
        }
      back_to_scheduler();
    }
  }
  return w.values[phase & 1][source < 0 || source > 31 ? lane : source];
}

void sync_block() {
  const uint64_t phase = block->block_phase;
  if (++block->block_arrived == static_cast<int>(block->threads)) {
    block->block_arrived = 0;
    block->block_phase = phase + 1;
    ++progress;
  } else {
    while (block->block_phase == phase) back_to_scheduler();
  }
}

void launch(unsigned blocks, unsigned threads, size_t smem, const std::function<void()>& body) {
  if (threads % 32 != 0) std::abort();
  if (smem > sizeof(softsw::cuda::stage_bytes)) {
    std::fprintf(stderr, "softsw emulation: %zu bytes of shared memory asked for\n", smem);
    std::abort();
  }
  for (unsigned bi = 0; bi < blocks; ++bi) {
    Block b;
    b.index = bi;
    b.threads = threads;
    b.body = &body;
    b.fibers.resize(threads);
    b.warps.resize(threads / 32);
    block = &b;
    for (unsigned t = 0; t < threads; ++t) {
      Fiber& f = b.fibers[t];
      f.tid = t;
      f.stack.reset(new char[kStackBytes]);
      getcontext(&f.context);
      f.context.uc_stack.ss_sp = f.stack.get();
      f.context.uc_stack.ss_size = kStackBytes;
      f.context.uc_link = nullptr;
      makecontext(&f.context, fiber_main, 0);
    }
    // Rounds: each warp's lanes run in turn, the warps in a random order,
    // and a warp sits a round out with probability 1/2, so that the bands
    // run at random speeds relative to each other (a reader may come to an
    // edge long before its writer, or long after).
    std::vector<unsigned> order(threads / 32);
    for (unsigned w = 0; w < order.size(); ++w) order[w] = w;
    uint64_t idle = 0;
    for (;;) {
      bool any = false;
      const uint64_t before = progress;
      std::shuffle(order.begin(), order.end(), rng);
      for (unsigned w : order) {
        const bool sit_out = (rng() & 1) != 0;
        for (unsigned t = 32 * w; t < 32 * w + 32; ++t) {
          Fiber& f = b.fibers[t];
          if (f.done) continue;
          any = true;
          if (sit_out) continue;
          running = &f;
          swapcontext(&scheduler, &f.context);
        }
      }
      if (!any) break;
      idle = progress == before ? idle + 1 : 0;
      if (idle > kIdleRounds) {
        std::fprintf(stderr, "softsw emulation: a hang (block %u: no warp exchange completed in %llu rounds)\n",
                     bi, static_cast<unsigned long long>(kIdleRounds));
        std::abort();
      }
    }
    running = nullptr;
    block = nullptr;
  }
}

}  // namespace softsw_emulation
