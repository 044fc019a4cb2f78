"""Align two protein sequences with softsw and show what it computes.

    softsw demo                                  # two human globins, BLOSUM62
    softsw demo --plot alignment.png             # ... and draw the expected alignment
    softsw demo --query HEAGAWGHEE --target PAWHEAE --temperature 2
    softsw demo --device cuda --gap-open -11 --gap-extend -1

(``python -m softsw.demo`` is the same.) It prints the hard Smith-Waterman score
(temperature 0) and the optimal local alignment recovered from
``softsw.alignment(..., temperature=0)`` (the 0/1 traceback matrix), the soft
score at the chosen temperature with a text heat-map of the expected alignment
(``d score / d S``) and its most probable matched pairs, and, when Biopython is
installed, Biopython's local alignment score for comparison. ``--plot FILE.png``
draws the expected alignment as a picture, the optimal path over it (needs
matplotlib: ``pip install 'softsw[plot]'``).
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from typing import List, Optional, Sequence, Tuple

import torch

import softsw
from softsw import scoring

# Human haemoglobin subunits alpha (UniProt P69905) and beta (P68871).
HBA_HUMAN = ("MVLSPADKTNVKAAWGKVGAHAGEYGAEALERMFLSFPTTKTYFPHFDLSHGSAQVKGHGKKVADALTNAVAHVDDMPNAL"
             "SALSDLHAHKLRVDPVNFKLLSHCLLVTLAAHLPAEFTPAVHASLDKFLASVSTVLTSKYR")
HBB_HUMAN = ("MVHLTPEEKSAVTALWGKVNVDEVGGEALGRLLVVYPWTQRFFESFGDLSTPDAVMGNPKVKAHGKKVLGAFSDGLAHLDN"
             "LKGTFATLSELHCDKLHVDPENFRLLGNVLVCVLAHHFGKEFTPPVQAAYQKVVAGVANALAHKYH")

Pair = Tuple[int, int]

PLOT_INSTALL_HINT = "pip install 'softsw[plot]'  (or: pip install matplotlib)"


# --------------------------------------------------------------------------
# From the traceback matrix to a printed alignment.
# --------------------------------------------------------------------------


def path_from_traceback(traceback: torch.Tensor) -> List[Pair]:
    """The matched ``(i, j)`` pairs (0-based) of a 0/1 traceback matrix, in order.

    ``traceback`` is the ``(M, N)`` output of ``softsw.alignment(...,
    temperature=0)``. Raises ``ValueError`` if its ones are not a valid local
    alignment (both coordinates strictly increasing) or it holds other values.
    """
    t = traceback.detach().to("cpu", torch.float64)
    if t.dim() != 2:
        raise ValueError(f"expected an (M, N) traceback matrix, got shape {tuple(t.shape)}")
    if bool(((t != 0) & (t != 1)).any()):
        raise ValueError("the traceback matrix holds values other than 0 and 1")
    pairs = [tuple(p) for p in t.nonzero().tolist()]  # row-major: sorted by i, then j
    for (i0, j0), (i1, j1) in zip(pairs, pairs[1:]):
        if not (i1 > i0 and j1 > j0):
            raise ValueError(f"the traceback matrix is not one alignment path: ({i0}, {j0}) "
                             f"is followed by ({i1}, {j1})")
    return pairs


def aligned_strings(query: str, target: str, pairs: Sequence[Pair]) -> Tuple[str, str, int, int]:
    """The two rows of the alignment through ``pairs`` (with ``-`` for gaps),
    and the 0-based start of the alignment in the query and in the target.

    The traceback matrix records only the matched pairs; where both sequences
    have unmatched residues between two matched pairs, the target's come first
    (``-`` in the query row), then the query's. With linear or affine gaps
    both orders score the same.
    """
    if not pairs:
        return "", "", 0, 0
    q_row, t_row = [query[pairs[0][0]]], [target[pairs[0][1]]]
    for (i0, j0), (i1, j1) in zip(pairs, pairs[1:]):
        for j in range(j0 + 1, j1):
            q_row.append("-")
            t_row.append(target[j])
        for i in range(i0 + 1, i1):
            q_row.append(query[i])
            t_row.append("-")
        q_row.append(query[i1])
        t_row.append(target[j1])
    return "".join(q_row), "".join(t_row), pairs[0][0], pairs[0][1]


def format_alignment(query: str, target: str, pairs: Sequence[Pair], *, width: int = 60,
                     names: Tuple[str, str] = ("query", "target")) -> str:
    """A three-line, Biopython-like display of a local alignment.

    The middle line has ``|`` for identical residues, ``.`` for mismatches
    and ``-`` for gaps; the numbers are 1-based residue positions of the
    first and last residue shown on each line (BLAST style).
    """
    q_row, t_row, q_start, t_start = aligned_strings(query, target, pairs)
    if not q_row:
        return "(empty alignment)"
    middle = "".join("-" if "-" in (a, b) else "|" if a.upper() == b.upper() else "."
                     for a, b in zip(q_row, t_row))
    label = max(len(n) for n in names)
    digits = len(str(max(len(query), len(target))))
    lines = []
    q_pos, t_pos = q_start, t_start  # residues consumed before this block
    for k in range(0, len(q_row), width):
        q_part, t_part, m_part = q_row[k:k + width], t_row[k:k + width], middle[k:k + width]
        q_n = sum(c != "-" for c in q_part)
        t_n = sum(c != "-" for c in t_part)
        lines.append(f"{names[0]:<{label}} {q_pos + 1:>{digits}} {q_part} {q_pos + q_n}")
        lines.append(f"{'':<{label}} {'':>{digits}} {m_part}")
        lines.append(f"{names[1]:<{label}} {t_pos + 1:>{digits}} {t_part} {t_pos + t_n}")
        lines.append("")
        q_pos += q_n
        t_pos += t_n
    return "\n".join(lines[:-1])


def path_score(scores: torch.Tensor, pairs: Sequence[Pair], gap_open: float,
               gap_extend: Optional[float]) -> float:
    """The score of the alignment through ``pairs``, recomputed from ``S`` and the
    gap scores (linear when ``gap_extend`` is None): a check on the traceback."""
    s = scores.detach().to("cpu", torch.float64)
    extend = gap_open if gap_extend is None else gap_extend
    total = sum(float(s[i, j]) for i, j in pairs)
    for (i0, j0), (i1, j1) in zip(pairs, pairs[1:]):
        for run in (i1 - i0 - 1, j1 - j0 - 1):
            if run > 0:
                total += gap_open + (run - 1) * extend
    return total


# --------------------------------------------------------------------------
# The soft alignment as text.
# --------------------------------------------------------------------------

_SHADES = " .:-=+*#%@"


def heatmap(expected: torch.Tensor, query: str, target: str, *, max_rows: int = 40,
            max_cols: int = 72) -> str:
    """A text heat-map of an ``(M, N)`` expected-alignment matrix.

    Each character is one cell, or, for long sequences, the largest value in
    a block of cells; the shades ``' .:-=+*#%@'`` go from below 0.01 (blank) up
    to 1 in steps of 1/9.
    """
    e = expected.detach().to("cpu", torch.float64)
    m, n = e.shape
    rows_per, cols_per = max(1, math.ceil(m / max_rows)), max(1, math.ceil(n / max_cols))
    if rows_per > 1 or cols_per > 1:
        pad = (0, (-n) % cols_per, 0, (-m) % rows_per)
        e = torch.nn.functional.pad(e, pad)
        e = e.reshape(e.shape[0] // rows_per, rows_per, e.shape[1] // cols_per, cols_per)
        e = e.amax(dim=(1, 3))

    def shade(p: float) -> str:
        if not (p >= 0.01):  # also NaN
            return " " if p == p else "?"
        return _SHADES[1 + min(8, int(p * 9))]

    lines = []
    if rows_per == 1 and cols_per == 1:
        lines.append("      " + target)
        for i in range(m):
            lines.append(f"{i + 1:>4} {query[i]}" + "".join(shade(float(p)) for p in e[i]))
    else:
        lines.append(f"(each character: a block of {rows_per} query x {cols_per} target "
                     f"positions, showing its largest value)")
        ruler = [" "] * e.shape[1]
        for c in range(0, e.shape[1], 10):
            label = str(c * cols_per + 1)
            if c + len(label) <= len(ruler):
                ruler[c:c + len(label)] = list(label)
        lines.append("      " + "".join(ruler))
        for r in range(e.shape[0]):
            lines.append(f"{r * rows_per + 1:>5} " + "".join(shade(float(p)) for p in e[r]))
    lines.append("shades: ' ' below 0.01, then '.:-=+*#%@' in steps of 1/9 ('@' >= 0.89); "
                 "rows: query, columns: target")
    return "\n".join(lines)


def top_matches(expected: torch.Tensor, query: str, target: str, path: Sequence[Pair],
                k: int = 10, *, off_path: bool = False) -> str:
    """The ``k`` most probable matched pairs of the expected alignment (with
    ``off_path=True``, only pairs that the optimal alignment does not match)."""
    e = expected.detach().to("cpu", torch.float64)
    if off_path and path:
        e = e.clone()
        i, j = zip(*path)
        e[list(i), list(j)] = -1.0
    flat = e.reshape(-1)
    values, index = torch.topk(flat, min(flat.numel(), 4 * k + 16))
    # Sort by the value as printed, then by position, so that ties (many pairs
    # print as 1.0000) list the same way on every device.
    ranked = sorted((-round(v, 4), idx) for v, idx in zip(values.tolist(), index.tolist()))
    on_path = set(path)
    lines = [f"  {'probability':>11}  {'query':>9}  {'target':>9}  on the optimal path"]
    for neg_v, idx in ranked[:k]:
        v = -neg_v
        if v < 0:
            break
        i, j = divmod(idx, e.shape[1])
        lines.append(f"  {v:>11.4f}  {i + 1:>7} {query[i]}  {j + 1:>7} {target[j]}  "
                     f"{'yes' if (i, j) in on_path else 'no'}")
    return "\n".join(lines)


# --------------------------------------------------------------------------
# The soft alignment as a picture (matplotlib).
# --------------------------------------------------------------------------


def _tick_step(length: int, most: int = 16) -> int:
    """Label every residue of a short sequence; of a long one, every 5th, 10th, 20th,
    50th, ... position, whichever keeps the labels to at most ``most``."""
    if length <= 60:
        return 1
    for step in (5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000):
        if length <= most * step:
            return step
    return 10 ** len(str(length))


def _residue_ticks(seq: str):
    """(tick positions, labels): the residue letters of a short sequence; ``L10``-style
    labels (residue and 1-based position) every few positions of a long one."""
    step = _tick_step(len(seq))
    if step == 1:
        return list(range(len(seq))), list(seq)
    positions = [0] + list(range(step - 1, len(seq), step))
    return positions, [f"{seq[k]}{k + 1}" for k in positions]


def plot_alignment(path: str, expected: torch.Tensor, pairs: Sequence[Pair], query: str,
                   target: str, *, title: str,
                   names: Tuple[str, str] = ("query", "target")) -> None:
    """Draw an ``(M, N)`` expected alignment as a heat-map (rows: query, columns: target),
    the matched pairs of the optimal path as a line over it, and a colour bar; save to
    ``path`` (the format follows its suffix)."""
    from matplotlib.figure import Figure  # no pyplot: no GUI backend, no global state

    e = expected.detach().to("cpu", torch.float64).numpy()
    m, n = e.shape
    cell = min(0.3, 7.5 / max(m, n))  # inches per residue: large plots stay on a page
    # At least 6.5 inches wide, so that the title fits above short sequences.
    fig = Figure(figsize=(max(6.5, n * cell + 2.6), m * cell + 2.3), dpi=150,
                 layout="constrained")
    ax = fig.add_subplot()
    image = ax.imshow(e, cmap="Blues", vmin=0.0, vmax=1.0, interpolation="nearest",
                      aspect="equal")
    if pairs:
        rows, cols = zip(*pairs)
        ax.plot(cols, rows, color="tab:red", linewidth=0.8, alpha=0.9,
                marker="o" if len(pairs) <= 60 else None, markersize=3,
                label="optimal alignment (temperature 0):\nthe line through its matched pairs")
        fig.legend(loc="outside lower center", fontsize=8, frameon=False)
    for axis, seq, set_ticks in ((ax.xaxis, target, ax.set_xticks),
                                 (ax.yaxis, query, ax.set_yticks)):
        positions, labels = _residue_ticks(seq)
        set_ticks(positions, labels, fontsize=7 if len(positions) > 20 else 8,
                  fontfamily="monospace")
    ax.xaxis.tick_top()
    ax.xaxis.set_label_position("top")
    ax.set_xlabel(f"{names[1]} ({n} residues)")
    ax.set_ylabel(f"{names[0]} ({m} residues)")
    bar = fig.colorbar(image, ax=ax, shrink=0.8)
    bar.set_label("P(query i matched with target j) = d score / d S")
    fig.suptitle(title, fontsize=9)
    fig.savefig(path)


def _plot_title(args, matrix: scoring.SubstitutionMatrix, hard: float,
                soft: Optional[float]) -> str:
    gaps = (f"gap {args.gap_open:g}" if args.gap_extend is None
            else f"gap open {args.gap_open:g}, extend {args.gap_extend:g}")
    setting = f"{matrix.name or args.matrix}, {gaps}"
    if soft is None:
        return f"softsw: the optimal local alignment, score {hard:g} ({setting})"
    return (f"softsw: expected alignment at temperature {args.temperature:g} "
            f"(soft score {soft:.2f}, reduction {args.reduction})\n"
            f"and the optimal path at temperature 0 (score {hard:g}); {setting}")


# --------------------------------------------------------------------------
# Biopython, when installed.
# --------------------------------------------------------------------------


def biopython_score(query: str, target: str, matrix: scoring.SubstitutionMatrix,
                    gap_open: float, gap_extend: Optional[float]) -> Optional[float]:
    """Biopython's ``PairwiseAligner(mode="local")`` score, or None without Biopython."""
    try:
        import numpy as np
        from Bio.Align import PairwiseAligner, substitution_matrices
    except ImportError:
        return None
    array = substitution_matrices.Array(
        alphabet=matrix.alphabet, dims=2,
        data=np.asarray(matrix.scores.detach().to("cpu", torch.float64).numpy()))
    aligner = PairwiseAligner(mode="local", substitution_matrix=array,
                              open_gap_score=gap_open,
                              extend_gap_score=gap_open if gap_extend is None else gap_extend)
    return float(aligner.score(query, target))


