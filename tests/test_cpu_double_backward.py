"""CPU double backward on SIMD lanes, linear and affine gaps.

At T > 0 with a float accumulator (float32, float16, bfloat16), the
Hessian-vector product runs 16 pairs to a SIMD group: a tangent pass that
keeps its rows of node tangents (in place for alike pairs, else in each pair's
blocks: tangent_store.h), then the reverse pass that
carries the adjoints and their tangents (affine gaps: the pairs inside the
range rule of probability.h, weights from the probability-domain shares). A
lone pair, an empty pair and an affine pair out of range take the scalar
passes, in the same batch.
These tests hold the first derivatives, the Hessian-vector products (scores
and per-cell gap scores) and the gradient through the first derivative's
`grad_outputs` against the float64 kernel on the same rounded inputs: groups
of every size with mixed lengths, garbage in the scores' padding, huge values
in the direction's padding (which must not leak in), T from 1e-3 to 1e3.
"""
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from conftest import assert_close, fill_padding, grad_tol, hvp_tol, rand_lengths, randn
from helpers import first_and_second

NAMES = ["d/d S", "d/d gap", "HVP d/d S", "HVP d/d gap", "d/d grad_output"]


def compare(gen, B, M, N, T, reduction, gap_tensor, dtype=torch.float32, lengths=None,
            magnitude=1.0, affine=False):
    if lengths is None:
        lengths = rand_lengths(gen, B, M, N)
    S = fill_padding(randn(gen, B, M, N, scale=magnitude).to(dtype).double(), lengths, gen)
    gap = ((-torch.rand(B, M, N, generator=gen, dtype=torch.float64) - 0.3).to(dtype).double()
           if gap_tensor else -0.7)
    extend = None
    if affine:
        extend = ((-torch.rand(B, M, N, generator=gen, dtype=torch.float64) * 0.5).to(dtype)
                  .double() if gap_tensor else -0.3)
    w = (torch.rand(B, generator=gen, dtype=torch.float64) + 0.5).to(dtype).double()
    # Directions with 1e30 in the padding: the Hessian is zero there, and a
    # kernel that read them would return garbage.
    V = randn(gen, B, M, N).to(dtype).double()
    U = randn(gen, B, M, N).to(dtype).double()
    for k in range(B):
        m, n = lengths[k].tolist()
        V[k, m:, :] = 1e30
        V[k, :, n:] = 1e30
        U[k, m:, :] = -1e30
        U[k, :, n:] = -1e30
    if dtype != torch.float32:
        V.clamp_(-1e4, 1e4)
        U.clamp_(-1e4, 1e4)
    expected, scale = first_and_second(S, gap, T, lengths, reduction, w, V, U, torch.float64,
                                       extend)
    actual, _ = first_and_second(S, gap, T, lengths, reduction, w, V, U, dtype, extend)
    if not gap_tensor:
        names = [NAMES[0], NAMES[2], NAMES[4]]
    elif affine:
        names = [NAMES[0], NAMES[1], "d/d extend", NAMES[2], NAMES[3], "HVP d/d extend", NAMES[4]]
    else:
        names = NAMES
    firsts = (len(names) - 1) // 2
    for k, (name, a, e) in enumerate(zip(names, actual, expected)):
        assert a.dtype == dtype
        if dtype == torch.float32:
            tol = (grad_tol if k < firsts else hvp_tol)(dtype, M, N, T, scale * magnitude)
        else:
            tol = 0.05 * max(1.0, 1.0 / T)
        assert_close(a, e, dtype, f"{name} B={B} T={T} {reduction}", tol=tol)
    return actual


@pytest.mark.parametrize("affine", [False, True], ids=["linear", "affine"])
@pytest.mark.parametrize("reduction", ["max", "soft"])
@pytest.mark.parametrize("B", [2, 5, 16, 21, 37])
def test_groups_with_mixed_lengths(gen, B, reduction, affine):
    """Groups of every size (lanes idle, a lone pair on the scalar passes),
    1 x 1 and one-row / one-column pairs next to full ones."""
    M, N = 19, 27
    lengths = rand_lengths(gen, B, M, N)
    if B > 3:
        lengths[1] = torch.tensor([1, 1])
        lengths[2] = torch.tensor([M, 1])
        lengths[3] = torch.tensor([1, N])
    for gap_tensor in (False, True):
        compare(gen, B, M, N, 1.0, reduction, gap_tensor, lengths=lengths, affine=affine)


