"""Score matrices from sequences: the input that :func:`softsw.align` takes.

``softsw.align`` works on a matrix of substitution scores ``S[i, j]`` (query
position ``i`` against target position ``j``). This module builds ``S`` from
sequences and a substitution matrix such as BLOSUM62::

    import softsw
    from softsw.scoring import score_matrix, score_matrices

    S = score_matrix("HEAGAWGHEE", "PAWHEAE")                   # (10, 7) float32
    best = softsw.align(S, gap_open=-4.0, temperature=0)        # hard SW score

    S, lengths = score_matrices(["HEAGAWGHEE", "PAW"],          # batched, padded
                                ["PAWHEAE", "HEAGAW"], device="cuda")
    soft = softsw.align(S, gap_open=-4.0, temperature=1.0, lengths=lengths)

Substitution matrices (the ``matrix`` argument of every function here):

* a **name**, e.g. ``"BLOSUM62"``, ``"PAM250"``, ``"BLOSUM45"``: loaded with
  Biopython's ``Bio.Align.substitution_matrices.load(name)`` when Biopython is
  installed, so every matrix Biopython ships can be named (see
  :func:`available_matrices`; names are matched case-insensitively). A copy of
  BLOSUM62 ships with softsw, so ``"BLOSUM62"`` works without Biopython.
* a **file** (a ``pathlib.Path``, or a string containing a path separator) in
  the NCBI text format: ``#`` comment lines, a header line of column letters,
  then one line per row letter followed by its scores.
* a :class:`SubstitutionMatrix`, a Biopython ``substitution_matrices.Array``,
  or a pair ``(alphabet, scores)``: a string of one-letter symbols and a
  ``(K, K)`` tensor, NumPy array or nested list. A tensor given this way is
  used as is (moved to the requested device and dtype), so a learned
  substitution matrix receives gradients through the score matrices.

Letters are matched case-insensitively (``"a"`` scores as ``"A"``) unless the
alphabet itself has both cases of a letter.

**Unknown letters.** A letter that is not in the matrix's alphabet raises a
``ValueError`` naming the letter, its position and the sequence. Pass
``unknown="X"`` (or any other symbol of the alphabet) to score every unknown
letter as that symbol instead; BLOSUM62 and PAM250 both have ``X``.

The tensor-level pieces, for pipelines that keep sequences as token tensors
on the GPU: :func:`encode` (strings to tokens) and :func:`scores_from_tokens`
(tokens to score matrices by indexing into the substitution matrix; runs on
any device and is differentiable with respect to the matrix).
"""
from __future__ import annotations

import functools
import os
import pathlib
from typing import Any, List, NamedTuple, Optional, Sequence, Tuple, Union

import torch

__all__ = [
    "SubstitutionMatrix",
    "available_matrices",
    "load_matrix",
    "as_matrix",
    "encode",
    "scores_from_tokens",
    "score_matrix",
    "score_matrices",
]

#: The padding token that :func:`encode` writes after the end of a shorter
#: sequence; :func:`scores_from_tokens` treats every negative token as padding.
PAD_TOKEN = -1

_SHIPPED = {"BLOSUM62": "BLOSUM62"}  # matrix name -> file in softsw/data


class SubstitutionMatrix(NamedTuple):
    """A substitution matrix: ``scores[a, b]`` scores symbol ``alphabet[a]``
    (query) against symbol ``alphabet[b]`` (target).

    Attributes:
        alphabet: the one-character symbols, in the order of the rows and
            columns of ``scores``, e.g. ``"ARNDCQEGHILKMFPSTWYVBZX*"``.
        scores: a ``(K, K)`` floating-point tensor, ``K = len(alphabet)``.
        name: where it came from (``"BLOSUM62"``, a file path), or ``None``.

    Unpacks as ``alphabet, scores, name = matrix``.
    """

    alphabet: str
    scores: torch.Tensor
    name: Optional[str] = None

    def __repr__(self) -> str:
        label = f"{self.name!r}, " if self.name else ""
        return (f"SubstitutionMatrix({label}alphabet={self.alphabet!r}, "
                f"scores={tuple(self.scores.shape)} {self.scores.dtype})")

    def score(self, a: str, b: str) -> float:
        """The score of symbol ``a`` against symbol ``b`` (a Python float)."""
        table = _lookup_table(self.alphabet)
        ia, ib = (int(table[ord(c)]) if len(c) == 1 and ord(c) < 128 else -1 for c in (a, b))
        for c, i in ((a, ia), (b, ib)):
            if i < 0:
                raise ValueError(f"softsw.scoring: {c!r} is not in the alphabet {self.alphabet!r}")
        return float(self.scores[ia, ib])


