"""The test oracle itself: reference.py against an explicit enumeration of every
local alignment path (and against Biopython in hard mode). No softsw kernel
runs here; if these fail, every comparison with the reference is suspect."""
import random

import pytest
import torch

from conftest import randn
from reference import brute_force_align, ref_align


@pytest.mark.parametrize("T", [0.0, 0.5, 1.0, 5.0])
@pytest.mark.parametrize("reduction", ["max", "soft"])
@pytest.mark.parametrize("affine", [False, True], ids=["linear", "affine"])
def test_reference_matches_path_enumeration(gen, T, reduction, affine):
    for _ in range(4):
        m = int(torch.randint(1, 4, (1,), generator=gen))
        n = int(torch.randint(1, 5, (1,), generator=gen))
        S = randn(gen, m, n)
        go = randn(gen, m, n, scale=0.5, shift=-1.0)
        ge = randn(gen, m, n, scale=0.5, shift=-0.5) if affine else None
        got = ref_align(S, go, T, gap_extend=ge, reduction=reduction).item()
        want = brute_force_align(S.tolist(), go.tolist(), None if ge is None else ge.tolist(),
                                 T, reduction)
        assert got == pytest.approx(want, rel=1e-12, abs=1e-12)


def test_reference_lengths_slice_pairs(gen):
    S = randn(gen, 3, 6, 5)
    lengths = torch.tensor([[6, 5], [2, 4], [0, 3]])
    out = ref_align(S, -0.5, 1.0, lengths=lengths)
    assert out[0].item() == pytest.approx(ref_align(S[0], -0.5, 1.0).item(), rel=1e-14)
    assert out[1].item() == pytest.approx(ref_align(S[1, :2, :4], -0.5, 1.0).item(), rel=1e-14)
    assert out[2].item() == 0.0


def test_reference_hard_mode_matches_biopython():
    pytest.importorskip("Bio")
    from Bio import Align
    from Bio.Align import substitution_matrices

    rnd = random.Random()
    aa = "ACDEFGHIKLMNPQRSTVWY"
    mat = substitution_matrices.load("BLOSUM62")
    for open_, extend in [(-4.0, -4.0), (-10.0, -1.0), (-1.0, -3.0), (-0.5, -0.5)]:
        aligner = Align.PairwiseAligner(mode="local", substitution_matrix=mat,
                                        open_gap_score=open_, extend_gap_score=extend)
        for _ in range(4):
            a = "".join(rnd.choice(aa) for _ in range(rnd.randint(1, 14)))
            b = "".join(rnd.choice(aa) for _ in range(rnd.randint(1, 14)))
            S = torch.tensor([[mat[x][y] for y in b] for x in a], dtype=torch.float64)
            got = ref_align(S, open_, 0.0, gap_extend=extend).item()
            assert got == aligner.score(a, b), (a, b, open_, extend)
