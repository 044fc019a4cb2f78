"""A slow, obviously-correct float64 reference of docs/semantics.md, written cell by cell.

Everything is plain torch autograd on (B,) tensors -- one Python step per DP
cell -- so gradients and double backward (Hessian-vector products) of the
reference come from autograd, not from hand-written adjoints.

* ``smax(xs, T)``: ``softmax_T`` of a list of (B,) tensors; ``T = 0`` is the
  plain max whose gradient goes to the *first* maximal entry of the list (the
  documented tie order: start, match, gap down, gap right).
* ``ref_align``: the same signature as ``softsw.align``. Linear gaps run the
  one-state recurrence (docs/semantics.md), ``gap_extend`` given runs the three-state
  affine recurrence (D, U, L, C with C' that drops the same-direction gap).
* ``lengths``: each pair is computed on its own slice ``[:m, :n]``, so padding
  is never read (zero gradient there by construction).
* ``brute_force_align``: enumerates every local alignment path of a tiny
  problem with Python floats; it checks the recurrence above (test_reference.py).

Keep problem sizes <= 64 x 64 with this module (about a second a pair).
"""
from __future__ import annotations

import math
from typing import List, Optional

import torch

F64 = torch.float64


def smax(xs: List[torch.Tensor], T: float) -> torch.Tensor:
    """softmax_T over a list of equally shaped tensors (T * logsumexp(x / T); max for T = 0)."""
    if len(xs) == 1:
        return xs[0]
    x = torch.stack(xs)
    if T == 0:
        # torch.argmax returns the first maximal index: the documented tie order.
        k = torch.argmax(x, dim=0, keepdim=True)
        return x.gather(0, k).squeeze(0)
    return T * torch.logsumexp(x / T, dim=0)


def expand_gap(gap, batch: int, rows: int, cols: int) -> Optional[torch.Tensor]:
    """A gap argument as a float64 (B, M, N) tensor (the broadcasting of docs/semantics.md); None stays None."""
    if gap is None:
        return None
    if not isinstance(gap, torch.Tensor):
        return torch.full((batch, rows, cols), float(gap), dtype=F64)
    g = gap.to(device="cpu", dtype=F64)
    if g.dim() == 1:  # one score per pair
        g = g.view(batch, 1, 1)
    return g.expand(batch, rows, cols)


def _score_block(S: torch.Tensor, go: torch.Tensor, ge: Optional[torch.Tensor], T: float,
                 reduction: str) -> torch.Tensor:
    """Scores (B,) of B pairs that all have the full extent of S (B, m, n), m, n >= 1."""
    B, m, n = S.shape
    zero = S.new_zeros(B)
    s = [row.unbind(-1) for row in S.unbind(1)]   # s[i-1][j-1] = S[:, i-1, j-1]
    o = [row.unbind(-1) for row in go.unbind(1)]
    C = [[zero] * (n + 1) for _ in range(m + 1)]  # C[i][j], boundary zeros
    if ge is None:
        # Linear gaps: H[i,j] = smax(0, H[i-1,j-1] + S, H[i-1,j] + g, H[i,j-1] + g).
        for i in range(1, m + 1):
            for j in range(1, n + 1):
                g = o[i - 1][j - 1]
                C[i][j] = smax([zero, C[i - 1][j - 1] + s[i - 1][j - 1],
                                C[i - 1][j] + g, C[i][j - 1] + g], T)
    else:
        e = [row.unbind(-1) for row in ge.unbind(1)]
        # D, U, L are -inf on the boundary: represented by None (they drop out).
        D = [[None] * (n + 1) for _ in range(m + 1)]
        U = [[None] * (n + 1) for _ in range(m + 1)]
        L = [[None] * (n + 1) for _ in range(m + 1)]
        # Cu = smax(0, D, L) (what a gap down may open from), Cl = smax(0, D, U).
        Cu = [[zero] * (n + 1) for _ in range(m + 1)]
        Cl = [[zero] * (n + 1) for _ in range(m + 1)]
        for i in range(1, m + 1):
            for j in range(1, n + 1):
                op, ex = o[i - 1][j - 1], e[i - 1][j - 1]
                D[i][j] = s[i - 1][j - 1] + C[i - 1][j - 1]
                u = [Cu[i - 1][j] + op]
                if U[i - 1][j] is not None:
                    u.append(U[i - 1][j] + ex)
                U[i][j] = smax(u, T)
                l_ = [Cl[i][j - 1] + op]
                if L[i][j - 1] is not None:
                    l_.append(L[i][j - 1] + ex)
                L[i][j] = smax(l_, T)
                C[i][j] = smax([zero, D[i][j], U[i][j], L[i][j]], T)
                Cu[i][j] = smax([zero, D[i][j], L[i][j]], T)
                Cl[i][j] = smax([zero, D[i][j], U[i][j]], T)
    interior = [C[i][j] for i in range(1, m + 1) for j in range(1, n + 1)]  # row-major
    if reduction == "max" or T == 0:
        # Boundary zeros rank first among ties; then row-major order.
        return smax([zero] + interior, 0)
    return smax(interior, T)


