"""All-against-all scoring of sequence sets: :func:`softsw.search` and ``softsw search``.

    import softsw
    hits = softsw.search(queries, targets, matrix="BLOSUM62", gap_open=-11.0,
                         gap_extend=-1.0, top=10, alignments=True)
    hits.scores[q], hits.indices[q]           # the best 10 targets of query q
    hits.alignments[q][0].query_aligned       # and how the best one aligns

Every query is scored against every target. The score matrices are built on
the device block by block, never all at once:

* **Length buckets.** Queries and targets are sorted by length and cut on a
  fixed grid of length intervals (lengths in one within about 10 %); a block
  pairs one query bucket with one target bucket, so the padding of a block is
  small. The kernel cuts a pair's rows into bands of 32 that run along the
  columns, so a block puts its shorter side on the rows: the targets when
  their bucket is the shorter (the score is the same, see below).
* **Memory budget.** A block is cut into kernel calls of at most
  ``batch_cells`` padded cells; by default as many as fit in
  ``memory_budget`` (bytes, or a fraction of the device's free memory;
  default :data:`DEFAULT_MEMORY_FRACTION`), counting the score matrices, the
  kernel's workspace and the calls in flight.
* **Pipelined.** On CUDA two calls are in flight, on two streams: one call's
  score matrices are built while the other's kernel runs, and a kernel's
  last wave overlaps the next one. Nothing waits for the device between
  calls (no copy to the host, no sync): the host queues ahead. With a
  substitution matrix whose scores float16 holds exactly (BLOSUM, PAM) the
  score matrices are float16: half the bytes to write and read; the kernel
  adds in float32, so the scores are the same to the bit.
* **Streaming top-k.** Each call's scores are merged into a running top-k per
  query (or written into the full ``(Q, T)`` matrix with ``top=None``).
* **Deterministic.** A pair's score does not depend on the block it was
  computed in, and hits are ordered by score, then target index: the same
  hits in the same order whatever ``batch_cells``, the device's free memory,
  or the number of processes. A pair whose query is in a longer bucket than
  its target runs transposed (that depends on the two lengths only): its hard
  score is exactly ``align()``'s of the query-by-target matrix, its soft score
  that to rounding (the kernel's sums run in another order). Two exceptions,
  in the last bits of soft scores: with embeddings the similarities come from
  a matrix product whose rounding may depend on the block's shape; and on the
  CPU, float32 soft scores with linear gaps come from a SIMD loop over
  several pairs or a scalar loop for a pair alone, which round differently
  (``dtype=torch.float64`` or affine gaps avoid it).
* **Distributed.** Under ``torch.distributed`` (e.g. ``torchrun``) the blocks
  are shared among the ranks of ``process_group`` (default: the default group
  when one is initialised) and the results gathered: every rank returns what
  one process would.

Gap scores follow :func:`softsw.align`: a gap of length ``k`` scores
``gap_open + (k - 1) * gap_extend`` (Biopython's ``open_gap_score`` and
``extend_gap_score``). BLAST's ``-gapopen 11 -gapextend 1`` is ``gap_open=-12,
gap_extend=-1`` here.
"""
from __future__ import annotations

import argparse
import bisect
import collections
import contextlib
import inspect
import math
import os
import sys
from dataclasses import dataclass
from typing import Callable, Iterator, List, Optional, Sequence, Tuple, Union

import torch

from . import api, scoring
from .api import alignment

__all__ = ["search", "SearchResult", "Alignment", "DEFAULT_MEMORY_FRACTION", "main"]

#: The share of the device's free memory (CUDA: ``torch.cuda.mem_get_info``;
#: CPU: available physical memory) that a search uses when no
#: ``memory_budget`` is given.
DEFAULT_MEMORY_FRACTION = 0.5

# Length buckets: lengths in one stay within 10 % (or _BUCKET_SLACK residues,
# for short sequences) of each other, so padding costs < ~10 %.
_BUCKET_SLACK = 8

# Default cap on the padded cells of one kernel call (4 GiB of float32
# scores): past it a call keeps a GPU no busier, and offsets stay small.
_MAX_CALL_CELLS = 1 << 30

# Device bytes per pair besides its score matrices and the kernel's
# workspace: its lengths, the kernel's outputs, the top-k candidates.
_PAIR_EXTRA_BYTES = 128

# On CUDA, float32 searches over a substitution matrix whose scores float16
# holds exactly (BLOSUM, PAM: small integers) build float16 score matrices:
# half the bytes to write and for the kernel to read, the same scores to the
# bit (see _scorer). Below this temperature (but above 0) they stay float32:
# near 4e-33 the kernel switches to hard mode, whose unscaling _scorer would
# have to mirror.
_HALF_SCORES = True
_HALF_MIN_TEMPERATURE = 1e-20


# --------------------------------------------------------------------------
# Results.
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Alignment:
    """The optimal local alignment of one hit (hard mode).

    Coordinates are 0-based, ends exclusive: ``query[query_start:query_end]``
    is the aligned part of the query. ``query_aligned`` and ``target_aligned``
    are equally long, with ``-`` for gaps; between two matched pairs the
    query's unmatched residues are written before the target's.
    """

    score: float
    query_start: int
    query_end: int
    target_start: int
    target_end: int
    identities: int      # matched pairs with the same letter
    length: int          # alignment columns (matched pairs and gap positions)
    query_aligned: str
    target_aligned: str

    @property
    def identity(self) -> float:
        """Identities per alignment column (0 for an empty alignment)."""
        return self.identities / self.length if self.length else 0.0


@dataclass
class SearchResult:
    """What :func:`search` returns.

    Attributes:
        scores: ``(Q, k)`` best scores of each query, best first (``k =
            min(top, T)``); or the full ``(Q, T)`` matrix for ``top=None``.
            On the CPU, float32 (float64 for float64 input).
        indices: ``(Q, k)`` int64 target index of each score (ties: the lower
            target index first); ``None`` for the full matrix.
        alignments: with ``alignments=True``: ``alignments[q][r]`` is the
            :class:`Alignment` of ``scores[q, r]``; otherwise ``None``.
    """

    scores: torch.Tensor
    indices: Optional[torch.Tensor]
    alignments: Optional[List[List[Alignment]]] = None

    def hits(self) -> Iterator[Tuple[int, int, float, Optional[Alignment]]]:
        """``(query, target, score, alignment or None)`` for every hit, query
        by query, best first."""
        if self.indices is None:
            raise ValueError("softsw.search: hits() needs a top-k result (top=None "
                             "returned the full score matrix)")
        for q in range(self.scores.shape[0]):
            for r in range(self.scores.shape[1]):
                found = self.alignments[q][r] if self.alignments is not None else None
                yield q, int(self.indices[q, r]), float(self.scores[q, r]), found


