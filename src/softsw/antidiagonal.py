"""Soft Smith-Waterman in plain PyTorch, one anti-diagonal at a time.

This is a readable version of the recurrence and score of docs/semantics.md
and a fallback that runs wherever PyTorch runs: every cell of an anti-diagonal
``i + j = d`` depends only on the two diagonals before it, so the loop runs over the ``M + N - 1``
anti-diagonals and each step is a handful of tensor operations over the whole
diagonal and the whole batch. Gradients (and double backward) come from
autograd through those operations. It is also the baseline the benchmark
(``python -m softsw.bench``) measures the kernels against: it launches about
ten small kernels per anti-diagonal, so it is bound by launch overhead on a
GPU, and it keeps several tensors per cell for autograd.

    import softsw.antidiagonal as ad
    score = ad.align(S, gap_open=-1.0, temperature=1.0)        # same as softsw.align

Same arguments, checks and results as :func:`softsw.align`:

* ``temperature > 0``: ``softmax_T(x) = T log sum exp(x / T)`` (computed as a
  ``logsumexp`` of inputs pre-divided by ``T``); ``temperature == 0``: the
  plain max, with the gradient routed to the first maximal candidate in the
  order start (0), match, gap down, gap right -- for affine gaps, gap open
  before gap extend -- i.e. the traceback.
* ``reduction="max"``: the largest cell value (boundary zeros included; ties
  to the first cell in row-major order, gradient to that cell only);
  ``reduction="soft"``: ``softmax_T`` over the interior cells. An empty pair
  scores 0 with zero gradients.
* ``lengths``: cells outside ``(m_b, n_b)`` are computed on zeroed padding and
  left out of the score, so they get exactly zero gradient and padding content
  (NaN included) never matters.
* half inputs are computed in float32, float64 in float64; the output has the
  dtype of ``scores``.
"""
from __future__ import annotations

import math
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F

from .api import GapScore, _prepare

__all__ = ["align", "dp_matrix"]


# --------------------------------------------------------------------------
# Layout: which cells lie on which anti-diagonal.
# --------------------------------------------------------------------------
#
# DP cells are 1-based (i, j), 1 <= i <= M, 1 <= j <= N, on diagonal d = i + j
# (2 <= d <= M + N). A "full" diagonal also holds its boundary cells (i = 0 or
# j = 0): rows max(0, d - N) .. min(M, d). Its interior rows are
# lo(d) = max(1, d - N) .. hi(d) = min(M, d - 1). Reading the predecessors of
# the interior cells of d from the full diagonals d - 1 and d - 2:
#   up   (i-1, j):   full(d-1)[0 : L]           (L = hi - lo + 1)
#   left (i, j-1):   full(d-1)[1 : 1 + L]
#   diag (i-1, j-1): full(d-2)[o : o + L],      o = 1 if d >= N + 2 else 0
# and full(d) = [boundary if d <= N] + interior + [boundary if d <= M].


class _Layout:
    def __init__(self, rows: int, cols: int, device: torch.device):
        self.rows, self.cols = rows, cols
        self.diagonals: List[Tuple[int, int, int, int, int, int]] = []
        offset = 0
        for d in range(2, rows + cols + 1):
            lo, hi = max(1, d - cols), min(rows, d - 1)
            length = hi - lo + 1
            pad_lo, pad_hi = int(d <= cols), int(d <= rows)
            diag_off = 1 if d >= cols + 2 else 0
            self.diagonals.append((offset, length, lo, pad_lo, pad_hi, diag_off))
            offset += length
        self.cells = offset
        # First cell (diagonal-order position) of each diagonal, and its row.
        self.offsets = torch.tensor([t[0] for t in self.diagonals] or [0], dtype=torch.int64,
                                    device=device)
        self.first_row = torch.tensor([t[2] for t in self.diagonals] or [0], dtype=torch.int64,
                                      device=device)
        # perm[p] = row-major index (i-1) * N + (j-1) of the cell at diagonal-order
        # position p (diagonals in order, rows increasing within a diagonal).
        index_dtype = torch.int32 if rows * cols < 2**31 else torch.int64
        flat = torch.arange(rows * cols, device=device, dtype=torch.int64)
        i0, j0 = flat // cols, flat % cols
        key = (i0 + j0) * rows + i0
        self.perm = torch.argsort(key).to(index_dtype)
        del flat, i0, j0, key

    def position(self, row_major: torch.Tensor) -> torch.Tensor:
        """Diagonal-order position of row-major cell indices."""
        i0 = torch.div(row_major, self.cols, rounding_mode="floor")
        j0 = row_major - i0 * self.cols
        e = i0 + j0  # d - 2
        return self.offsets[e] + (i0 + 1 - self.first_row[e])


_LAYOUTS: Dict[Tuple[int, int, str], _Layout] = {}