# --------------------------------------------------------------------------
# Loading matrices.
# --------------------------------------------------------------------------


def _biopython():
    try:
        from Bio.Align import substitution_matrices
    except ImportError:
        return None
    return substitution_matrices


@functools.lru_cache(maxsize=None)
def _available() -> Tuple[str, ...]:
    names = set(_SHIPPED)
    sm = _biopython()
    if sm is not None:
        names.update(sm.load())
    return tuple(sorted(names))


@functools.lru_cache(maxsize=None)
def _matrix_names() -> frozenset:
    return frozenset(n.upper() for n in _available())


def available_matrices() -> List[str]:
    """Names that ``matrix=`` accepts: Biopython's matrices if Biopython is
    installed, plus the BLOSUM62 copy that ships with softsw."""
    return list(_available())


def parse_ncbi(text: str, name: Optional[str] = None) -> SubstitutionMatrix:
    """Parse a substitution matrix in the NCBI text format.

    Lines starting with ``#`` are comments; the first other line lists the
    column symbols; each following line is a row symbol and its scores. Rows
    may come in any order but must cover the same symbols as the columns.
    """
    rows = [line.split() for line in text.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]
    where = f" in {name}" if name else ""
    if not rows:
        raise ValueError(f"softsw.scoring: no matrix found{where}")
    columns = rows[0]
    values = {}
    for fields in rows[1:]:
        symbol, numbers = fields[0], fields[1:]
        if len(numbers) != len(columns):
            raise ValueError(f"softsw.scoring: row {symbol!r}{where} has {len(numbers)} "
                             f"scores, expected {len(columns)}")
        if symbol in values:
            raise ValueError(f"softsw.scoring: row {symbol!r}{where} appears twice")
        try:
            values[symbol] = [float(x) for x in numbers]
        except ValueError:
            raise ValueError(f"softsw.scoring: row {symbol!r}{where} has a score that is not "
                             f"a number") from None
    if sorted(values) != sorted(columns):
        raise ValueError(f"softsw.scoring: the row symbols{where} ({''.join(values)}) do not "
                         f"match the column symbols ({''.join(columns)})")
    return _make_matrix(columns, torch.tensor([values[s] for s in columns], dtype=torch.float64),
                        name)


@functools.lru_cache(maxsize=None)
def _load_cached(name: str) -> SubstitutionMatrix:
    sm = _biopython()
    if sm is not None:
        known = {n.upper(): n for n in sm.load()}
        if name.upper() in known:
            return as_matrix(sm.load(known[name.upper()]), name=known[name.upper()])
    if name.upper() in _SHIPPED:
        from importlib import resources
        text = (resources.files("softsw") / "data" / _SHIPPED[name.upper()]).read_text()
        return parse_ncbi(text, name=name.upper())
    if sm is None:
        raise ValueError(
            f"softsw.scoring: unknown substitution matrix {name!r}: without Biopython only "
            f"{', '.join(sorted(_SHIPPED))} is available (pip install biopython for "
            f"PAM250, BLOSUM45, ...; or pass a file path or an (alphabet, scores) pair)")
    raise ValueError(f"softsw.scoring: unknown substitution matrix {name!r}; known: "
                     f"{', '.join(available_matrices())}")


def load_matrix(name: Union[str, os.PathLike] = "BLOSUM62") -> SubstitutionMatrix:
    """Load a substitution matrix by name (``"BLOSUM62"``, ``"PAM250"``, ...)
    or from a file in the NCBI text format.

    Names go to Biopython (``Bio.Align.substitution_matrices.load``) when it
    is installed; ``"BLOSUM62"`` also works without it, from the copy that
    ships with softsw. Returns a :class:`SubstitutionMatrix` with float64
    CPU scores (a fresh copy: changing it does not change later loads).
    """
    if isinstance(name, os.PathLike) or (isinstance(name, str) and os.sep in name):
        path = pathlib.Path(name)
        return parse_ncbi(path.read_text(), name=str(path))
    if not isinstance(name, str):
        raise TypeError(f"softsw.scoring: a matrix name must be a string, got "
                        f"{type(name).__name__}")
    m = _load_cached(name)
    return m._replace(scores=m.scores.clone())


