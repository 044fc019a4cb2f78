"""Hard mode (temperature = 0) against Biopython's local PairwiseAligner: exact
scores for random protein pairs (BLOSUM62 / PAM250, linear and affine gaps),
and the T = 0 expected alignment is a valid optimal traceback.

Gap conventions: softsw scores a gap of length k as gap_open + (k - 1) * gap_extend;
Biopython's open_gap_score is the score of the first gap position and
extend_gap_score of each further one -- the same thing, so both are passed
unchanged (test_reference.py checks the reference against Biopython too)."""
import random

import pytest
import torch

import softsw
from conftest import DEVICES, fill_padding

Bio = pytest.importorskip("Bio")
from Bio import Align  # noqa: E402
from Bio.Align import substitution_matrices  # noqa: E402

AMINO = "ACDEFGHIKLMNPQRSTVWY"
N_PAIRS = 50


def random_pairs(seed, n=N_PAIRS, lo=1, hi=200):
    rnd = random.Random(seed)
    pairs = []
    for _ in range(n):
        a = "".join(rnd.choice(AMINO) for _ in range(rnd.randint(lo, hi)))
        b = "".join(rnd.choice(AMINO) for _ in range(rnd.randint(lo, hi)))
        pairs.append((a, b))
    # Related pairs too (long positive local alignments with gaps).
    for _ in range(n // 5):
        core = "".join(rnd.choice(AMINO) for _ in range(rnd.randint(20, 120)))
        mut = list(core)
        for _ in range(len(core) // 6):
            k = rnd.randrange(len(mut))
            op = rnd.random()
            if op < 0.4:
                mut[k] = rnd.choice(AMINO)
            elif op < 0.7:
                del mut[k]
            else:
                mut.insert(k, "".join(rnd.choice(AMINO) for _ in range(rnd.randint(1, 4))))
        pre = "".join(rnd.choice(AMINO) for _ in range(rnd.randint(0, 40)))
        pairs.append((pre + core, "".join(mut) or "A"))
    return pairs


def score_batch(pairs, matrix, dtype, gen):
    """Padded (B, M, N) substitution scores (garbage in the padding) and lengths."""
    mat = torch.tensor([[matrix[x][y] for y in AMINO] for x in AMINO], dtype=torch.float64)
    idx = {c: k for k, c in enumerate(AMINO)}
    M = max(len(a) for a, _ in pairs)
    N = max(len(b) for _, b in pairs)
    S = torch.zeros(len(pairs), M, N, dtype=torch.float64)
    for k, (a, b) in enumerate(pairs):
        ia = torch.tensor([idx[c] for c in a])
        ib = torch.tensor([idx[c] for c in b])
        S[k, :len(a), :len(b)] = mat[ia][:, ib]
    lengths = torch.tensor([[len(a), len(b)] for a, b in pairs])
    return fill_padding(S, lengths, gen).to(dtype), lengths


def best_gap_block(di, dj, open_, extend):
    """Best score of di gap-down and dj gap-right moves between two matches.
    Runs of one direction may alternate with runs of the other: r runs cost
    r * open + (di + dj - r) * extend, with r = 2 when opening costs more than
    extending, else as many runs as alternation allows."""
    if di == 0 and dj == 0:
        return 0.0
    if di == 0 or dj == 0:
        runs = 1
    elif open_ < extend:
        runs = 2
    else:
        lo, hi = min(di, dj), max(di, dj)
        runs = 2 * lo + (1 if hi > lo else 0)
    return runs * open_ + (di + dj - runs) * extend


def check_traceback(P, S, m, n, open_, extend, want, what):
    """P: the (M, N) T = 0 expected alignment of one pair."""
    P = P.detach().cpu().double()
    assert bool(((P == 0) | (P == 1)).all()), f"{what}: entries other than 0 and 1"
    assert bool((P[m:, :] == 0).all()) and bool((P[:, n:] == 0).all()), f"{what}: padding"
    cells = [tuple(c) for c in torch.nonzero(P).tolist()]  # row-major order
    if not cells:
        assert want == 0, f"{what}: empty traceback for a score of {want}"
        return
    for (i0, j0), (i1, j1) in zip(cells, cells[1:]):
        assert i1 > i0 and j1 > j0, f"{what}: matched cells {(i0, j0)} -> {(i1, j1)} not a path"
    Sd = S.detach().cpu().double()
    total = sum(Sd[i, j].item() for i, j in cells)
    for (i0, j0), (i1, j1) in zip(cells, cells[1:]):
        total += best_gap_block(i1 - i0 - 1, j1 - j0 - 1, open_, extend)
    assert total == want, f"{what}: traceback scores {total}, optimum {want}"


def run_against_biopython(seed, gen, device, matrix_name, open_, extend, dtype, reduction):
    matrix = substitution_matrices.load(matrix_name)
    aligner = Align.PairwiseAligner(mode="local", substitution_matrix=matrix,
                                    open_gap_score=open_, extend_gap_score=extend)
    pairs = random_pairs(seed)
    want = [aligner.score(a, b) for a, b in pairs]
    S, lengths = score_batch(pairs, matrix, dtype, gen)
    S, lengths = S.to(device), lengths.to(device)
    ext = None if open_ == extend else extend
    got = softsw.align(S, open_, 0.0, gap_extend=ext, lengths=lengths, reduction=reduction)
    assert got.dtype == dtype
    bad = [(k, got[k].item(), want[k]) for k in range(len(pairs)) if got[k].item() != want[k]]
    assert not bad, f"{len(bad)} of {len(pairs)} scores differ from Biopython: {bad[:5]}"
    # The same pairs one at a time, unpadded (2-D scores).
    for k in range(0, len(pairs), 10):
        m, n = lengths[k].tolist()
        alone = softsw.align(S[k, :m, :n], open_, 0.0, gap_extend=ext, reduction=reduction)
        assert alone.item() == want[k], f"pair {k} alone"
    score, P = softsw.alignment(S, open_, 0.0, gap_extend=ext, lengths=lengths,
                                reduction=reduction)
    assert score.tolist() == got.tolist()
    for k, (m, n) in enumerate(lengths.tolist()):
        check_traceback(P[k], S[k], m, n, open_, extend, want[k], f"pair {k} ({m}x{n})")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["fp64", "fp32"])
@pytest.mark.parametrize("gap", [-4.0, -1.5])
def test_linear_blosum62(device, seed, gen, gap, dtype):
    run_against_biopython(seed, gen, device, "BLOSUM62", gap, gap, dtype, "max")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["fp64", "fp32"])
@pytest.mark.parametrize("gaps", [(-11.0, -1.0), (-10.0, -0.5), (-5.0, -2.0), (-2.0, -4.0)],
                         ids=str)
def test_affine_blosum62(device, seed, gen, gaps, dtype):
    run_against_biopython(seed, gen, device, "BLOSUM62", gaps[0], gaps[1], dtype, "max")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("gaps", [(-10.0, -1.0), (-8.0, -2.0), (-3.0, -1.0), (-1.0, -3.0)],
                         ids=str)
def test_affine_pam250(device, seed, gen, gaps):
    run_against_biopython(seed, gen, device, "PAM250", gaps[0], gaps[1], torch.float64, "max")


@pytest.mark.parametrize("device", DEVICES)
def test_soft_reduction_at_zero_temperature(device, seed, gen):
    run_against_biopython(seed, gen, device, "BLOSUM62", -10.0, -1.0, torch.float64, "soft")
    run_against_biopython(seed + 1, gen, device, "PAM250", -3.0, -3.0, torch.float32, "soft")