def ref_align(scores: torch.Tensor, gap_open=-1.0, temperature: float = 1.0, *,
              gap_extend=None, lengths: Optional[torch.Tensor] = None,
              reduction: str = "max") -> torch.Tensor:
    """float64 CPU reference of softsw.align (differentiable to any order)."""
    assert reduction in ("max", "soft")
    T = float(temperature)
    squeeze = scores.dim() == 2
    S = (scores.unsqueeze(0) if squeeze else scores).to(device="cpu", dtype=F64)
    B, M, N = S.shape
    go = expand_gap(gap_open, B, M, N)
    ge = expand_gap(gap_extend, B, M, N)
    if lengths is None:
        if M == 0 or N == 0:
            out = S.sum((1, 2))  # zeros, with a (zero) gradient
        else:
            out = _score_block(S, go, ge, T, reduction)
    else:
        outs = []
        for b, (m, n) in enumerate(lengths.tolist()):
            sl = (slice(b, b + 1), slice(0, m), slice(0, n))
            if m == 0 or n == 0:
                outs.append(S[sl].sum((1, 2)))
            else:
                outs.append(_score_block(S[sl], go[sl], None if ge is None else ge[sl], T,
                                         reduction))
        out = torch.cat(outs) if outs else S.new_zeros(0)
    return out.squeeze(0) if squeeze else out


# ---------------------------------------------------------------------------
# Brute force: every local alignment path, Python floats (tiny problems only).
# ---------------------------------------------------------------------------


def brute_force_align(S, go, ge, T: float, reduction: str) -> float:
    """One pair. S, go, ge: nested lists (m x n) of floats; ge None = linear gaps.

    A path starts at any cell (i0, j0), 0 <= i0 <= m, 0 <= j0 <= n, and makes
    moves match (+1, +1), down (+1, 0), right (0, +1), ending at an interior
    cell; the empty path at an interior cell scores 0. A move ending at (i, j)
    scores S[i-1][j-1] (match) or a gap score read at [i-1][j-1]: linear gaps
    ``go``; affine gaps ``go`` for the first move of a run of equal-direction gap
    moves and ``ge`` for the others. C[i][j] = softmax_T over the scores of all
    paths ending at (i, j).
    """
    m, n = len(S), len(S[0]) if S else 0
    if m == 0 or n == 0:
        return 0.0
    per_cell = {(i, j): [0.0] for i in range(1, m + 1) for j in range(1, n + 1)}

    def walk(i, j, score, last):
        for di, dj, kind in ((1, 1, "M"), (1, 0, "U"), (0, 1, "L")):
            a, b = i + di, j + dj
            if a > m or b > n or a < 1 or b < 1:  # no move ends on the boundary
                continue
            if kind == "M":
                step = S[a - 1][b - 1]
            elif ge is None or last != kind:
                step = go[a - 1][b - 1]
            else:
                step = ge[a - 1][b - 1]
            per_cell[(a, b)].append(score + step)
            walk(a, b, score + step, kind)

    for i0 in range(m + 1):
        for j0 in range(n + 1):
            walk(i0, j0, 0.0, None)

    def soft(values):
        if T == 0:
            return max(values)
        top = max(values)
        return top + T * math.log(sum(math.exp((v - top) / T) for v in values))

    cells = [soft(v) for v in per_cell.values()]
    if reduction == "max" or T == 0:
        return max([0.0] + cells)
    return soft(cells)