def _layout(rows: int, cols: int, device: torch.device) -> _Layout:
    key = (rows, cols, str(device))
    layout = _LAYOUTS.get(key)
    if layout is None:
        if len(_LAYOUTS) >= 16:
            _LAYOUTS.clear()
        layout = _LAYOUTS[key] = _Layout(rows, cols, device)
    return layout


# --------------------------------------------------------------------------
# softmax_T nodes (inputs already divided by T when soft).
# --------------------------------------------------------------------------


def _soft(cands: List[torch.Tensor]) -> torch.Tensor:
    return torch.logsumexp(torch.stack(cands), dim=0)


def _soft2_safe(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    # log(e^a + e^b) whose gradient is 0 (not NaN) where both inputs are -inf.
    dead = (a == -math.inf) & (b == -math.inf)
    out = _soft([torch.where(dead, 0.0, a), torch.where(dead, 0.0, b)])
    return torch.where(dead, -math.inf, out)


def _hard(cands: List[Optional[torch.Tensor]], like: torch.Tensor) -> torch.Tensor:
    """max with the gradient on the first maximal candidate; None is the constant 0."""
    with torch.no_grad():
        m = None
        for c in cands:
            c = torch.zeros_like(like) if c is None else c.detach()
            m = c if m is None else torch.maximum(m, c)
    out = m  # only left where nothing equals m: a NaN candidate
    for c in reversed(cands):
        if c is None:
            out = torch.where(m == 0, 0.0, out)
        else:
            out = torch.where(c == m, c, out)
    return out


# --------------------------------------------------------------------------
# The DP.
# --------------------------------------------------------------------------


def _diagonal_order(t: torch.Tensor, layout: _Layout) -> torch.Tensor:
    batch = t.shape[0]
    return t.reshape(batch, -1).index_select(1, layout.perm)


def _run(s: torch.Tensor, open_d, extend_d, affine: bool, hard: bool, safe_gaps: bool,
         layout: _Layout) -> torch.Tensor:
    """Interior C (= H) of every cell, (B, M*N) in diagonal order.

    ``s``: (B, M*N) scores in diagonal order (divided by T when soft); gaps: a
    float or a (B, M*N) tensor likewise.
    """
    batch = s.shape[0]
    maxlen = max((t[1] for t in layout.diagonals), default=0)
    zeros = s.new_zeros((batch, maxlen))

    def node(cands):
        if hard:
            return _hard(cands, cands[1] if cands[0] is None else cands[0])
        return _soft([zeros[:, :cands[1].shape[1]] if c is None else c for c in cands])

    def node2(a, b):
        if hard:
            return _hard([a, b], a)
        # (logaddexp's double backward is NaN where an input is -inf; logsumexp's is not)
        return _soft2_safe(a, b) if safe_gaps else _soft([a, b])

    # One split per input (not a slice per diagonal: each slice's backward would
    # allocate a gradient as large as the whole input).
    sizes = [t[1] for t in layout.diagonals]

    def chunks(t):
        return [t] * len(sizes) if isinstance(t, float) else torch.split(t, sizes, dim=1)

    s_parts, open_parts = chunks(s), chunks(open_d)
    extend_parts = chunks(extend_d) if affine else s_parts

    out: List[torch.Tensor] = []
    ninf = -math.inf
    # Full diagonals 0 and 1: boundary cells only.
    c2 = s.new_zeros((batch, 1))                      # C on d - 2
    c1 = s.new_zeros((batch, 2))                      # C on d - 1 (linear: H)
    if affine:
        cdl1, cdu1 = c1, c1                           # C' = softmax(0, D, L) / (0, D, U)
        u1 = s.new_full((batch, 2), ninf)             # U, L on d - 1
        l1 = u1
    for (_off, length, _lo, pad_lo, pad_hi, diag_off), sd, go, ge in zip(
            layout.diagonals, s_parts, open_parts, extend_parts):
        pad = (pad_lo, pad_hi)
        if not affine:
            h = node([None,
                      c2[:, diag_off:diag_off + length] + sd,
                      c1[:, 0:length] + go,
                      c1[:, 1:1 + length] + go])
            out.append(h)
            c2, c1 = c1, F.pad(h, pad)
            continue
        d_ = c2[:, diag_off:diag_off + length] + sd
        u = node2(cdl1[:, 0:length] + go, u1[:, 0:length] + ge)
        l_ = node2(cdu1[:, 1:1 + length] + go, l1[:, 1:1 + length] + ge)
        c = node([None, d_, u, l_])
        cdl = node([None, d_, l_])
        cdu = node([None, d_, u])
        out.append(c)
        c2, c1 = c1, F.pad(c, pad)
        cdl1, cdu1 = F.pad(cdl, pad), F.pad(cdu, pad)
        u1, l1 = F.pad(u, pad, value=ninf), F.pad(l_, pad, value=ninf)
    return torch.cat(out, dim=1) if out else s.new_zeros((batch, 0))


def _valid_cells(lengths: torch.Tensor, layout: _Layout) -> torch.Tensor:
    """(B, M*N) bool in diagonal order: the cell lies inside the pair's (m, n)."""
    rm = layout.perm.to(torch.int64)
    i0 = torch.div(rm, layout.cols, rounding_mode="floor")
    j0 = rm - i0 * layout.cols
    return (i0[None, :] < lengths[:, 0:1]) & (j0[None, :] < lengths[:, 1:2])


def _core(s, open_t, extend_t, open_v, extend_v, affine, temperature, lengths, reduction,
          return_matrix=False):
    batch, rows, cols = s.shape
    acc = torch.float64 if s.dtype == torch.float64 else torch.float32
    hard = temperature == 0.0
    scale = 1.0 if hard else 1.0 / temperature
    if rows == 0 or cols == 0:
        zero = s.to(acc).sum(dim=(1, 2)) * 0.0
        return zero.to(s.dtype), (s.new_zeros((batch, rows, cols), dtype=acc)
                                  if return_matrix else None)
    layout = _layout(rows, cols, s.device)
    valid = _valid_cells(lengths, layout) if lengths is not None else None

    def prepare(t):
        t = _diagonal_order(t.to(acc), layout)
        if valid is not None:
            t = torch.where(valid, t, 0.0)
        return t * scale if scale != 1.0 else t

    sd = prepare(s)
    open_d = prepare(open_t) if open_t is not None else open_v * scale
    extend_d = None
    if affine:
        extend_d = prepare(extend_t) if extend_t is not None else extend_v * scale
    safe_gaps = False
    if affine and not hard:
        for g in (open_d, extend_d):
            if isinstance(g, float):
                safe_gaps |= not math.isfinite(g)
            else:
                safe_gaps |= bool(torch.isinf(g.detach()).any())

    h = _run(sd, open_d, extend_d, affine, hard, safe_gaps, layout)  # (B, MN), diagonal order

    if reduction == 1 and not hard:  # soft; at T = 0 "soft" is "max"
        if valid is not None:
            hm = torch.where(valid, h, -math.inf)
            empty = (lengths[:, 0] == 0) | (lengths[:, 1] == 0)
            # An empty pair scores 0: a constant 0 term with no gradient path.
            extra = torch.where(empty, 0.0, -math.inf).to(acc)[:, None]
            hm = torch.cat([hm, extra], dim=1)
        else:
            hm = h
        score = torch.logsumexp(hm, dim=1)
    else:  # max over the cells, boundary zeros included; first in row-major order
        with torch.no_grad():
            hm = torch.where(valid, h, -math.inf) if valid is not None else h.detach()
            nan = torch.isnan(hm)
            has_nan = nan.any(dim=1)
            best = torch.where(nan, -math.inf, hm).amax(dim=1)
            cand = torch.where(has_nan[:, None], nan, hm == best[:, None])
            big = torch.iinfo(torch.int64).max
            rm = layout.perm.to(torch.int64)[None, :].expand(batch, -1)
            first = torch.where(cand, rm, big).amin(dim=1)
            use = has_nan | (best > 0)
            pos = layout.position(torch.where(use, first, 0))
        score = torch.where(use, h.gather(1, pos[:, None]).squeeze(1), 0.0)
    if not hard:
        score = score * temperature
    matrix = None
    if return_matrix:
        matrix = torch.empty_like(h)
        matrix[:, layout.perm.to(torch.int64)] = h.detach()
        matrix = matrix.view(batch, rows, cols) * (1.0 if hard else temperature)
    return score.to(s.dtype), matrix


def align(scores: torch.Tensor, gap_open: GapScore = -1.0, temperature: float = 1.0, *,
          gap_extend: Optional[GapScore] = None, lengths: Optional[torch.Tensor] = None,
          reduction: str = "max") -> torch.Tensor:
    """Same as :func:`softsw.align`, computed with PyTorch operations and autograd.

    Returns ``(B,)`` scores (0-d for 2-D ``scores``); differentiate them as
    usual (``backward``, ``torch.autograd.grad``, double backward).
    """
    args, squeeze = _prepare(scores, gap_open, temperature, gap_extend, lengths, reduction)
    score, _ = _core(*args)
    return score.squeeze(0) if squeeze else score


def dp_matrix(scores: torch.Tensor, gap_open: GapScore = -1.0, temperature: float = 1.0, *,
              gap_extend: Optional[GapScore] = None, lengths: Optional[torch.Tensor] = None,
              reduction: str = "max") -> Tuple[torch.Tensor, torch.Tensor]:
    """``(score, C)``: the score and the (detached) interior DP matrix ``C[b, i-1, j-1]``
    in the accumulate dtype (cells outside ``lengths`` hold values computed on zeroed
    padding). For inspection and tests."""
    args, squeeze = _prepare(scores, gap_open, temperature, gap_extend, lengths, reduction)
    score, matrix = _core(*args, return_matrix=True)
    if squeeze:
        return score.squeeze(0), matrix.squeeze(0)
    return score, matrix