# --------------------------------------------------------------------------
# The demo.
# --------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    default_device = "cuda" if torch.cuda.is_available() else "cpu"
    p = argparse.ArgumentParser(
        prog="softsw demo",
        description="Align two protein sequences with softsw: hard and soft Smith-Waterman "
                    "scores, the optimal local alignment, and the expected (soft) alignment.")
    p.add_argument("--query", default=HBA_HUMAN,
                   help="query sequence (default: human haemoglobin alpha, P69905)")
    p.add_argument("--target", default=HBB_HUMAN,
                   help="target sequence (default: human haemoglobin beta, P68871)")
    p.add_argument("--matrix", default="BLOSUM62",
                   help="substitution matrix: a name (BLOSUM62 ships with softsw; PAM250 and "
                        "the others need Biopython) or an NCBI-format file (default: BLOSUM62)")
    p.add_argument("--unknown", default=None, metavar="LETTER",
                   help="score letters that the matrix lacks as this one, e.g. X "
                        "(default: reject them)")
    p.add_argument("--gap-open", type=float, default=-4.0,
                   help="score added for opening a gap (negative penalises; default: -4)")
    p.add_argument("--gap-extend", type=float, default=None,
                   help="score added for each further gap position (affine gaps); "
                        "default: none, i.e. linear gaps, every gap position scores --gap-open")
    p.add_argument("--temperature", type=float, default=1.0,
                   help="temperature of the soft alignment, >= 0 (default: 1)")
    p.add_argument("--reduction", choices=("max", "soft"), default="max",
                   help="'max': score of the best end cell; 'soft': soft-max over all end "
                        "cells (default: max)")
    p.add_argument("--device", default=default_device,
                   help=f"torch device, e.g. cpu or cuda (default here: {default_device})")
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32",
                   help="dtype of the score matrix (default: float32)")
    p.add_argument("--top", type=int, default=10,
                   help="how many of the most probable matched pairs to list, >= 1 "
                        "(default: 10)")
    p.add_argument("--plot", default=None, metavar="FILE.png",
                   help="also draw the expected alignment as a heat-map with the optimal "
                        "path over it, into this image file (.png, .pdf or .svg; needs "
                        "matplotlib: " + PLOT_INSTALL_HINT + ")")
    return p


