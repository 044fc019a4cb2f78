"""Empty pairs (score 0, zero gradients) and non-finite scores (docs/semantics.md:
NaN / inf propagate deterministically and never corrupt other pairs)."""
import math

import pytest
import torch

import softsw
from conftest import DEVICES, fill_padding, grads, leaf, randn

MODES = [
    pytest.param(1.0, "max", False, id="T1-max-linear"),
    pytest.param(0.5, "soft", False, id="T0.5-soft-linear"),
    pytest.param(0.0, "max", False, id="T0-max-linear"),
    pytest.param(0.0, "soft", True, id="T0-soft-affine"),
    pytest.param(1.0, "soft", True, id="T1-soft-affine"),
    pytest.param(0.3, "max", True, id="T0.3-max-affine"),
]


def run(S, T, reduction, affine, lengths=None, gap_tensors=True):
    """Score and gradients (S, gap_open, gap_extend) of align on leaves."""
    B, M, N = S.shape
    x = leaf(S)
    go = leaf(torch.full((B, M, N), -0.7, dtype=S.dtype, device=S.device)) if gap_tensors \
        else -0.7
    ge = (leaf(torch.full((B, 1, N), -0.2, dtype=S.dtype, device=S.device)) if gap_tensors
          else -0.2) if affine else None
    out = softsw.align(x, go, T, gap_extend=ge, lengths=lengths, reduction=reduction)
    ins = [t for t in (x, go, ge) if isinstance(t, torch.Tensor)]
    if out.numel() == 0:
        return out, [torch.zeros_like(t) for t in ins]
    return out, list(grads(out, ins, torch.ones_like(out)))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("T,reduction,affine", MODES)
def test_empty_pairs_via_lengths(device, gen, T, reduction, affine):
    B, M, N = 5, 6, 7
    lengths = torch.tensor([[6, 7], [0, 7], [6, 0], [0, 0], [3, 2]], device=device)
    S = fill_padding(randn(gen, B, M, N), lengths.cpu(), gen).to(device)
    out, g = run(S, T, reduction, affine, lengths)
    for b in (1, 2, 3):
        assert out[b].item() == 0.0, f"empty pair {b} scores {out[b].item()}"
        for k, gk in enumerate(g):
            assert bool((gk[b] == 0).all()), f"empty pair {b}: nonzero gradient of input {k}"
    assert math.isfinite(out[0].item()) and out[0].item() > 0
    _, P = softsw.alignment(S, -0.7, T, lengths=lengths, reduction=reduction)
    assert bool((P[1:4] == 0).all())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("T,reduction,affine", MODES)
@pytest.mark.parametrize("shape", [(2, 0, 5), (2, 5, 0), (2, 0, 0)], ids=str)
def test_empty_extents(device, gen, shape, T, reduction, affine):
    S = torch.zeros(shape, dtype=torch.float64, device=device)
    out, g = run(S, T, reduction, affine)
    assert out.shape == (2,) and bool((out == 0).all())
    for gk in g:
        assert bool((gk == 0).all())
    lengths = torch.zeros(2, 2, dtype=torch.int64, device=device)
    out, _ = run(S, T, reduction, affine, lengths)
    assert bool((out == 0).all())
    s2 = softsw.align(S[0], -1.0, T, reduction=reduction)
    assert s2.dim() == 0 and s2.item() == 0.0


@pytest.mark.parametrize("device", DEVICES)
def test_empty_batch(device):
    S = torch.zeros(0, 4, 5, dtype=torch.float64, device=device, requires_grad=True)
    out = softsw.align(S, -1.0, 1.0)
    assert out.shape == (0,)
    out.sum().backward()
    assert S.grad.shape == S.shape
    score, P = softsw.alignment(S.detach(), -1.0, 1.0)
    assert score.shape == (0,) and P.shape == (0, 4, 5)