@pytest.mark.parametrize("affine", [False, True], ids=["linear", "affine"])
@pytest.mark.parametrize("reduction", ["max", "soft"])
@pytest.mark.parametrize("T", [1e-3, 0.05, 0.3, 1.0, 10.0, 1e3])
def test_temperatures(gen, T, reduction, affine):
    """Affine: small T puts pairs out of the range rule (scalar passes)."""
    compare(gen, 18, 14, 22, T, reduction, gap_tensor=True, affine=affine)


@pytest.mark.parametrize("affine", [False, True], ids=["linear", "affine"])
@pytest.mark.parametrize("reduction", ["max", "soft"])
def test_large_scores(gen, reduction, affine):
    """Scores ~30: affine pairs out of the range rule, beside in-range ones."""
    B, M, N = 9, 17, 12
    lengths = rand_lengths(gen, B, M, N)
    compare(gen, B, M, N, 1.0, reduction, gap_tensor=False, magnitude=30.0, affine=affine,
            lengths=lengths)
    compare(gen, B, M, N, 4.0, reduction, gap_tensor=True, magnitude=2.0, affine=affine,
            lengths=lengths)


@pytest.mark.parametrize("reduction", ["max", "soft"])
def test_empty_pairs_and_negative_scores(gen, reduction):
    """Empty pairs (the scalar passes, beside the groups; their Hessian is 0)
    and a pair of negative scores only (its soft cells still exceed 0)."""
    B, M, N = 12, 15, 18
    lengths = rand_lengths(gen, B, M, N, allow_empty=True)
    lengths[2] = torch.tensor([0, 5])
    lengths[3] = torch.tensor([4, 0])
    S = randn(gen, B, M, N).float().double()
    S[5] = -S[5].abs() - 1.0
    S = fill_padding(S, lengths, gen)
    w = torch.ones(B, dtype=torch.float64)
    V = randn(gen, B, M, N).float().double()
    res = [first_and_second(S, -1.0, 0.5, lengths, reduction, w, V, None, dt)[0]
           for dt in (torch.float64, torch.float32)]
    for name, a, e in zip([NAMES[0], NAMES[2], NAMES[4]], res[1], res[0]):
        assert_close(a, e, torch.float32, name, tol=hvp_tol(torch.float32, M, N, 0.5, 10.0))
    for k in (2, 3):
        assert res[1][1][k].abs().max().item() == 0.0