# --------------------------------------------------------------------------
# Inputs: sequences (with a substitution matrix) or per-residue embeddings.
# --------------------------------------------------------------------------


class _Set:
    """One side of the search: tokens (sequences) or embeddings, and the
    lengths. Buckets and kernel calls are spans of ``order``, the items sorted
    by (length, index); the tokens live on the device in that order, so a
    call's rows are a slice (no index copied to the device, no host sync)."""

    def __init__(self, items, what, matrix, unknown, device):
        if isinstance(items, (str, torch.Tensor)) or not hasattr(items, "__len__"):
            raise TypeError(f"softsw.search: `{what}` must be a list of sequences (strings) "
                            f"or of (L, D) embedding tensors, got {type(items).__name__}")
        items = list(items)
        self.what = what
        self.embedded = bool(items) and isinstance(items[0], torch.Tensor)
        tokens = None
        if self.embedded:
            for i, e in enumerate(items):
                if not isinstance(e, torch.Tensor) or e.dim() != 2 or \
                        not e.dtype.is_floating_point:
                    raise TypeError(f"softsw.search: `{what}[{i}]` must be a floating-point "
                                    f"(L, D) tensor like `{what}[0]`")
                if e.shape[1] != items[0].shape[1]:
                    raise ValueError(f"softsw.search: `{what}[{i}]` has D = {e.shape[1]}, "
                                     f"`{what}[0]` has D = {items[0].shape[1]}")
            self.embeddings = items
            self.lengths = torch.tensor([e.shape[0] for e in items], dtype=torch.int64)
            self.sequences = None
        else:
            self.sequences = [scoring._as_string(s, f"{what} {i}") for i, s in enumerate(items)]
            tokens, self.lengths = scoring.encode(self.sequences, matrix.alphabet,
                                                  unknown=unknown, what=what[:-1])
        if not len(self):
            self.lengths = torch.zeros(0, dtype=torch.int64)
        self.order = _order(self.lengths)
        self.rank = torch.empty_like(self.order)
        self.rank[self.order] = torch.arange(len(self))
        self.sorted_lengths = self.lengths[self.order].to(device)
        self.sorted_index = self.order.to(device)
        if tokens is not None:
            if tokens.dim() != 2 or tokens.shape[1] == 0:  # no residues at all
                tokens = torch.zeros(len(self), 1, dtype=torch.int64)
            # Padding (-1) becomes token 0: any score, the kernel never reads it.
            self.sorted_tokens = tokens[self.order].clamp_(min=0).to(device)

    def __len__(self):
        return int(self.lengths.shape[0])

    def rows(self, index: torch.Tensor, width: int, device, dtype=None) -> torch.Tensor:
        """Tokens ``(n, width)`` or zero-padded embeddings ``(n, width, D)``
        of the items ``index`` (a CPU tensor)."""
        if not self.embedded:
            where = self.rank[index].to(self.sorted_tokens.device)
            return torch.index_select(self.sorted_tokens, 0, where)[:, :width]
        picked = [self.embeddings[i] for i in index.tolist()]
        out = torch.zeros(len(picked), width, picked[0].shape[1], device=device, dtype=dtype)
        for k, e in enumerate(picked):
            out[k, :e.shape[0]] = e.to(device=device, dtype=dtype)
        return out

    def span(self, start: int, stop: int, width: int, device, dtype=None) -> torch.Tensor:
        """What :meth:`rows` gives for the sorted items ``start:stop``; for
        sequences a view of the device tokens."""
        if not self.embedded:
            return self.sorted_tokens[start:stop, :width]
        return self.rows(self.order[start:stop], width, device, dtype)


