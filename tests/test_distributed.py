"""torch.distributed with 2 gloo processes on the CPU (torch.multiprocessing spawn):

* softsw.search shares the pair grid among the ranks and every rank returns
  exactly what one process returns (top-k with alignments, soft mode, the full
  score matrix, an explicit process_group);
* examples/ddp_train.py: DistributedDataParallel's gradients equal one
  process's on the whole batch (float64; they differ only by the order in
  which the two halves' gradients are summed)."""
from __future__ import annotations

import importlib.util
import os
import random
import sys

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import softsw

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "ddp_train.py")
WORLD = 2
AMINO = "ACDEFGHIKLMNPQRSTVWY"

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                                reason="torch.distributed with gloo is not available")


def sequences(seed):
    rnd = random.Random(seed)
    make = lambda n, hi: ["".join(rnd.choice(AMINO) for _ in range(rnd.randint(1, hi)))  # noqa
                          for _ in range(n)]
    queries, targets = make(11, 70), make(23, 90)
    queries[2] = "".join(rnd.choice(AMINO) for _ in range(60))
    targets[4] = targets[19] = queries[2]  # the best hits of query 2, a tie
    return queries, targets


def searches(queries, targets, **kw):
    """The searches both sides run; `kw` adds process_group (or not)."""
    common = dict(device="cpu", batch_cells=20_000, gap_open=-3.0)
    return {
        "hard": softsw.search(queries, targets, top=5, alignments=True, gap_extend=-1.0,
                              **common, **kw),
        "soft": softsw.search(queries, targets, top=4, temperature=0.7, gap_extend=None,
                              **common, **kw),
        "full": softsw.search(queries, targets, top=None, gap_extend=-1.0, **common, **kw),
    }


def load_example():
    spec = importlib.util.spec_from_file_location("ddp_train", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def worker(rank, init_file, out_dir, seed):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=WORLD)
    try:
        queries, targets = sequences(seed)
        results = searches(queries, targets)  # the default group
        group = dist.new_group([0, 1])
        # Each rank with another budget: the smallest one plans for all.
        results["group"] = softsw.search(queries, targets, top=3, device="cpu",
                                         process_group=group, batch_cells=[20_000, 9_000][rank])
        grads, params = load_example().train(rank, WORLD, steps=2, batch=8, max_length=40)
        torch.save({"search": results, "grads": grads, "params": params},
                   os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


def test_two_gloo_processes(tmp_path, seed, monkeypatch):
    # The children import this file by name and softsw from where we found it.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [os.path.dirname(__file__), os.path.dirname(os.path.dirname(softsw.__file__))] +
        [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    mp.start_processes(worker, args=(str(tmp_path / "init"), str(tmp_path), seed),
                       nprocs=WORLD, join=True, start_method="spawn")
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(WORLD)]

    queries, targets = sequences(seed)
    alone = searches(queries, targets, process_group=False)
    alone["group"] = softsw.search(queries, targets, top=3, device="cpu", process_group=False)
    for r, got in enumerate(ranks):
        for name, want in alone.items():
            have = got["search"][name]
            assert torch.equal(have.scores, want.scores), f"rank {r}, {name}: scores"
            if want.indices is not None:
                assert torch.equal(have.indices, want.indices), f"rank {r}, {name}: indices"
            assert have.alignments == want.alignments, f"rank {r}, {name}: alignments"
    assert alone["hard"].indices[2, :2].tolist() == [4, 19]

    example = load_example()
    grads, params = example.train(0, 1, steps=2, batch=8, max_length=40)
    for r, got in enumerate(ranks):
        for step, (have, want) in enumerate(zip(got["grads"], grads)):
            assert have.keys() == want.keys()
            for name in want:
                torch.testing.assert_close(have[name], want[name], rtol=1e-12, atol=1e-14,
                                           msg=f"rank {r}, step {step}: d loss / d {name}")
        for name in params:
            torch.testing.assert_close(got["params"][name], params[name], rtol=1e-12,
                                       atol=1e-14, msg=f"rank {r}: parameter {name}")


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
