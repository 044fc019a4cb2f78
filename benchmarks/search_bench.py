"""Throughput of softsw.search on random proteins, next to the batched kernel
(and, on the CPU, parasail's striped Smith-Waterman).

    # GPU: 2,000 x 2,000 proteins, lengths uniform in [50, 1000], hard and soft
    python benchmarks/search_bench.py --device cuda
    # CPU: 200 x 200 of the same distribution, hard mode, 2 threads, with parasail
    python benchmarks/search_bench.py --device cpu --n 200 --modes hard --threads 2 --parasail

For each mode (hard: T = 0; soft: T = 1), BLOSUM62 and affine gaps -11 / -1:

* search: ``softsw.search(queries, targets, top=10)``, timed end to end (the
  score matrices built on the device, length buckets, top-k); throughput in
  true DP cells (sum over pairs of m * n) per second; the peak CUDA memory
  against the search's memory budget.
* batched kernel: ``softsw.align`` on a uniform batch of L x L pairs (L = the
  mean length) with a precomputed score tensor, called until it has done the
  same number of cells as the search; the target is search / batched >= 0.7.
* parasail (``--parasail``): ``parasail.sw_striped_16`` (saturating to
  ``sw_striped_32``) on the same pairs, in ``--threads`` threads. Its gap
  arguments (11, 1) score like softsw's (-11, -1): the first scores are
  compared with the search's.
"""
from __future__ import annotations

import argparse
import json
import math
import random
import time
from concurrent.futures import ThreadPoolExecutor

import torch

import softsw

AMINO = "ACDEFGHIKLMNPQRSTVWY"


def proteins(rnd: random.Random, n: int, lo: int, hi: int):
    return ["".join(rnd.choices(AMINO, k=rnd.randint(lo, hi))) for _ in range(n)]