def _clean(seq: str) -> str:
    return "".join(seq.split()).upper()


def _check_letters(option: str, seq: str, matrix: scoring.SubstitutionMatrix,
                   unknown: Optional[str]) -> Optional[str]:
    """A CLI-worded complaint about the first letter of ``seq`` that the matrix lacks
    (None when every letter is scored, or ``--unknown`` stands in for the others)."""
    if unknown is not None:
        return None
    known = set(matrix.alphabet)
    for pos, letter in enumerate(seq):
        if letter not in known:
            return (f"{option}: letter {letter!r} at position {pos + 1} is not in the alphabet "
                    f"of {matrix.name or 'the matrix'} ({matrix.alphabet}); pass --unknown X to "
                    f"score such letters as X (or as another letter of the alphabet)")
    return None


def _check_plot_target(path: str) -> Optional[str]:
    """A complaint about ``--plot PATH`` (None if it can be written), checked before any
    work is done, matplotlib included."""
    suffix = os.path.splitext(path)[1].lower()
    if suffix not in (".png", ".pdf", ".svg"):
        return f"--plot: {path!r} must end in .png, .pdf or .svg"
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        return f"--plot: the folder {folder!r} does not exist"
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return f"--plot needs matplotlib, which is not installed: {PLOT_INSTALL_HINT}"
    return None


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    query, target = _clean(args.query), _clean(args.target)
    if not query:
        parser.error("--query must have at least one letter")
    if not target:
        parser.error("--target must have at least one letter")
    if not (args.temperature >= 0) or math.isinf(args.temperature):
        parser.error(f"--temperature must be a finite number >= 0, got {args.temperature:g}")
    for option, value in (("--gap-open", args.gap_open), ("--gap-extend", args.gap_extend)):
        if value is not None and not math.isfinite(value):
            parser.error(f"{option} must be a finite number, got {value:g}")
    if args.top < 1:
        parser.error(f"--top must be a positive number of pairs, got {args.top}")
    if args.plot is not None:
        problem = _check_plot_target(args.plot)
        if problem:
            parser.error(problem)
    try:
        device = torch.device(args.device)
    except RuntimeError:
        device = None
    if device is None or device.type not in ("cpu", "cuda"):
        parser.error(f"--device must be cpu, cuda or cuda:N, got {args.device!r}")
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is available to PyTorch here")
    dtype = getattr(torch, args.dtype)
    try:
        matrix = scoring.as_matrix(args.matrix)
    except (ValueError, OSError) as err:
        parser.error(f"--matrix: {_without_prefix(err)}")
    if args.unknown is not None and (len(args.unknown) != 1
                                     or args.unknown.upper() not in matrix.alphabet):
        parser.error(f"--unknown must be one letter of the alphabet of "
                     f"{matrix.name or 'the matrix'} ({matrix.alphabet}), got {args.unknown!r}")
    unknown = None if args.unknown is None else args.unknown.upper()
    for option, seq in (("--query", query), ("--target", target)):
        problem = _check_letters(option, seq, matrix, unknown)
        if problem:
            parser.error(problem)
    try:
        scores = scoring.score_matrix(query, target, matrix, unknown=unknown,
                                      device=device, dtype=dtype)
    except (ValueError, OSError) as err:
        parser.error(_without_prefix(err))

    gap_open, gap_extend = args.gap_open, args.gap_extend
    gaps = ("linear gaps" if gap_extend is None
            else f"affine gaps, gap_extend {gap_extend:g}")
    print("softsw demo: local alignment of two sequences")
    print(f"  query  ({len(query)} residues): {_short(query)}")
    print(f"  target ({len(target)} residues): {_short(target)}")
    print(f"  matrix {matrix.name or args.matrix}, gap_open {gap_open:g} ({gaps}), "
          f"device {device}, {args.dtype}")
    print()

    try:
        return _run(args, query, target, matrix, scores, device)
    except (RuntimeError, NotImplementedError) as err:  # e.g. a kernel this build lacks
        print(f"softsw demo: {err}", file=sys.stderr)
        return 1


