"""Where softsw.search spends its time, on the benchmark's set
(benchmarks/search_bench.py: random proteins, lengths uniform in [50, 1000],
BLOSUM62, affine gaps -11 / -1).

    python dev/search_profile.py                       # CUDA, 2,000 x 2,000, hard and soft
    python dev/search_profile.py --device cpu --n 100 --modes hard --variants none

It prints:

* the plan: kernel calls, how many run transposed (targets on the rows),
  padding efficiency (true cells / padded cells of the score matrices built)
  and lane fill (true cells / the lane-steps of the kernel's 32-row bands,
  each running its pair's true columns plus its fill and drain; the waits
  for the band above are not in it);
* per mode: softsw.search end to end (and peak CUDA memory against the
  budget); then instrumented runs of the same calls, each call's parts
  timed with CUDA events on the stream it runs on (on the CPU: wall clock):
  ``scores`` (the score matrices gathered from the substitution matrix, and
  the pairs' lengths), ``kernel`` (softsw's inference forward), ``topk`` (the
  merge into the running top-k); the device's busy time (the union of all
  parts over the streams) and idle time (wall minus busy: host gaps, set-up,
  the copy of the results). Variants: ``one-stream`` (every call on one
  stream: the parts' times without overlap; their kernel sum against the
  batched kernel says how well the kernel runs the search's shapes),
  ``no-orient`` (queries always on the rows) and ``float32-scores`` (no
  float16 score matrices);
* the batched kernel on a uniform L x L batch of the same cell count (as
  the benchmark), and search / batched;
* ``--gather``: the largest call's score-matrix build against a plain copy
  and a fill of the same bytes, into buffers already allocated (how close
  the gather runs to bandwidth);
* ``--trace FILE``: a torch.profiler Chrome trace of a smaller search
  (``--trace-n``), to see the kernels and gaps on a timeline.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import math
import os
import random
import time

import torch

import softsw
from softsw import seqsearch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# What each variant changes in the search (seqsearch._job's options).
VARIANTS = {"one-stream": {"in_flight": 1}, "no-orient": {"orient": False},
            "float32-scores": {"half_scores": False}}


def load_bench():
    """benchmarks/search_bench.py as a module: the same set and batched timing."""
    path = os.path.join(ROOT, "benchmarks", "search_bench.py")
    spec = importlib.util.spec_from_file_location("search_bench", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Recorder:
    """Times the parts of each kernel call (seqsearch._run's `recorder`):
    CUDA events on the current stream, or the wall clock on the CPU."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.marks = []  # (part, start, end)

    @contextlib.contextmanager
    def part(self, name: str):
        if not self.cuda:
            start = time.perf_counter()
            yield
            self.marks.append((name, start, time.perf_counter()))
            return
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        yield
        end.record()
        self.marks.append((name, start, end))

    def intervals(self, origin):
        """(part, start s, end s) relative to `origin` (an event recorded
        before the run, or a perf_counter value)."""
        if not self.cuda:
            return [(n, a - origin, b - origin) for n, a, b in self.marks]
        return [(n, origin.elapsed_time(a) / 1e3, origin.elapsed_time(b) / 1e3)
                for n, a, b in self.marks]


def rate(cells: int, seconds: float) -> str:
    return f"{cells / seconds / 1e9:.3g} G cells/s"


def union_length(spans) -> float:
    total, reach = 0.0, -math.inf
    for a, b in sorted(spans):
        if b > reach:
            total += b - max(a, reach)
            reach = b
    return total


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def end_to_end(queries, targets, options, device):
    """softsw.search's seconds, and on CUDA (peak bytes, budget bytes)."""
    memory = ()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        budget = seqsearch._budget_bytes(options["memory_budget"], device)
    sync(device)
    start = time.perf_counter()
    softsw.search(queries, targets, **options)
    sync(device)
    seconds = time.perf_counter() - start
    if device.type == "cuda":
        memory = (torch.cuda.max_memory_allocated(device) - before, budget)
    return seconds, memory


def instrumented(queries, targets, options, device, **variant):
    """seqsearch's job for `options` run with a Recorder: (prepare s, wall s,
    {part: device s}, busy s, the job)."""
    sync(device)
    t0 = time.perf_counter()
    job = seqsearch._job(queries, targets, **options, **variant)
    prepared = time.perf_counter() - t0
    recorder = Recorder(device)
    if device.type == "cuda":
        origin = torch.cuda.Event(enable_timing=True)
        origin.record()
    start = time.perf_counter()
    seqsearch._run(job, recorder)
    sync(device)
    wall = time.perf_counter() - start
    spans = recorder.intervals(origin if device.type == "cuda" else start)
    parts = {}
    for name, a, b in spans:
        parts[name] = parts.get(name, 0.0) + (b - a)
    return prepared, wall, parts, union_length([(a, b) for _, a, b in spans]), job


def plan_report(job) -> str:
    q_len, t_len = job.q_set.sorted_lengths.cpu(), job.t_set.sorted_lengths.cpu()
    true = padded = lane_steps = units = 0
    sizes = []
    for c in job.calls:
        ql = q_len[c.q_span[0]:c.q_span[1]]
        tl = t_len[c.t_span[0]:c.t_span[1]]
        true += int(ql.sum()) * int(tl.sum())
        padded += c.cells
        rows, cols = (tl, ql) if c.transposed else (ql, tl)
        # A pair's m rows run as ceil(m / 32) warps of 32 lanes, each for
        # n + (its rows) - 1 steps (the anti-diagonal fill and drain), so
        # 32 (bands (n - 1) + m) lane-steps for m n cells.
        bands = torch.div(rows + 31, 32, rounding_mode="floor")
        units += int(bands.sum()) * len(cols)
        lane_steps += 32 * (int(bands.sum()) * int((cols - 1).clamp(min=0).sum())
                            + int(rows.sum()) * len(cols))
        sizes.append(c.cells)
    small = sum(s < 1 << 24 for s in sizes)
    scores = job.call_matrix.dtype if job.call_matrix is not None else job.dtype
    return (f"plan: {len(job.calls)} kernel calls ({sum(c.transposed for c in job.calls)} "
            f"transposed), {small} of them under 2^24 cells; largest {max(sizes, default=0)} "
            f"cells\n      padding efficiency {true / max(padded, 1):.4f} ({true / 1e9:.1f} G "
            f"true of {padded / 1e9:.1f} G padded cells); lane fill "
            f"{true / max(lane_steps, 1):.4f} (true cells / the lane-steps of the kernel's "
            f"32-row bands; {units / 1e6:.2f} M bands, each waits for the one above); "
            f"{str(scores).replace('torch.', '')} score matrices")


def run_report(label, cells, prepared, wall, parts, busy) -> str:
    total = prepared + wall
    lines = [f"  {label}: {total:7.2f} s  {rate(cells, total)}   prepare (host: "
             f"encode, plan) {prepared:.2f} s, run {wall:.2f} s",
             f"      device busy {busy:.2f} s ({100 * busy / wall:.0f} % of the run), idle "
             f"{wall - busy:.2f} s (host gaps, set-up, results to the host)",
             "      by part (device time summed over calls): " +
             ", ".join(f"{name} {seconds:.2f} s ({100 * seconds / wall:.0f} %)"
                       for name, seconds in sorted(parts.items()))]
    return "\n".join(lines)


def gather_report(job, device, repeats: int = 5) -> str:
    """The largest call's score-matrix build against a copy and a fill of
    the same bytes."""
    call = max(job.calls, key=lambda c: c.cells)
    buffer = job.buffer([call])

    def timed(fn):
        fn()
        sync(device)
        start = time.perf_counter()
        for _ in range(repeats):
            out = fn()
        sync(device)
        return (time.perf_counter() - start) / repeats, out

    build, (scores, _) = timed(lambda: job.build(call, buffer))
    size = scores.numel() * scores.element_size()
    other = torch.empty_like(scores)
    copy = timed(lambda: other.copy_(scores))[0]
    fill = timed(lambda: other.fill_(1.0))[0]
    return (f"gather: the largest call ({call.cells / 1e9:.2f} G cells, {call.rows} x "
            f"{call.cols}, {size / 2**30:.2f} GiB {str(scores.dtype).replace('torch.', '')}): "
            f"build {build * 1e3:.1f} ms ({size / build / 1e9:.0f} GB/s written); "
            f"copy {copy * 1e3:.1f} ms "
            f"({2 * size / copy / 1e9:.0f} GB/s read + written); fill {fill * 1e3:.1f} ms "
            f"({size / fill / 1e9:.0f} GB/s)")


def main(argv=None):
    p = argparse.ArgumentParser(description="softsw.search time split")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--n", type=int, default=2000, help="queries = targets = N (default 2000)")
    p.add_argument("--min-length", type=int, default=50)
    p.add_argument("--max-length", type=int, default=1000)
    p.add_argument("--modes", default="hard,soft", help="hard,soft (default both)")
    p.add_argument("--variants", default="one-stream,no-orient,float32-scores",
                   help="comma-separated: one-stream, no-orient, float32-scores; or none")
    p.add_argument("--batch-cells", type=int, default=None)
    p.add_argument("--memory-budget", type=float, default=None,
                   help="bytes (> 1) or a fraction of free memory")
    p.add_argument("--no-batched", action="store_true", help="skip the batched kernel")
    p.add_argument("--gather", action="store_true", help="time the largest call's gather")
    p.add_argument("--trace", default=None, help="write a torch.profiler Chrome trace here")
    p.add_argument("--trace-n", type=int, default=300, help="set size of the traced search")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    if args.threads:
        torch.set_num_threads(args.threads)
    budget = args.memory_budget
    if budget is not None and budget > 1:
        budget = int(budget)
    variants = [v for v in args.variants.split(",") if v and v != "none"]
    for v in variants:
        if v not in VARIANTS:
            p.error(f"unknown variant {v!r}")

    bench = load_bench()
    rnd = random.Random(args.seed)
    queries = bench.proteins(rnd, args.n, args.min_length, args.max_length)
    targets = bench.proteins(rnd, args.n, args.min_length, args.max_length)
    cells = sum(map(len, queries)) * sum(map(len, targets))
    mean = round(math.sqrt(cells / (len(queries) * len(targets))))
    print(f"set: {args.n} x {args.n} proteins, lengths {args.min_length}-{args.max_length}, "
          f"{cells / 1e9:.1f} G true cells; device {device}; BLOSUM62, gaps -11 / -1",
          flush=True)

    # Warm-up: CUDA context, the kernels' first launches.
    softsw.search(queries[:8], targets[:8], device=device, progress=False)
    softsw.search(queries[:8], targets[:8], device=device, temperature=1.0, progress=False)

    for mode in args.modes.split(","):
        temperature = {"hard": 0.0, "soft": 1.0}[mode]
        options = dict(gap_open=-11.0, gap_extend=-1.0, temperature=temperature, top=10,
                       device=device, memory_budget=budget, batch_cells=args.batch_cells,
                       progress=False)
        print(f"{mode}:", flush=True)
        seconds, memory = end_to_end(queries, targets, options, device)
        line = f"  search (end to end): {seconds:7.2f} s  {rate(cells, seconds)}"
        if memory:
            line += f"   peak {memory[0] / 2**30:.2f} GiB of budget {memory[1] / 2**30:.2f} GiB"
        print(line, flush=True)
        prepared, wall, parts, busy, job = instrumented(queries, targets, options, device)
        if mode == args.modes.split(",")[0]:
            print("  " + plan_report(job).replace("\n", "\n  "), flush=True)
        print(run_report(f"instrumented, {job.in_flight} stream(s)", cells, prepared, wall,
                         parts, busy), flush=True)
        for variant in variants:
            prepared, wall, parts, busy, _ = instrumented(queries, targets, options, device,
                                                          **VARIANTS[variant])
            print(run_report(variant, cells, prepared, wall, parts, busy), flush=True)
            if variant == "one-stream":
                print(f"      kernel alone: {rate(cells, parts['kernel'])} (true cells)",
                      flush=True)
        if args.gather:
            print("  " + gather_report(job, device), flush=True)
        del job
        if not args.no_batched:
            call_cells = 1 << 30 if device.type == "cuda" else 1 << 24
            batched = bench.time_batched(mean, cells, device, temperature, -1.0, call_cells)
            line = f"  batched kernel {mean}x{mean}: {batched:7.2f} s  {rate(cells, batched)}"
            line += f"   search / batched throughput = {batched / seconds:.2f}"
            print(line, flush=True)

    if args.trace:
        from torch.profiler import ProfilerActivity, profile
        activities = [ProfilerActivity.CPU] + \
            ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
        with profile(activities=activities) as prof:
            softsw.search(queries[:args.trace_n], targets[:args.trace_n], device=device,
                          gap_open=-11.0, gap_extend=-1.0, progress=False)
            sync(device)
        prof.export_chrome_trace(args.trace)
        print(f"trace of a {args.trace_n} x {args.trace_n} search: {args.trace}")


if __name__ == "__main__":
    main()