@pytest.mark.parametrize("affine", [False, True], ids=["linear", "affine"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("reduction", ["max", "soft"])
def test_half_types(gen, dtype, reduction, affine):
    compare(gen, 20, 13, 16, 1.0, reduction, gap_tensor=True, dtype=dtype, affine=affine)


@pytest.mark.parametrize("extend", [None, -0.2], ids=["linear", "affine"])
def test_deterministic_and_independent_of_the_batch(gen, extend):
    """The same pair gives the same bits in any group and any lane, and from
    one call to the next."""
    B, M, N = 21, 16, 20
    lengths = rand_lengths(gen, B, M, N)
    S = fill_padding(randn(gen, B, M, N).float().double(), lengths, gen)
    w = torch.ones(B, dtype=torch.float64)
    V = randn(gen, B, M, N).float().double()

    def run(idx):
        return first_and_second(S[idx], -0.6, 0.8, lengths[idx], "soft", w[idx], V[idx], None,
                                torch.float32, extend)[0]

    everything = torch.arange(B)
    a, b = run(everything), run(everything)
    for x, y in zip(a, b):
        assert torch.equal(x, y)
    # The first 16 pairs (one group), then the same pairs in another order.
    perm = torch.randperm(16, generator=gen)
    c, d = run(perm), run(torch.arange(16))
    assert torch.equal(c[1], d[1][perm])
    assert torch.equal(c[2], d[2][perm])


ISA_SCRIPT = textwrap.dedent("""
    import sys, torch
    sys.path.insert(0, sys.argv[1])
    import test_cpu_double_backward as t
    gen = torch.Generator().manual_seed(int(sys.argv[2]))
    for red in ("max", "soft"):
        for gap_tensor in (False, True):
            for affine in (False, True):
                t.compare(gen, 23, 21, 25, 0.7, red, gap_tensor, affine=affine)
    print("OK")
""")


@pytest.mark.parametrize("isa", ["scalar", "baseline", "avx2"])
def test_instruction_set_paths(seed, isa):
    """The scalar passes, the 4-lane baseline vectors and AVX2 (a cap above
    what the CPU has runs the best it has), 3 threads, against float64."""
    here = os.path.dirname(__file__)
    env = dict(os.environ, SOFTSW_CPU_ISA=isa, SOFTSW_NUM_THREADS="3")
    proc = subprocess.run([sys.executable, "-c", ISA_SCRIPT, here, str(seed)],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, f"exit code {proc.returncode}\n{proc.stdout}\n{proc.stderr[-4000:]}"
    assert proc.stdout.strip().endswith("OK")


STORE_SCRIPT = textwrap.dedent("""
    import sys, torch
    sys.path.insert(0, sys.argv[1])
    import test_cpu_double_backward as t
    from conftest import fill_padding, randn
    gen = torch.Generator().manual_seed(int(sys.argv[2]))
    B, M, N = 16, 21, 25
    # Alike pairs, shorter than the tensor: one thread runs all 16 in one group
    # of W lanes and the first 8 in one group of narrow rows, their node
    # tangents kept in place; a pair alone and three together keep them in
    # their pairs' blocks (tangent_store.h).
    lengths = torch.tensor([[17, 22]] * B)
    batches = [torch.arange(B), torch.arange(8), torch.arange(5, 8)] + [
        torch.tensor([k]) for k in (0, 9)]
    for red in ("max", "soft"):
        for gap_tensor in (False, True):
            for T in (0.2, 1.0, 1e3):
                out = t.compare(gen, B, M, N, T, red, gap_tensor, lengths=lengths, affine=True)
                S = fill_padding(randn(gen, B, M, N).float().double(), lengths, gen)
                gap = (-torch.rand(B, M, N, generator=gen, dtype=torch.float64) - 0.3
                       ).float().double() if gap_tensor else -0.7
                ext = (-torch.rand(B, M, N, generator=gen, dtype=torch.float64) * 0.5
                       ).float().double() if gap_tensor else -0.3
                w = torch.rand(B, generator=gen, dtype=torch.float64).float().double() + 0.5
                V = randn(gen, B, M, N).float().double()
                U = randn(gen, B, M, N).float().double() if gap_tensor else None

                def run(idx):
                    pick = lambda x: x[idx] if isinstance(x, torch.Tensor) else x
                    return t.first_and_second(S[idx], pick(gap), T, lengths[idx], red, w[idx],
                                              V[idx], pick(U), torch.float32, pick(ext))[0]

                whole = run(batches[0])
                for idx in batches[1:]:
                    part = run(idx)
                    for k, (a, b) in enumerate(zip(part, whole)):
                        if k == len(part) - 1:  # d/d w: one entry a pair
                            b = b[idx]
                        else:
                            b = b[idx] if b.dim() == 3 else b
                        assert torch.equal(a, b), (red, gap_tensor, T, idx.tolist(), k)
    print("OK")
""")


def test_tangent_store_layouts(seed):
    """The affine double backward's node tangents kept in place (groups of
    alike pairs, W lanes and narrow rows) and in each pair's blocks (a lone
    pair, a small group): against float64 (max and soft, constant and
    per-cell gaps with directions on them, T 0.2 to 1e3, lengths shorter than
    the tensor), and bit for bit the same in every layout. One thread, so that
    the groups are as named."""
    here = os.path.dirname(__file__)
    env = dict(os.environ, SOFTSW_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-c", STORE_SCRIPT, here, str(seed)],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, f"exit code {proc.returncode}\n{proc.stdout}\n{proc.stderr[-4000:]}"
    assert proc.stdout.strip().endswith("OK")