def _assert_isolated(runs, clean):
    """Pairs 0 and 2 of runs[0] (score, gradients) equal the clean batch's,
    bitwise, and the runs repeat bitwise, NaN included. Returns the scores."""
    out, g = runs[0]
    for b in (0, 2):
        assert torch.equal(out[b], clean[0][b]), f"pair {b} score changed"
        for k, (gk, ck) in enumerate(zip(g, clean[1])):
            assert torch.equal(gk[b], ck[b]), f"pair {b}: gradient of input {k} changed"
    # Deterministic, NaN included.
    torch.testing.assert_close(runs[1][0], out, rtol=0, atol=0, equal_nan=True)
    for a, b_ in zip(runs[1][1], g):
        torch.testing.assert_close(a, b_, rtol=0, atol=0, equal_nan=True)
    return out


def _isolation(device, gen, poison, T, reduction, affine, where="scores"):
    """Pair 1 of 3 gets `poison` at a random interior cell; the other pairs'
    scores and gradients must equal those of the clean batch, bitwise; repeating
    the call gives bitwise the same result (NaN included)."""
    B, M, N = 3, 23, 19
    S = randn(gen, B, M, N, device=device)
    i = int(torch.randint(0, M, (1,), generator=gen))
    j = int(torch.randint(0, N, (1,), generator=gen))
    bad = S.clone()
    clean = run(S, T, reduction, affine)
    if where == "scores":
        bad[1, i, j] = poison
        runs = [run(bad, T, reduction, affine) for _ in range(2)]
    else:  # a gap tensor entry of pair 1
        x = leaf(S)
        go = torch.full((B, M, N), -0.7, dtype=S.dtype, device=device)
        go[1, i, j] = poison
        go = leaf(go)
        runs = []
        for _ in range(2):
            out = softsw.align(x, go, T, gap_extend=-0.2 if affine else None, reduction=reduction)
            runs.append((out, list(grads(out, [x, go]))))
        x2, go2 = leaf(S), leaf(torch.full((B, M, N), -0.7, dtype=S.dtype, device=device))
        out2 = softsw.align(x2, go2, T, gap_extend=-0.2 if affine else None, reduction=reduction)
        clean = (out2, list(grads(out2, [x2, go2])))
    return _assert_isolated(runs, clean)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("T,reduction,affine", MODES)
def test_nan_scores_stay_in_their_pair(device, gen, T, reduction, affine):
    out = _isolation(device, gen, float("nan"), T, reduction, affine)
    assert math.isnan(out[1].item()), f"NaN in pair 1's scores, but its score is {out[1].item()}"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("T,reduction,affine", MODES[:3])
def test_nan_gap_stays_in_its_pair(device, gen, T, reduction, affine):
    out = _isolation(device, gen, float("nan"), T, reduction, affine, where="gap")
    assert math.isnan(out[1].item())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("poison", [float("inf"), -float("inf")], ids=["+inf", "-inf"])
@pytest.mark.parametrize("T,reduction,affine", MODES[:4])
def test_inf_scores_stay_in_their_pair(device, gen, poison, T, reduction, affine):
    out = _isolation(device, gen, poison, T, reduction, affine)
    if poison > 0:
        # A +inf match is an alignment of unbounded score.
        assert out[1].item() == math.inf or math.isnan(out[1].item())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("T,reduction,affine", MODES)
def test_overflowing_path_stays_in_its_pair(device, gen, T, reduction, affine):
    """Finite scores whose path sum exceeds the accumulate type's range
    (docs/semantics.md): that pair scores +inf or NaN, the other pairs get
    bitwise what they get in a clean batch, and the call repeats bitwise."""
    B, M, N = 3, 23, 19
    S = randn(gen, B, M, N, device=device)
    clean = run(S, T, reduction, affine)
    big = torch.finfo(S.dtype).max * 0.75  # two of them on a diagonal overflow
    bad = S.clone()
    bad[1, 5, 7] = big
    bad[1, 6, 8] = big
    out = _assert_isolated([run(bad, T, reduction, affine) for _ in range(2)], clean)
    assert out[1].item() == math.inf or math.isnan(out[1].item()), out[1].item()