def _without_prefix(err: Exception) -> str:
    """An error of softsw's Python layer without its "softsw.scoring: " origin."""
    text = str(err)
    return text.split(": ", 1)[1] if text.startswith("softsw") and ": " in text else text


def _positive_gaps(gap_open: float, gap_extend: Optional[float]) -> bool:
    return gap_open > 0 or (gap_extend is not None and gap_extend > 0)


def _run(args, query, target, matrix, scores, device) -> int:
    gap_open, gap_extend, temperature = args.gap_open, args.gap_extend, args.temperature
    # Hard Smith-Waterman: the exact best local alignment.
    hard, traceback = softsw.alignment(scores, gap_open, 0.0, gap_extend=gap_extend)
    hard = float(hard)
    pairs = path_from_traceback(traceback)
    print("Hard Smith-Waterman (temperature 0)")
    print(f"  softsw score                          {hard:g}")
    if pairs:
        print(f"  recomputed from the alignment below   "
              f"{path_score(scores, pairs, gap_open, gap_extend):g}")
    if _positive_gaps(gap_open, gap_extend):
        print("  Note: a positive gap score adds to a path's score, so the optimal path may\n"
              "  begin or end with gaps (or hold gaps only) and, with affine gaps, split a gap\n"
              "  into several runs. The 0/1 traceback records matched pairs only: the\n"
              "  alignment below and the score recomputed from it leave those gaps out, and\n"
              "  Biopython, which treats gaps at the ends of a local alignment otherwise, may\n"
              "  differ too. Gap scores <= 0 (penalties) are the usual choice.")
    if args.unknown is not None:  # Biopython rejects letters outside the alphabet
        known = set(matrix.alphabet)
        bio_q, bio_t = ("".join(c if c in known else args.unknown.upper() for c in s)
                        for s in (query, target))
    else:
        bio_q, bio_t = query, target
    bio = biopython_score(bio_q, bio_t, matrix, gap_open, gap_extend)
    if bio is None:
        print("  Biopython PairwiseAligner             (Biopython not installed)")
    else:
        same = "equal" if bio == hard else f"differs by {hard - bio:g}"
        print(f"  Biopython PairwiseAligner (local)     {bio:g}   ({same})")
    print()
    if pairs:
        q_row, t_row, _, _ = aligned_strings(query, target, pairs)
        ident = sum(a == b for a, b in zip(q_row, t_row))
        n_gaps = q_row.count("-") + t_row.count("-")
        print("Optimal local alignment (softsw.alignment at temperature 0: the 0/1 traceback)")
        print(format_alignment(query, target, pairs))
        print(f"length {len(q_row)}, identities {ident} ({100 * ident / len(q_row):.0f}%), "
              f"gap positions {n_gaps}")
    else:
        print("No local alignment scores above 0: the optimal alignment is empty.")
    print()

    if temperature == 0:
        if args.plot:
            plot_alignment(args.plot, traceback, pairs, query, target,
                           title=_plot_title(args, matrix, hard, None))
            print(f"Wrote {args.plot}: the optimal alignment (temperature 0)")
        return 0

    # Soft Smith-Waterman at the chosen temperature.
    soft, expected = softsw.alignment(scores, gap_open, temperature, gap_extend=gap_extend,
                                      reduction=args.reduction)
    print(f"Soft Smith-Waterman (temperature {temperature:g}, reduction {args.reduction!r})")
    print(f"  soft score                  {float(soft):.4f}   (hard score {hard:g})")
    print(f"  expected aligned pairs      {float(expected.sum()):.2f}   "
          f"(the optimal alignment has {len(pairs)})")
    print()
    print("Expected alignment: d score / d S, the probability that query i is matched to "
          "target j")
    print(heatmap(expected, query, target))
    print()
    print(f"The {min(args.top, expected.numel())} most probable matched pairs "
          f"(1-based positions):")
    print(top_matches(expected, query, target, pairs, args.top))
    if pairs:
        print()
        print("The most probable pairs that the optimal alignment does not match:")
        print(top_matches(expected, query, target, pairs, max(1, args.top // 2), off_path=True))
    if args.plot:
        plot_alignment(args.plot, expected, pairs, query, target,
                       title=_plot_title(args, matrix, hard, float(soft)))
        print()
        print(f"Wrote {args.plot}: the expected alignment at temperature {temperature:g}, "
              f"the optimal path (temperature 0) over it")
    return 0


def _short(seq: str, width: int = 60) -> str:
    return seq if len(seq) <= width else seq[:width - 3] + "..."


if __name__ == "__main__":
    sys.exit(main())