def _pair_scores(row_items: torch.Tensor, col_items: torch.Tensor, matrix: Optional[torch.Tensor],
                 similarity: str, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``(nc * nr, rows, cols)`` score matrices of every row item (``(nr,
    rows)`` tokens or ``(nr, rows, D)`` embeddings) against every column item,
    column-major: pair ``c * nr + r`` is row item ``r`` against column item
    ``c``. Token pairs score ``matrix[row token, column token]``, written
    into `out` (a flat buffer of at least that many elements) if given."""
    if matrix is None:
        a, b = row_items, col_items
        if similarity == "cosine":
            a = torch.nn.functional.normalize(a, dim=-1)
            b = torch.nn.functional.normalize(b, dim=-1)
        return torch.einsum("aid,bjd->baij", a, b).reshape(-1, a.shape[1], b.shape[1])
    (nr, rows), (nc, cols) = row_items.shape, col_items.shape
    k = matrix.shape[0]
    # table[c * K + x, j] = matrix[x, col_items[c, j]]: row x of column item
    # c's profile. Row i of pair (c, r) is table row c * K + row_items[r, i]:
    # one gather of whole rows (dim 0) gives every pair's matrix in place.
    table = torch.index_select(matrix, 1, col_items.reshape(-1)).view(k, nc, cols)
    table = table.transpose(0, 1).reshape(nc * k, cols)
    offsets = torch.arange(0, nc * k, k, device=row_items.device).view(nc, 1)
    index = (row_items.reshape(1, nr * rows) + offsets).view(-1)
    if out is not None:
        out = out[:nc * nr * rows * cols].view(nc * nr * rows, cols)
    return torch.index_select(table, 0, index, out=out).view(nc * nr, rows, cols)


# --------------------------------------------------------------------------
# The work: buckets, blocks and kernel calls.
# --------------------------------------------------------------------------


def _order(lengths: torch.Tensor) -> torch.Tensor:
    """Indices sorted by (length, index)."""
    return torch.sort(lengths, stable=True).indices


def _grid(longest: int) -> List[int]:
    """The first length of each length bucket up to `longest`: a fixed grid,
    the same for queries and targets whatever the data. A bucket starting at
    `lo` ends at ``lo + max(lo // 10, _BUCKET_SLACK)``: lengths in a bucket
    are within ~10 % (or _BUCKET_SLACK residues) of each other."""
    starts, lo = [], 0
    while lo <= longest:
        starts.append(lo)
        lo += max(lo // 10, _BUCKET_SLACK) + 1
    return starts


def _buckets(sorted_lengths: List[int]) -> List[Tuple[int, int, int]]:
    """``(grid bucket, start, stop)`` spans of the sorted lengths, one per
    non-empty bucket of the grid."""
    starts = _grid(sorted_lengths[-1] if sorted_lengths else 0)
    spans, start = [], 0
    while start < len(sorted_lengths):
        g = bisect.bisect_right(starts, sorted_lengths[start]) - 1
        stop = bisect.bisect_left(sorted_lengths, starts[g + 1], start) \
            if g + 1 < len(starts) else len(sorted_lengths)
        spans.append((g, start, stop))
        start = stop
    return spans


@dataclass
class _Call:
    """One kernel call: every query of `q_index` against every target of
    `t_index` (the sorted items `q_span`, `t_span`), padded to the widths.
    `transposed`: the targets are the rows (the queries the columns)."""
    q_index: torch.Tensor
    t_index: torch.Tensor
    q_span: Tuple[int, int]
    t_span: Tuple[int, int]
    q_width: int
    t_width: int
    transposed: bool = False

    @property
    def rows(self) -> int:
        return self.t_width if self.transposed else self.q_width

    @property
    def cols(self) -> int:
        return self.q_width if self.transposed else self.t_width

    @property
    def cells(self) -> int:
        return len(self.q_index) * len(self.t_index) * self.rows * self.cols

    @property
    def items(self) -> Tuple[int, int]:
        """(row items, column items)."""
        q, t = len(self.q_index), len(self.t_index)
        return (t, q) if self.transposed else (q, t)


def _plan(queries: _Set, targets: _Set, batch_cells: int,
          footprint: Optional["_Footprint"] = None, call_bytes: Optional[int] = None,
          orient: bool = True) -> List[_Call]:
    """Kernel calls covering the pair grid, in a fixed order: one length
    bucket of queries against one of targets, cut into calls of at most
    `batch_cells` padded cells and (with a `footprint`) `call_bytes` bytes.

    Orientation: the kernel cuts a pair's rows into bands of 32, one warp
    each, that run along the columns; fewer, longer bands waste less (each
    band's fill and drain, its hand-over to the next). So a block puts the
    shorter side on the rows: the targets when their bucket is shorter than
    the queries'. The choice depends only on the two lengths (through the
    fixed grid), never on the split into calls."""
    q_order, t_order = _order(queries.lengths), _order(targets.lengths)
    q_len = queries.lengths[q_order].tolist()
    t_len = targets.lengths[t_order].tolist()
    t_buckets = _buckets(t_len)
    calls = []
    for qg, q0, q1 in _buckets(q_len):
        q_width = max(1, q_len[q1 - 1])
        for tg, t0, t1 in t_buckets:
            t_width = max(1, t_len[t1 - 1])
            transposed = orient and qg > tg
            rows, cols = (t_width, q_width) if transposed else (q_width, t_width)
            # The column side whole if it fits, then as many rows as fit.
            (r0, r1), (c0, c1) = ((t0, t1), (q0, q1)) if transposed else ((q0, q1), (t0, t1))
            nr, nc = _call_shape(r1 - r0, c1 - c0, rows, cols, batch_cells, footprint,
                                 call_bytes)
            if nr < 1:
                needs = f"{rows * cols} cells"
                allows = f"{batch_cells} cells"
                if footprint is not None:
                    needs += f" ({footprint.call(1, 1, rows, cols)} bytes with its workspace)"
                    allows += f" and {call_bytes} bytes"
                raise ValueError(
                    f"softsw.search: one pair of lengths {q_width} x {t_width} needs {needs} "
                    f"but batch_cells and memory_budget allow {allows} per kernel call; "
                    f"raise `memory_budget` or `batch_cells`")
            for a in range(r0, r1, nr):
                for b in range(c0, c1, nc):
                    row_span, col_span = (a, min(a + nr, r1)), (b, min(b + nc, c1))
                    q_span, t_span = (col_span, row_span) if transposed else (row_span, col_span)
                    calls.append(_Call(q_order[q_span[0]:q_span[1]], t_order[t_span[0]:t_span[1]],
                                       q_span, t_span, q_width, t_width, transposed))
    return calls


def _call_shape(n_rows: int, n_cols: int, rows: int, cols: int, batch_cells: int,
                footprint: Optional["_Footprint"], call_bytes: Optional[int]) -> Tuple[int, int]:
    """Items per call of a block (row side, column side): the whole column
    side if it fits, then as many row items as fit; (0, 0) if one pair does
    not fit."""
    pairs = batch_cells // (rows * cols)
    nc = min(n_cols, pairs)
    if nc < 1:
        return 0, 0
    if footprint is None:
        return max(1, pairs // nc), nc
    while nc >= 1:
        per_row = nc * footprint.pair(rows, cols) + rows * footprint.row_residue
        nr = min(pairs // nc, (call_bytes - nc * cols * footprint.col_residue) // per_row)
        if nr >= 1:
            return nr, nc
        nc //= 2
    return 0, 0


def _largest_first(calls: List[_Call], count: int) -> List[_Call]:
    """The `count` largest calls first, then the others in order: the first
    call of each stream allocates the largest score matrices and kernel
    workspace, which CUDA's caching allocator then splits for the smaller
    calls (growing calls would each ask the driver for more memory)."""
    largest = sorted(range(len(calls)), key=lambda k: (-calls[k].cells, k))[:count]
    return [calls[k] for k in largest] + [c for k, c in enumerate(calls) if k not in largest]


def _share(calls: List[_Call], rank: int, world: int) -> List[_Call]:
    """This rank's calls: each call goes to the rank with the fewest cells so
    far (largest calls first, ties to the lower rank): balanced, and the same
    on every rank."""
    load = [0] * world
    mine = []
    for k in sorted(range(len(calls)), key=lambda k: (-calls[k].cells, k)):
        owner = min(range(world), key=lambda r: (load[r], r))
        load[owner] += calls[k].cells
        if owner == rank:
            mine.append(calls[k])
    return mine


@dataclass(frozen=True)
class _Footprint:
    """Device bytes of one kernel call. Per pair: the score matrices
    (`copies` of them: with embeddings the similarity product and the
    kernel's copy) and the kernel's workspace, which holds per band of 32
    rows a hand-over edge (up to 4 values per column, each two words of the
    accumulate type), a flag and a partial result; plus a pair's lengths,
    outputs and top-k candidates (_PAIR_EXTRA_BYTES), and for tokens the
    gather's index (a table row per row). Per residue of the call's row and
    column items: what building the score matrices keeps (tokens: their
    index, and per column residue a column of the (K, ...) table;
    embeddings: the padded (normalised) vectors)."""
    element: int
    accumulate: int
    copies: int
    row_residue: int
    col_residue: int
    row_index: int

    def pair(self, rows: int, cols: int) -> int:
        bands = -(-rows // 32)
        return (self.copies * self.element * rows * cols + self.row_index * rows
                + bands * (8 * self.accumulate * cols + 24) + _PAIR_EXTRA_BYTES)

    def call(self, nr: int, nc: int, rows: int, cols: int) -> int:
        """Bytes of a call of `nr` row items against `nc` column items."""
        return (nr * nc * self.pair(rows, cols) + nr * rows * self.row_residue
                + nc * cols * self.col_residue)


def _footprint(dtype: torch.dtype, alphabet_size: int, dims: Optional[int] = None,
               cosine: bool = False) -> _Footprint:
    """The footprint of sequences over an alphabet of `alphabet_size`
    letters, or of embeddings of `dims` dimensions."""
    element = torch.tensor([], dtype=dtype).element_size()
    accumulate = 8 if dtype == torch.float64 else 4
    if dims is not None:
        vector = dims * element * (2 if cosine else 1)
        return _Footprint(element, accumulate, 2, vector, vector, 0)
    return _Footprint(element, accumulate, 1, 8, alphabet_size * element + 8, 8)


def _resident_bytes(q_set: _Set, t_set: _Set, k: Optional[int], result_dtype) -> int:
    """Device bytes the search holds besides its kernel calls: the sorted
    tokens, lengths and indices, and the results (top-k and its merges, or
    the full matrix and its unsorted copy)."""
    total = 0
    for s in (q_set, t_set):
        total += 16 * len(s)
        if not s.embedded and len(s):
            total += s.sorted_tokens.numel() * s.sorted_tokens.element_size()
    size = torch.tensor([], dtype=result_dtype).element_size()
    if k is None:
        return total + len(q_set) * len(t_set) * (2 * size + 1)
    # The top-k, and in each call in flight its queries' k candidates (scores,
    # indices, sort keys and orders).
    return total + len(q_set) * k * (2 * (size + 8) + 2 * 48)


def _free_memory(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 4 << 30  # no way to ask: assume 4 GiB


def _budget_bytes(memory_budget, device) -> int:
    if memory_budget is None:
        return int(DEFAULT_MEMORY_FRACTION * _free_memory(device))
    if isinstance(memory_budget, bool) or not isinstance(memory_budget, (int, float)):
        raise TypeError("softsw.search: `memory_budget` must be a number of bytes (int) or "
                        "a fraction of free memory (float in (0, 1])")
    if isinstance(memory_budget, float):
        if not 0.0 < memory_budget <= 1.0:
            raise ValueError(f"softsw.search: a float `memory_budget` is a fraction of free "
                             f"memory in (0, 1], got {memory_budget}")
        return int(memory_budget * _free_memory(device))
    if memory_budget <= 0:
        raise ValueError(f"softsw.search: `memory_budget` must be > 0 bytes, got "
                         f"{memory_budget}")
    return memory_budget


# --------------------------------------------------------------------------
# Top-k.
# --------------------------------------------------------------------------


def _best(scores: torch.Tensor, index: torch.Tensor, k: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """The k best of each row by (score descending, index ascending): a total
    order, so the result does not depend on the order candidates came in.
    NaN (an invalid pair) ranks last."""
    order = torch.argsort(index, dim=1, stable=True)
    scores, index = scores.gather(1, order), index.gather(1, order)
    key = torch.where(torch.isnan(scores), torch.full_like(scores, -math.inf), scores)
    order = torch.argsort(key, dim=1, descending=True, stable=True)[:, :k]
    return scores.gather(1, order), index.gather(1, order)


# --------------------------------------------------------------------------
# torch.distributed.
# --------------------------------------------------------------------------


def _group(process_group):
    """(group or None, rank, world size)."""
    if process_group is False:
        return None, 0, 1
    import torch.distributed as dist
    if process_group is None:
        if not (dist.is_available() and dist.is_initialized()):
            return None, 0, 1
    elif not (dist.is_available() and dist.is_initialized()):
        raise ValueError("softsw.search: `process_group` was given but torch.distributed "
                         "is not initialised")
    world = dist.get_world_size(process_group)
    if world == 1:
        return None, 0, 1
    return process_group, dist.get_rank(process_group), world


def _comm_device(group, device) -> torch.device:
    import torch.distributed as dist
    return device if dist.get_backend(group) == "nccl" else torch.device("cpu")


def _smallest(group, values: List[int], device) -> List[int]:
    """The smallest of each value over the ranks (each rank's free memory
    differs, but every rank must plan the same kernel calls)."""
    import torch.distributed as dist
    x = torch.tensor(values, dtype=torch.int64, device=_comm_device(group, device))
    dist.all_reduce(x, op=dist.ReduceOp.MIN, group=group)
    return x.tolist()


def _gather_best(group, world, scores, index, k, device):
    import torch.distributed as dist
    where = _comm_device(group, device)
    parts_s = [torch.empty_like(scores, device=where) for _ in range(world)]
    parts_i = [torch.empty_like(index, device=where) for _ in range(world)]
    dist.all_gather(parts_s, scores.to(where).contiguous(), group=group)
    dist.all_gather(parts_i, index.to(where).contiguous(), group=group)
    return _best(torch.cat(parts_s, 1).to(device), torch.cat(parts_i, 1).to(device), k)


def _gather_full(group, full, filled, device):
    # Pairs another rank computed are -inf here: a max over the ranks returns
    # each pair's one computed value unchanged (NaN marks stay NaN).
    import torch.distributed as dist
    where = _comm_device(group, device)
    x = torch.where(filled, full, torch.full_like(full, -math.inf)).to(where)
    nan = torch.isnan(x).to(torch.uint8)
    x = torch.nan_to_num(x, nan=-math.inf)
    dist.all_reduce(x, op=dist.ReduceOp.MAX, group=group)
    dist.all_reduce(nan, op=dist.ReduceOp.MAX, group=group)
    return torch.where(nan.bool(), torch.full_like(x, math.nan), x).to(device)


# --------------------------------------------------------------------------
# Alignments of the hits (hard mode).
# --------------------------------------------------------------------------


def _trace(cells: List[List[int]], query: str, target: str, score: float) -> Alignment:
    """An Alignment from the matched pairs [i, j] of a path, in order."""
    if not cells:
        return Alignment(score, 0, 0, 0, 0, 0, 0, "", "")
    qa, ta = [], []
    identities = 0
    pi, pj = cells[0][0] - 1, cells[0][1] - 1
    for i, j in cells:
        if i - pi > 1:
            qa.append(query[pi + 1:i])
            ta.append("-" * (i - pi - 1))
        if j - pj > 1:
            qa.append("-" * (j - pj - 1))
            ta.append(target[pj + 1:j])
        qa.append(query[i])
        ta.append(target[j])
        identities += query[i] == target[j]
        pi, pj = i, j
    q_text, t_text = "".join(qa), "".join(ta)
    return Alignment(score, cells[0][0], pi + 1, cells[0][1], pj + 1, identities,
                     len(q_text), q_text, t_text)


def _alignments(queries: _Set, targets: _Set, hit_q, hit_t, hit_score, matrix, gap_open,
                gap_extend, reduction, device, dtype, batch_cells, budget) -> List[Alignment]:
    """Alignments of the hits (hit_q[h], hit_t[h]), in hit order, in chunks
    of at most `batch_cells` cells and `budget` bytes."""
    # The training forward keeps state (1 or 3 planes of the accumulate type)
    # and the backward writes the alignment: more bytes per cell than scoring.
    size = torch.tensor([], dtype=dtype).element_size()
    planes = 1 if gap_extend is None or gap_extend == gap_open else 3
    cells = max(1, min(batch_cells, budget // (3 * size + planes * max(4, size))))
    out: List[Optional[Alignment]] = [None] * len(hit_q)
    order = sorted(range(len(hit_q)),
                   key=lambda h: (int(queries.lengths[hit_q[h]]), int(targets.lengths[hit_t[h]]), h))
    start = 0
    while start < len(order):
        first = order[start]
        rows = max(1, int(queries.lengths[hit_q[first]]))
        stop = start
        cols = 1
        while stop < len(order):
            h = order[stop]
            r = max(rows, int(queries.lengths[hit_q[h]]))
            c = max(cols, int(targets.lengths[hit_t[h]]))
            if stop > start and (stop - start + 1) * r * c > cells:
                break
            rows, cols = r, c
            stop += 1
        chunk = order[start:stop]
        q_index = torch.tensor([hit_q[h] for h in chunk])
        t_index = torch.tensor([hit_t[h] for h in chunk])
        q = queries.rows(q_index, rows, device)
        t = targets.rows(t_index, cols, device)
        s = matrix[q.unsqueeze(2), t.unsqueeze(1)]  # (n, rows, cols), one pair each
        lengths = torch.stack([queries.lengths[q_index], targets.lengths[t_index]], 1)
        with torch.no_grad():
            _, path = alignment(s, gap_open, 0.0, gap_extend=gap_extend,
                                lengths=lengths.to(device), reduction=reduction)
        # Only the matched cells leave the device (row-major: pair, i, j),
        # not the (n, rows, cols) 0/1 matrices.
        matched = path.nonzero().cpu()
        per_pair = torch.bincount(matched[:, 0], minlength=len(chunk)).tolist()
        pairs_ij = matched[:, 1:].tolist()
        offset = 0
        for k, h in enumerate(chunk):
            out[h] = _trace(pairs_ij[offset:offset + per_pair[k]], queries.sequences[hit_q[h]],
                            targets.sequences[hit_t[h]], hit_score[h])
            offset += per_pair[k]
        start = stop
    return out


# --------------------------------------------------------------------------
# search().
# --------------------------------------------------------------------------


def _scorer(gap_open: float, gap_extend: Optional[float], temperature: float, reduction: str):
    """scores, lengths -> (B,) inference scores (float32 for float16 scores):
    softsw.align's op without its argument checks. The lengths check reads
    the tensor, a host sync per call that would keep the host from queuing
    the next call while the device works; the lengths here are right by
    construction."""
    temperature = api._check_temperature(temperature)
    code = api._check_reduction(reduction)
    affine = gap_extend is not None and gap_extend != gap_open
    extend = gap_extend if affine else gap_open
    # Caller units per kernel unit, as the kernel rounds it: soft mode runs
    # on scores scaled by 1 / (T ln 2).
    unscale = float(torch.tensor(temperature * math.log(2) if temperature > 0 else 1.0,
                                 dtype=torch.float32))

    def run(scores: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        api._check_device_served(scores)
        out = torch.ops.softsw.forward(scores, None, None, gap_open, extend, affine,
                                       temperature, lengths, code, False)
        if scores.dtype != torch.float16:
            return out[0]
        # The score comes back in float16 too; the pair's total (float32,
        # kernel units: the largest value and log2 of the soft sum) gives it
        # as the kernel computes it for float32 scores: (base + log2sum) * unscale.
        total = out[3]
        return (total[:, 0] + total[:, 1]) * unscale
    return run


def _progress_bar(total: int, enabled: Optional[bool]):
    """A tqdm bar, or None. tqdm is optional: a progress bar is a convenience,
    not worth a dependency of the library (None: a bar only when stderr is a
    terminal and tqdm is installed)."""
    if enabled is False or (enabled is None and not sys.stderr.isatty()):
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        if enabled:
            raise ImportError("softsw.search: progress=True needs tqdm (pip install tqdm)")
        return None
    return tqdm(total=total, unit="cell", unit_scale=True, desc="softsw search",
                dynamic_ncols=True)


def search(queries: Sequence, targets: Sequence, *, matrix="BLOSUM62",
           similarity: str = "dot", gap_open: float = -11.0, gap_extend: Optional[float] = -1.0,
           temperature: float = 0.0, reduction: str = "max", top: Optional[int] = 10,
           alignments: bool = False, device: Optional[Union[str, torch.device]] = None,
           dtype: Optional[torch.dtype] = None, memory_budget: Union[int, float, None] = None,
           batch_cells: Optional[int] = None, unknown: Optional[str] = None,
           progress: Optional[bool] = None, process_group=None) -> SearchResult:
    """Score every query against every target; keep each query's best hits.

    Args:
        queries, targets: lists of sequences (strings, ``Bio.Seq``) scored with
            ``matrix``; or lists of per-residue embeddings, ``(L_i, D)``
            floating-point tensors, scored with ``similarity``.
        matrix: a substitution matrix, anything :mod:`softsw.scoring` takes
            (``"BLOSUM62"``, ``"PAM250"``, a file, an ``(alphabet, scores)`` pair).
        similarity: for embeddings: ``"dot"`` (``S[i, j] = <q_i, t_j>``) or
            ``"cosine"``.
        gap_open, gap_extend: Python floats, as in :func:`softsw.align`
            (``gap_extend=None``: linear gaps).
        temperature: ``0`` (default) is hard Smith-Waterman; ``> 0`` soft.
        reduction: ``"max"`` or ``"soft"``, as in :func:`softsw.align`.
        top: hits kept per query (``min(top, T)``); ``None`` returns the full
            ``(Q, T)`` score matrix instead.
        alignments: also return each hit's optimal alignment (hard mode with
            sequences only).
        device: where the kernels run (default: the current CUDA device if
            there is one, else the CPU). Results are returned on the CPU.
        dtype: of the score matrices (default float32; embeddings: theirs).
        memory_budget: bytes (int) or a fraction of the device's free memory
            (float) that the search may take on the device: its sequences and
            results, and the kernel calls in flight (on CUDA two overlap),
            each with its score matrices and the kernel's workspace; default
            :data:`DEFAULT_MEMORY_FRACTION` of free memory.
        batch_cells: at most this many padded cells per kernel call (default:
            what the budget allows, at most 2**30). Results do not depend on it.
        unknown: a letter outside the matrix's alphabet raises, or is scored
            as this symbol (e.g. ``"X"``).
        progress: a tqdm progress bar over the cells (``None``: shown when
            stderr is a terminal and tqdm is installed; rank 0 only).
        process_group: a ``torch.distributed`` group to share the work with;
            ``None``: the default group if one is initialised; ``False``: this
            process alone. Every rank of the group must call ``search`` with
            the same arguments; every rank returns the whole result.

    Returns:
        a :class:`SearchResult`.
    """
    return _run(_prepare(queries, targets, matrix=matrix, similarity=similarity,
                         gap_open=gap_open, gap_extend=gap_extend, temperature=temperature,
                         reduction=reduction, top=top, alignments=alignments, device=device,
                         dtype=dtype, memory_budget=memory_budget, batch_cells=batch_cells,
                         unknown=unknown, progress=progress, process_group=process_group))


@dataclass
class _Job:
    """A search, prepared: its sets on the device, its kernel calls, where
    the results go."""
    q_set: _Set
    t_set: _Set
    matrix: Optional[torch.Tensor]      # (K, K) on the device; None for embeddings
    call_matrix: Optional[torch.Tensor]  # the matrix the calls build from (float16 or matrix)
    similarity: str
    kernel: Callable
    device: torch.device
    dtype: torch.dtype
    result_dtype: torch.dtype
    k: Optional[int]                    # hits per query; None: the full matrix
    calls: List[_Call]                  # this rank's
    in_flight: int                      # kernel calls the device runs at once
    call_bytes: int
    batch_cells: int
    group: object
    rank: int
    world: int
    progress: Optional[bool]
    alignments: bool
    gaps: Tuple[float, Optional[float]]
    reduction: str
    footprint: _Footprint
    call_matrix_t: Optional[torch.Tensor] = None

    def __post_init__(self):
        if self.call_matrix is not None:
            self.call_matrix_t = self.call_matrix.T.contiguous()

    def build(self, call: _Call, out: Optional[torch.Tensor] = None
              ) -> Tuple[torch.Tensor, torch.Tensor]:
        """The call's score matrices (into `out`, see _pair_scores) and the
        pairs' lengths: the kernel's inputs, column-major (_pair_scores)."""
        row_set, col_set = (self.t_set, self.q_set) if call.transposed else \
            (self.q_set, self.t_set)
        (r0, r1), (c0, c1) = (call.t_span, call.q_span) if call.transposed else \
            (call.q_span, call.t_span)
        s = _pair_scores(row_set.span(r0, r1, call.rows, self.device, self.dtype),
                         col_set.span(c0, c1, call.cols, self.device, self.dtype),
                         self.call_matrix_t if call.transposed else self.call_matrix,
                         self.similarity, out)
        nr, nc = r1 - r0, c1 - c0
        lengths = torch.stack((row_set.sorted_lengths[r0:r1].expand(nc, nr),
                               col_set.sorted_lengths[c0:c1, None].expand(nc, nr)), 2)
        return s, lengths.reshape(nc * nr, 2)

    def buffer(self, calls: List[_Call]) -> Optional[torch.Tensor]:
        """On the CPU, a flat buffer for the score matrices of the largest of
        `calls`, reused call after call: a fresh large tensor is fresh pages
        from the system, whose first writes fault (they cost more than the
        gather itself). None where it does not pay (CUDA's caching allocator
        reuses memory anyway; embeddings) or where the buffer and a smaller
        call's other memory would exceed a call's share of the budget."""
        if self.device.type != "cpu" or self.call_matrix is None or not calls:
            return None
        size = self.footprint.element * self.footprint.copies
        rest = max(self.footprint.call(*c.items, c.rows, c.cols) - size * c.cells for c in calls)
        cells = max(c.cells for c in calls)
        if size * cells + rest > self.call_bytes:
            return None
        return torch.empty(cells, dtype=self.call_matrix.dtype, device=self.device)

    def call_scores(self, call: _Call, recorder=None,
                    out: Optional[torch.Tensor] = None) -> torch.Tensor:
        """The call's ``(queries, targets)`` scores, on the current stream."""
        with _part(recorder, "scores"):
            s, lengths = self.build(call, out)
        with _part(recorder, "kernel"):
            score = self.kernel(s, lengths)
        if call.transposed:  # rows: targets, columns: queries
            return score.to(self.result_dtype).view(len(call.q_index), len(call.t_index))
        return score.to(self.result_dtype).view(len(call.t_index), len(call.q_index)).T


def _job(queries, targets, *, orient: bool = True, in_flight: Optional[int] = None,
         half_scores: Optional[bool] = None, **options) -> _Job:
    """search()'s prepared job for `options` (search()'s keyword arguments;
    its defaults for the others), with `orient`, `in_flight` and
    `half_scores` as in :func:`_prepare`: for tests and measurements."""
    bound = inspect.signature(search).bind(queries, targets, **options)
    bound.apply_defaults()
    return _prepare(**bound.arguments, orient=orient, in_flight=in_flight,
                    half_scores=half_scores)


def _part(recorder, name: str):
    """The recorder's timer around one part of a call (dev/search_profile.py)."""
    return recorder.part(name) if recorder is not None else contextlib.nullcontext()


def _stream_context(stream):
    return torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()


def _prepare(queries, targets, *, matrix, similarity, gap_open, gap_extend, temperature,
             reduction, top, alignments, device, dtype, memory_budget, batch_cells, unknown,
             progress, process_group, orient: bool = True, in_flight: Optional[int] = None,
             half_scores: Optional[bool] = None) -> _Job:
    """Checks search()'s arguments and plans its kernel calls. `orient`,
    `in_flight` (default: 2 on CUDA, 1 on the CPU) and `half_scores`
    (default: on CUDA, see _HALF_SCORES) are for tests and measurements."""
    if device is None:
        device = torch.device("cuda", torch.cuda.current_device()) \
            if torch.cuda.is_available() else torch.device("cpu")
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    for name, value in (("gap_open", gap_open), ("gap_extend", gap_extend)):
        if value is not None and (isinstance(value, bool) or
                                  not isinstance(value, (int, float))):
            raise TypeError(f"softsw.search: `{name}` must be a Python number")
    if top is not None and (isinstance(top, bool) or not isinstance(top, int) or top < 1):
        raise ValueError(f"softsw.search: `top` must be a positive int or None, got {top!r}")
    if similarity not in ("dot", "cosine"):
        raise ValueError(f"softsw.search: `similarity` must be 'dot' or 'cosine', "
                         f"got {similarity!r}")
    gap_open = float(gap_open)
    gap_extend = None if gap_extend is None else float(gap_extend)

    sub = scoring.as_matrix(matrix)
    q_set = _Set(queries, "queries", sub, unknown, device)
    t_set = _Set(targets, "targets", sub, unknown, device)
    if len(q_set) and len(t_set) and q_set.embedded != t_set.embedded:
        raise TypeError("softsw.search: `queries` and `targets` must both be sequences or "
                        "both be embeddings")
    embedded = q_set.embedded or t_set.embedded
    if embedded:
        dims = {x.embeddings[0].shape[1] for x in (q_set, t_set) if len(x)}
        if len(dims) > 1:
            raise ValueError(f"softsw.search: queries and targets have different embedding "
                             f"sizes D: {sorted(dims)}")
    if dtype is None:
        dtype = q_set.embeddings[0].dtype if embedded and len(q_set) else torch.float32
    if alignments and (temperature != 0 or embedded):
        raise ValueError("softsw.search: `alignments=True` needs hard mode (temperature=0) "
                         "and sequences (it returns aligned strings)")
    sub_scores = None if embedded else sub.scores.to(device=device, dtype=dtype)
    kernel = _scorer(gap_open, gap_extend, temperature, reduction)  # checks temperature
    call_matrix = sub_scores
    if half_scores is None:
        half_scores = _HALF_SCORES and device.type == "cuda"
    if half_scores and sub_scores is not None and dtype == torch.float32 and \
            (temperature == 0 or temperature >= _HALF_MIN_TEMPERATURE):
        half = sub_scores.to(torch.float16)
        if torch.equal(half.to(dtype), sub_scores):
            call_matrix = half
    if batch_cells is not None and (isinstance(batch_cells, bool) or
                                    not isinstance(batch_cells, int) or batch_cells < 1):
        raise ValueError(f"softsw.search: `batch_cells` must be a positive int, "
                         f"got {batch_cells!r}")
    budget = _budget_bytes(memory_budget, device)
    if in_flight is None:
        in_flight = 2 if device.type == "cuda" else 1
    n_q, n_t = len(q_set), len(t_set)
    k = None if top is None else min(top, n_t)
    result_dtype = torch.float64 if dtype == torch.float64 else torch.float32
    if embedded:
        footprint = _footprint(dtype, 0, dims.pop(), similarity == "cosine")
    else:
        footprint = _footprint(call_matrix.dtype, len(sub.alphabet))
    call_bytes = max(0, budget - _resident_bytes(q_set, t_set, k, result_dtype)) // in_flight
    cells = _MAX_CALL_CELLS if batch_cells is None else min(_MAX_CALL_CELLS, batch_cells)

    group, rank, world = _group(process_group)
    if world > 1:  # one plan on every rank
        cells, call_bytes = _smallest(group, [cells, call_bytes], device)
    calls = _plan(q_set, t_set, cells, footprint, call_bytes, orient) if n_q and n_t else []
    mine = _largest_first(_share(calls, rank, world) if world > 1 else calls, in_flight)
    return _Job(q_set, t_set, sub_scores, call_matrix, similarity, kernel, device, dtype,
                result_dtype, k, mine, in_flight, call_bytes, cells, group, rank, world,
                progress, alignments, (gap_open, gap_extend), reduction, footprint)


def _run(job: _Job, recorder=None) -> SearchResult:
    """Runs the job's kernel calls and returns what search() returns.

    On CUDA, call i runs on stream i mod `in_flight`: while one call's kernel
    runs, the next call's score matrices are built and its kernel is queued,
    so the device never waits for the host nor idles through a kernel's last
    wave. Nothing here waits for the device (no copy to or from the host,
    no .item()): the host runs ahead. The top-k merges run in call order (each
    waits for the previous one); their result does not depend on the order.
    `recorder` (dev/search_profile.py) times the parts of each call."""
    q_set, t_set, device, k = job.q_set, job.t_set, job.device, job.k
    n_q, n_t = len(q_set), len(t_set)
    # Results in sorted query (and target) order: a call's rows are a slice.
    if k is None:
        full = torch.zeros(n_q, n_t, dtype=job.result_dtype, device=device)
        filled = torch.zeros(n_q, n_t, dtype=torch.bool, device=device)
    else:
        best_s = torch.full((n_q, k), -math.inf, dtype=job.result_dtype, device=device)
        best_i = torch.full((n_q, k), -1, dtype=torch.int64, device=device)

    main = torch.cuda.current_stream(device) if device.type == "cuda" else None
    streams = [main]
    if main is not None:
        streams += [torch.cuda.Stream(device) for _ in range(job.in_flight - 1)]
        for stream in streams[1:]:
            stream.wait_stream(main)  # the sets and results above are ready
    bar = _progress_bar(sum(c.cells for c in job.calls),
                        job.progress if job.rank == 0 else False)
    queued = collections.deque()  # (event, cells) not yet counted by the bar
    merged = None                 # the last merge's event
    buffers = []                  # each stream's score-matrix buffer
    for i, stream in enumerate(streams):
        with _stream_context(stream):
            buffers.append(job.buffer(job.calls[i::len(streams)]))
    try:
        for i, call in enumerate(job.calls):
            stream = streams[i % len(streams)]
            with _stream_context(stream):
                score = job.call_scores(call, recorder, buffers[i % len(streams)])
                if merged is not None:
                    stream.wait_event(merged)
                (q0, q1), (t0, t1) = call.q_span, call.t_span
                with _part(recorder, "topk"):
                    if k is None:
                        full[q0:q1, t0:t1] = score
                        filled[q0:q1, t0:t1] = True
                    else:
                        hits = t_set.sorted_index[t0:t1].expand(q1 - q0, t1 - t0)
                        best_s[q0:q1], best_i[q0:q1] = _best(
                            torch.cat([best_s[q0:q1], score], 1),
                            torch.cat([best_i[q0:q1], hits], 1), k)
                if stream is not None:
                    merged = torch.cuda.Event()
                    merged.record(stream)
            del score
            if bar is not None:
                if stream is None:
                    bar.update(call.cells)
                    continue
                queued.append((merged, call.cells))
                while queued and queued[0][0].query():
                    bar.update(queued.popleft()[1])
        for stream in streams[1:]:
            main.wait_stream(stream)
        if k is None:
            scores, index = _unsorted_full(job, full, filled), None
        else:
            scores, index = _unsorted_best(job, best_s, best_i)
        if bar is not None:  # the copies to the host above waited for the device
            bar.update(sum(cells for _, cells in queued))
    finally:
        if bar is not None:
            bar.close()
    found = _hit_alignments(job, scores, index) if job.alignments else None
    return SearchResult(scores, index, found)


def _unsorted_full(job: _Job, full, filled) -> torch.Tensor:
    """The (sorted queries, sorted targets) matrix in the callers' order (item
    i sits at rank[i] in the sorted order), gathered over the ranks, on the CPU."""
    q_rank, t_rank = job.q_set.rank.to(job.device), job.t_set.rank.to(job.device)
    full = full.index_select(0, q_rank).index_select(1, t_rank)
    if job.world > 1:
        filled = filled.index_select(0, q_rank).index_select(1, t_rank)
        full = _gather_full(job.group, full, filled, job.device)
    return full.cpu()


def _unsorted_best(job: _Job, best_s, best_i) -> Tuple[torch.Tensor, torch.Tensor]:
    """The top-k of the sorted queries in the callers' order, merged over the
    ranks, on the CPU."""
    q_rank = job.q_set.rank.to(job.device)
    best_s, best_i = best_s.index_select(0, q_rank), best_i.index_select(0, q_rank)
    if job.world > 1:
        best_s, best_i = _gather_best(job.group, job.world, best_s, best_i, job.k, job.device)
    return best_s.cpu(), best_i.cpu()


def _hit_alignments(job: _Job, best_s, best_i) -> List[List[Alignment]]:
    n_q, k = best_s.shape
    hits = [(q, r) for q in range(n_q) for r in range(k)]
    mine = hits[job.rank::job.world]
    gap_open, gap_extend = job.gaps
    done = _alignments(job.q_set, job.t_set, [q for q, _ in mine],
                       [int(best_i[q, r]) for q, r in mine], [float(best_s[q, r]) for q, r in mine],
                       job.matrix, gap_open, gap_extend, job.reduction, job.device, job.dtype,
                       job.batch_cells, job.call_bytes * job.in_flight)
    if job.world > 1:
        import torch.distributed as dist
        parts = [None] * job.world
        dist.all_gather_object(parts, done, group=job.group)
        done = [None] * len(hits)
        for r, part in enumerate(parts):
            done[r::job.world] = part
    table = [[None] * k for _ in range(n_q)]
    for (q, r), found in zip(hits, done):
        table[q][r] = found
    return table


# --------------------------------------------------------------------------
# The command line: softsw search QUERIES.fasta TARGETS.fasta ...
# --------------------------------------------------------------------------

TSV_COLUMNS = ("query", "target", "score", "pident", "length", "identities",
               "qstart", "qend", "tstart", "tend", "qlen", "tlen")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="softsw search",
        description="Score every query against every target with (soft) Smith-Waterman; "
                    "write each query's best hits as a tab-separated table (BLAST-tabular "
                    "style: query, target, score, percent identity, alignment length, "
                    "identities, 1-based inclusive coordinates, sequence lengths).",
        epilog="Gap scores are added: a gap of length k scores GAP_OPEN + (k-1)*GAP_EXTEND "
               "(BLAST's -gapopen 11 -gapextend 1 is --gap-open -12 --gap-extend -1). With "
               "--temperature > 0 the scores are soft and the coordinate columns are '.'. "
               "Under torchrun the work is shared among the processes; rank 0 writes.")
    p.add_argument("queries", help="FASTA file of query sequences")
    p.add_argument("targets", help="FASTA file of target sequences")
    p.add_argument("--matrix", default="BLOSUM62",
                   help="substitution matrix name or NCBI-format file (default BLOSUM62)")
    p.add_argument("--gap-open", type=float, default=-11.0, help="default -11")
    p.add_argument("--gap-extend", type=float, default=-1.0, help="default -1")
    p.add_argument("--temperature", type=float, default=0.0,
                   help="0 (default): hard Smith-Waterman; > 0: soft")
    p.add_argument("--top", type=int, default=10, help="hits per query (default 10)")
    p.add_argument("-o", "--output", default="-", help="output file (default: stdout)")
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:1 (default: cuda if "
                   "available)")
    p.add_argument("--batch-cells", type=int, default=None,
                   help="at most this many padded DP cells per kernel call")
    p.add_argument("--memory-budget", type=float, default=None,
                   help="bytes (> 1) or a fraction of free device memory (<= 1); default "
                        f"{DEFAULT_MEMORY_FRACTION}")
    p.add_argument("--unknown", default=None,
                   help="score letters outside the matrix's alphabet as this symbol (e.g. X)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def _join_torchrun(device: Optional[str]) -> bool:
    """Under torchrun (WORLD_SIZE > 1 in the environment), joins the default
    process group: NCCL on one GPU per local rank, gloo on the CPU. True if
    this call started it."""
    import torch.distributed as dist
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or dist.is_initialized():
        return False
    on_gpu = torch.cuda.is_available() and (device is None or device.startswith("cuda"))
    if on_gpu and device is None:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl" if on_gpu else "gloo")
    return True


def _fmt(value: float) -> str:
    return f"{value:.6g}"


def main(argv: Optional[Sequence[str]] = None) -> int:
    from .fasta import FastaError, read_fasta
    args = _parser().parse_args(argv)
    try:
        queries = read_fasta(args.queries)
        targets = read_fasta(args.targets)
    except (OSError, FastaError) as err:
        print(f"softsw search: error: {err}", file=sys.stderr)
        return 2
    budget = args.memory_budget
    if budget is not None and budget > 1:
        budget = int(budget)
    hard = args.temperature == 0
    device = args.device
    started = _join_torchrun(device)
    if started and device is None and torch.cuda.is_available():
        device = f"cuda:{torch.cuda.current_device()}"
    try:
        result = search([r.sequence for r in queries], [r.sequence for r in targets],
                        matrix=args.matrix, gap_open=args.gap_open,
                        gap_extend=args.gap_extend, temperature=args.temperature,
                        top=args.top, alignments=hard, device=device,
                        memory_budget=budget, batch_cells=args.batch_cells,
                        unknown=args.unknown, progress=False if args.no_progress else None)
    except (ValueError, TypeError, ImportError) as err:
        print(f"softsw search: error: {err}", file=sys.stderr)
        return 2
    finally:
        if started:
            import torch.distributed as dist
            rank = dist.get_rank()
            dist.destroy_process_group()
    if started and rank != 0:
        return 0  # rank 0 writes
    out = sys.stdout if args.output == "-" else open(args.output, "w", encoding="utf-8")
    try:
        out.write("# " + "\t".join(TSV_COLUMNS) + "\n")
        for q, t, score, found in result.hits():
            qlen, tlen = len(queries[q].sequence), len(targets[t].sequence)
            if found is not None:
                cols = [f"{100.0 * found.identity:.2f}", str(found.length),
                        str(found.identities), str(found.query_start + 1), str(found.query_end),
                        str(found.target_start + 1), str(found.target_end)]
            else:
                cols = ["."] * 7
            out.write("\t".join([queries[q].name, targets[t].name, _fmt(score)] + cols +
                                [str(qlen), str(tlen)]) + "\n")
    finally:
        if out is not sys.stdout:
            out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