def _make_matrix(alphabet: Any, scores: Any, name: Optional[str]) -> SubstitutionMatrix:
    if isinstance(alphabet, str):
        symbols = list(alphabet)
    else:
        symbols = list(alphabet)
        if not all(isinstance(s, str) and len(s) == 1 for s in symbols):
            shown = repr(alphabet)
            shown = shown if len(shown) <= 60 else shown[:56] + " ..."
            label = f" of {name}" if name else ""
            raise ValueError(f"softsw.scoring: the alphabet{label} must consist of "
                             f"one-character symbols, got {shown}")
    if any(ord(s) >= 128 or s.isspace() for s in symbols):
        raise ValueError(f"softsw.scoring: alphabet symbols must be printable ASCII, got "
                         f"{''.join(symbols)!r}")
    if len(set(symbols)) != len(symbols):
        raise ValueError(f"softsw.scoring: the alphabet {''.join(symbols)!r} repeats a symbol")
    if isinstance(scores, torch.Tensor):
        values = scores
    else:
        values = torch.as_tensor(scores)
    if not values.dtype.is_floating_point:
        if values.dtype.is_complex or values.dtype == torch.bool:
            raise TypeError(f"softsw.scoring: substitution scores must be real numbers, "
                            f"got {values.dtype}")
        values = values.to(torch.float64)
    k = len(symbols)
    if tuple(values.shape) != (k, k):
        raise ValueError(f"softsw.scoring: an alphabet of {k} symbols needs a ({k}, {k}) "
                         f"score matrix, got {tuple(values.shape)}")
    return SubstitutionMatrix("".join(symbols), values, name)


def as_matrix(matrix: Any = "BLOSUM62", *, name: Optional[str] = None) -> SubstitutionMatrix:
    """Turn any accepted ``matrix=`` argument into a :class:`SubstitutionMatrix`.

    Accepts a name or a file path (see :func:`load_matrix`), a
    :class:`SubstitutionMatrix`, a Biopython ``substitution_matrices.Array``,
    or a pair ``(alphabet, scores)`` with a ``(K, K)`` tensor, NumPy array or
    nested list. Tensors are kept as they are (device, dtype, autograd).
    """
    if isinstance(matrix, SubstitutionMatrix):
        return matrix
    if isinstance(matrix, (str, os.PathLike)):
        return load_matrix(matrix)
    alphabet = getattr(matrix, "alphabet", None)
    if alphabet is not None and getattr(matrix, "ndim", None) == 2:  # Biopython Array
        import numpy as np
        return _make_matrix(alphabet, torch.from_numpy(np.array(matrix, dtype=np.float64)), name)
    if isinstance(matrix, (tuple, list)) and len(matrix) == 2:
        return _make_matrix(matrix[0], matrix[1], name)
    raise TypeError(
        "softsw.scoring: `matrix` must be a name such as 'BLOSUM62', a file path, a "
        "SubstitutionMatrix, a Biopython substitution matrix, or an (alphabet, scores) pair; "
        f"got {type(matrix).__name__}")


# --------------------------------------------------------------------------
# Encoding sequences.
# --------------------------------------------------------------------------


@functools.lru_cache(maxsize=64)
def _lookup_table(alphabet: str) -> torch.Tensor:
    """(256,) int64: byte -> index in the alphabet, -1 where absent."""
    table = torch.full((256,), -1, dtype=torch.int64)
    both_cases = any(c.isalpha() and c.swapcase() in alphabet and c.swapcase() != c
                     for c in alphabet)
    for i, c in enumerate(alphabet):
        table[ord(c)] = i
    if not both_cases:
        for i, c in enumerate(alphabet):
            other = c.swapcase()
            if other != c and len(other) == 1 and ord(other) < 128:
                table[ord(other)] = i
    return table