def sync(device: torch.device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_search(queries, targets, device, temperature, gap_extend, budget, batch_cells=None):
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        free = torch.cuda.mem_get_info(device)[0]
    sync(device)
    start = time.perf_counter()
    result = softsw.search(queries, targets, gap_open=-11.0, gap_extend=gap_extend,
                           temperature=temperature, top=10, device=device,
                           memory_budget=budget, batch_cells=batch_cells, progress=False)
    sync(device)
    seconds = time.perf_counter() - start
    memory = {}
    if device.type == "cuda":
        used = torch.cuda.max_memory_allocated(device) - before
        limit = budget if isinstance(budget, int) else \
            int((budget or softsw.seqsearch.DEFAULT_MEMORY_FRACTION) * free)
        memory = {"peak_bytes": used, "budget_bytes": limit, "within": used <= limit}
    return result, seconds, memory


def time_batched(length: int, cells: int, device, temperature, gap_extend, call_cells: int):
    """Seconds of softsw.align over `cells` cells in uniform L x L batches."""
    batch = max(1, min(call_cells // (length * length), math.ceil(cells / length ** 2)))
    gen = torch.Generator().manual_seed(0)
    scores = torch.randint(-4, 12, (batch, length, length), generator=gen)
    scores = scores.to(device=device, dtype=torch.float32)
    with torch.no_grad():
        softsw.align(scores[:1], -11.0, temperature, gap_extend=gap_extend)  # warm-up
        calls = max(1, round(cells / scores.numel()))
        sync(device)
        start = time.perf_counter()
        for _ in range(calls):
            softsw.align(scores, -11.0, temperature, gap_extend=gap_extend)
        sync(device)
    return (time.perf_counter() - start) * cells / (calls * scores.numel())


def time_parasail(queries, targets, threads):
    import parasail

    def one_query(q):
        profile = parasail.profile_create_16(q, parasail.blosum62)
        out = []
        for t in targets:
            r = parasail.sw_striped_profile_16(profile, t, 11, 1)
            if r.saturated:
                r = parasail.sw_striped_32(q, t, 11, 1, parasail.blosum62)
            out.append(r.score)
        return out

    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        scores = list(pool.map(one_query, queries))
    return scores, time.perf_counter() - start


def main(argv=None):
    p = argparse.ArgumentParser(description="softsw.search throughput")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--n", type=int, default=2000, help="queries = targets = N (default 2000)")
    p.add_argument("--min-length", type=int, default=50)
    p.add_argument("--max-length", type=int, default=1000)
    p.add_argument("--modes", default="hard,soft", help="hard,soft (default both)")
    p.add_argument("--gap-extend", default="-1", help="-1 (affine, default) or 'linear'")
    p.add_argument("--batch-cells", type=int, default=None,
                   help="at most this many padded cells per kernel call; default: the search's")
    p.add_argument("--memory-budget", type=float, default=None,
                   help="bytes (> 1) or a fraction of free memory; default: the search's")
    p.add_argument("--threads", type=int, default=None, help="CPU threads (torch, parasail)")
    p.add_argument("--parasail", action="store_true", help="time parasail too (CPU)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="also write the results here")
    args = p.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    if args.threads:
        torch.set_num_threads(args.threads)
    gap_extend = None if args.gap_extend == "linear" else float(args.gap_extend)
    budget = args.memory_budget
    if budget is not None and budget > 1:
        budget = int(budget)

    rnd = random.Random(args.seed)
    queries = proteins(rnd, args.n, args.min_length, args.max_length)
    targets = proteins(rnd, args.n, args.min_length, args.max_length)
    q_len = sum(map(len, queries))
    t_len = sum(map(len, targets))
    cells = q_len * t_len
    mean = round(math.sqrt(cells / (len(queries) * len(targets))))
    print(f"{args.n} x {args.n} proteins, lengths {args.min_length}-{args.max_length}: "
          f"{cells / 1e9:.1f} G cells; device {device}, torch threads "
          f"{torch.get_num_threads()}; BLOSUM62, gaps -11 / {args.gap_extend}")
    report = {"n": args.n, "cells": cells, "device": str(device), "modes": {}}
    for mode in args.modes.split(","):
        temperature = {"hard": 0.0, "soft": 1.0}[mode]
        result, seconds, memory = time_search(queries, targets, device, temperature,
                                              gap_extend, budget, args.batch_cells)
        rate = cells / seconds
        line = f"{mode:4s} search: {seconds:8.2f} s  {rate / 1e9:8.3f} G cells/s"
        entry = {"search_s": seconds, "search_cells_per_s": rate, **memory}
        if memory:
            line += (f"  peak {memory['peak_bytes'] / 2**30:.2f} GiB of budget "
                     f"{memory['budget_bytes'] / 2**30:.2f} GiB")
        print(line, flush=True)
        call_cells = 1 << 30 if device.type == "cuda" else 1 << 24
        batched = time_batched(mean, cells, device, temperature, gap_extend, call_cells)
        ratio = batched / seconds
        print(f"{mode:4s} batched {mean}x{mean}: {batched:8.2f} s  {cells / batched / 1e9:8.3f} "
              f"G cells/s   search / batched throughput = {ratio:.2f}", flush=True)
        entry.update(batched_s=batched, batched_cells_per_s=cells / batched, ratio=ratio)
        if args.parasail and mode == "hard":
            scores, p_seconds = time_parasail(queries, targets, args.threads or 1)
            full = softsw.search(queries[:3], targets, gap_open=-11.0, gap_extend=gap_extend,
                                 temperature=0.0, top=None, device=device).scores
            same = all(full[q, t].item() == scores[q][t] for q in range(3)
                       for t in range(len(targets)))
            print(f"hard parasail sw_striped_16 ({args.threads or 1} threads): {p_seconds:8.2f} s"
                  f"  {cells / p_seconds / 1e9:8.3f} G cells/s   scores equal softsw's: {same}",
                  flush=True)
            entry.update(parasail_s=p_seconds, parasail_cells_per_s=cells / p_seconds,
                         parasail_scores_equal=same)
        report["modes"][mode] = entry
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(report, handle, indent=2)


if __name__ == "__main__":
    main()