def _alphabet_of(alphabet: Any) -> str:
    if isinstance(alphabet, str) and alphabet.upper() not in _matrix_names() \
            and os.sep not in alphabet:
        symbols = list(alphabet)
        if not symbols:
            raise ValueError("softsw.scoring: the alphabet is empty")
        return _make_matrix(symbols, torch.zeros(len(symbols), len(symbols)), None).alphabet
    return as_matrix(alphabet).alphabet


def _as_string(seq: Any, what: str) -> str:
    if isinstance(seq, str):
        return seq
    if isinstance(seq, (bytes, bytearray)):
        return seq.decode("ascii", errors="replace")
    if isinstance(seq, torch.Tensor) or not hasattr(seq, "__str__"):
        raise TypeError(f"softsw.scoring: {what} must be a string, got {type(seq).__name__}")
    return str(seq)  # Bio.Seq.Seq and the like


def _unknown_index(unknown: Optional[str], alphabet: str) -> int:
    if unknown is None:
        return -1
    table = _lookup_table(alphabet)
    if not isinstance(unknown, str) or len(unknown) != 1 or ord(unknown) >= 128 \
            or int(table[ord(unknown)]) < 0:
        raise ValueError(f"softsw.scoring: `unknown` must be a symbol of the alphabet "
                         f"{alphabet!r}, got {unknown!r}")
    return int(table[ord(unknown)])


def encode(seqs: Union[str, Sequence[str]], alphabet: Union[str, Any], *,
           unknown: Optional[str] = None, device: Optional[Union[str, torch.device]] = None,
           what: str = "sequence") -> Tuple[torch.Tensor, torch.Tensor]:
    """Encode sequences as integer tokens (indices into ``alphabet``).

    Args:
        seqs: one string, or a list of strings (``Bio.Seq.Seq`` objects work too).
        alphabet: a string of one-character symbols (``"ACGT"``), or anything
            ``matrix=`` accepts, whose alphabet is then used: a string that is a
            matrix name (``"BLOSUM62"``, see :func:`available_matrices`) counts
            as the name.
        unknown: ``None`` to reject letters outside the alphabet with a
            ``ValueError``; or a symbol of the alphabet (e.g. ``"X"``) that
            unknown letters are encoded as.
        device: where the returned tensors go (the encoding runs on the CPU).
        what: how error messages name the sequences (``"query"``, ...).

    Returns:
        ``(tokens, lengths)``: for a list of ``B`` strings, ``tokens`` is an int64
        ``(B, L_max)`` tensor padded with ``-1`` after each sequence's end and
        ``lengths`` an int64 ``(B,)`` tensor; for one string, ``(L,)`` tokens and
        a 0-d length.
    """
    alphabet = _alphabet_of(alphabet)
    single = isinstance(seqs, str)
    if single:
        items = [seqs]
    else:
        if isinstance(seqs, torch.Tensor) or not hasattr(seqs, "__iter__"):
            raise TypeError(f"softsw.scoring: expected a string or a list of strings, got "
                            f"{type(seqs).__name__}")
        items = [_as_string(s, f"{what} {b}") for b, s in enumerate(seqs)]
    table = _lookup_table(alphabet)
    fallback = _unknown_index(unknown, alphabet)

    encoded = []
    for b, s in enumerate(items):
        try:
            encoded.append(s.encode("ascii"))
        except UnicodeEncodeError as err:
            if fallback < 0:
                pos = err.start
                raise ValueError(_unknown_message(s[pos], pos, b, single, what, alphabet)) from None
            encoded.append("".join(c if ord(c) < 128 else "\0" for c in s).encode("ascii"))
    lengths = torch.tensor([len(e) for e in encoded], dtype=torch.int64)
    width = int(lengths.max()) if len(encoded) else 0
    flat = b"".join(encoded)
    if flat:
        codes = table[torch.frombuffer(bytearray(flat), dtype=torch.uint8).to(torch.int64)]
    else:
        codes = torch.empty(0, dtype=torch.int64)
    bad = codes < 0
    if bool(bad.any()):
        if fallback < 0:
            first = int(bad.nonzero()[0, 0])
            ends = torch.cumsum(lengths, 0)
            b = int(torch.searchsorted(ends, torch.tensor(first), right=True))
            pos = first - int(ends[b] - lengths[b])
            raise ValueError(_unknown_message(items[b][pos], pos, b, single, what, alphabet))
        codes = torch.where(bad, torch.full_like(codes, fallback), codes)
    tokens = torch.full((len(encoded), width), PAD_TOKEN, dtype=torch.int64)
    if width:
        mask = torch.arange(width) < lengths[:, None]
        tokens[mask] = codes
    if single:
        tokens, lengths = tokens[0], lengths[0]
    if device is not None:
        tokens, lengths = tokens.to(device), lengths.to(device)
    return tokens, lengths


def _unknown_message(letter: str, pos: int, index: int, single: bool, what: str,
                     alphabet: str) -> str:
    which = what if single else f"{what} {index}"
    return (f"softsw.scoring: letter {letter!r} at position {pos} of {which} is not in the "
            f"substitution matrix's alphabet {alphabet!r}; to score unknown letters as a "
            f"symbol of the alphabet instead, pass unknown='X' (or another symbol)")


# --------------------------------------------------------------------------
# Score matrices.
# --------------------------------------------------------------------------


def _eager() -> bool:
    if torch.compiler.is_compiling():
        return False
    return not (torch.cuda.is_available() and torch.cuda.is_current_stream_capturing())


def scores_from_tokens(q_tokens: torch.Tensor, t_tokens: torch.Tensor,
                       matrix: Union[torch.Tensor, SubstitutionMatrix], *,
                       pad_value: float = 0.0) -> torch.Tensor:
    """Score matrices from token tensors: ``S[..., i, j] = matrix[q[..., i], t[..., j]]``.

    A gather from the ``(K, K)`` substitution matrix, so it runs wherever the
    tensors are (CPU or GPU, batched, under ``torch.compile``) and is
    differentiable with respect to ``matrix`` (a learned substitution matrix).

    Args:
        q_tokens: int tensor ``(..., M)`` of indices into the alphabet; negative
            entries are padding.
        t_tokens: int tensor ``(..., N)``, same leading shape as ``q_tokens``.
        matrix: ``(K, K)`` floating-point tensor on the tokens' device (or a
            :class:`SubstitutionMatrix`, moved there).
        pad_value: the score of every cell in a padding row or column. With
            ``lengths`` passed to :func:`softsw.align` it never matters.

    Returns:
        ``(..., M, N)`` scores in ``matrix``'s dtype.
    """
    if isinstance(matrix, SubstitutionMatrix):
        matrix = matrix.scores.to(q_tokens.device)
    for name, t in (("q_tokens", q_tokens), ("t_tokens", t_tokens)):
        if not isinstance(t, torch.Tensor) or t.dtype.is_floating_point or t.dtype.is_complex \
                or t.dtype == torch.bool:
            raise TypeError(f"softsw.scoring: `{name}` must be an integer tensor")
        if t.dim() < 1:
            raise ValueError(f"softsw.scoring: `{name}` must have at least one dimension")
    if not isinstance(matrix, torch.Tensor) or matrix.dim() != 2 \
            or matrix.shape[0] != matrix.shape[1]:
        raise ValueError("softsw.scoring: `matrix` must be a (K, K) tensor")
    if not matrix.dtype.is_floating_point:
        raise TypeError(f"softsw.scoring: `matrix` must be a floating-point tensor, "
                        f"got {matrix.dtype}")
    if q_tokens.shape[:-1] != t_tokens.shape[:-1]:
        raise ValueError(f"softsw.scoring: `q_tokens` {tuple(q_tokens.shape)} and `t_tokens` "
                         f"{tuple(t_tokens.shape)} must have the same leading dimensions")
    if not (q_tokens.device == t_tokens.device == matrix.device):
        raise ValueError(f"softsw.scoring: `q_tokens` ({q_tokens.device}), `t_tokens` "
                         f"({t_tokens.device}) and `matrix` ({matrix.device}) must be on one "
                         f"device")
    k = matrix.shape[0]
    if _eager():
        for name, t in (("q_tokens", q_tokens), ("t_tokens", t_tokens)):
            if t.numel() and int(t.max()) >= k:
                raise ValueError(f"softsw.scoring: `{name}` has a token >= K = {k}, the size "
                                 f"of the substitution matrix")
    q = q_tokens.to(torch.int64)
    t = t_tokens.to(torch.int64)
    qi = q.clamp(min=0).unsqueeze(-1)                 # (..., M, 1)
    ti = t.clamp(min=0).unsqueeze(-2)                 # (..., 1, N)
    scores = matrix.reshape(-1)[qi * k + ti]          # (..., M, N)
    pad = (q < 0).unsqueeze(-1) | (t < 0).unsqueeze(-2)
    return scores.masked_fill(pad, pad_value)


def _resolve(matrix: Any, device, dtype) -> SubstitutionMatrix:
    m = as_matrix(matrix)
    return m._replace(scores=m.scores.to(device=device, dtype=dtype))


def score_matrix(query: str, target: str, matrix: Any = "BLOSUM62", *,
                 unknown: Optional[str] = None, device: Optional[Union[str, torch.device]] = None,
                 dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The ``(M, N)`` score matrix of one query against one target.

    ``S[i, j]`` is the substitution score of ``query[i]`` against
    ``target[j]``: the input of :func:`softsw.align` for this pair.

    Args:
        query, target: sequences (strings, or ``Bio.Seq.Seq``).
        matrix: a name (``"BLOSUM62"``, ``"PAM250"``, ...), a file, a
            :class:`SubstitutionMatrix`, a Biopython matrix, or an
            ``(alphabet, scores)`` pair (see the module docstring).
        unknown: ``None`` (letters outside the alphabet raise ``ValueError``)
            or a symbol such as ``"X"`` to score them as.
        device, dtype: of the result (default: CPU, float32).
    """
    m = as_matrix(matrix)
    device = torch.device(device) if device is not None else m.scores.device
    m = _resolve(m, device, dtype)
    q, _ = encode(_as_string(query, "query"), m.alphabet, unknown=unknown, what="query")
    t, _ = encode(_as_string(target, "target"), m.alphabet, unknown=unknown, what="target")
    return scores_from_tokens(q.to(device), t.to(device), m.scores)


def score_matrices(queries: Sequence[str], targets: Sequence[str], matrix: Any = "BLOSUM62", *,
                   unknown: Optional[str] = None,
                   device: Optional[Union[str, torch.device]] = None,
                   dtype: torch.dtype = torch.float32,
                   pad_value: float = 0.0) -> Tuple[torch.Tensor, torch.Tensor]:
    """Batched, padded score matrices of ``queries[b]`` against ``targets[b]``.

    Args:
        queries, targets: equally long lists of sequences.
        matrix, unknown: as in :func:`score_matrix`.
        device, dtype: of the scores (default: CPU, float32).
        pad_value: score written in the padding (rows past a query's end,
            columns past a target's end); irrelevant once ``lengths`` is passed
            on to :func:`softsw.align`.

    Returns:
        ``(scores, lengths)``: ``scores`` is ``(B, M_max, N_max)``; ``lengths``
        is an int64 ``(B, 2)`` tensor of ``[len(queries[b]), len(targets[b])]``
        on the same device, ready for ``softsw.align(scores, ..., lengths=lengths)``.
    """
    if isinstance(queries, str) or isinstance(targets, str):
        raise TypeError("softsw.scoring: score_matrices takes lists of sequences; "
                        "use score_matrix for a single pair")
    queries, targets = list(queries), list(targets)
    if len(queries) != len(targets):
        raise ValueError(f"softsw.scoring: got {len(queries)} queries but {len(targets)} "
                         f"targets; pair them one to one")
    m = as_matrix(matrix)
    device = torch.device(device) if device is not None else m.scores.device
    m = _resolve(m, device, dtype)
    q, q_len = encode(queries, m.alphabet, unknown=unknown, what="query")
    t, t_len = encode(targets, m.alphabet, unknown=unknown, what="target")
    lengths = torch.stack([q_len, t_len], dim=1)
    if not queries:
        return torch.zeros((0, 0, 0), device=device, dtype=dtype), lengths.to(device)
    scores = scores_from_tokens(q.to(device), t.to(device), m.scores, pad_value=pad_value)
    return scores, lengths.to(device)
