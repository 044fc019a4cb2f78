"""A small, strict FASTA reader for protein and nucleotide sequences.

    from softsw.fasta import read_fasta
    records = read_fasta("queries.fasta")          # [FastaRecord(name, description, sequence)]

A record is a header line ``>NAME optional description`` followed by sequence
lines. Letters are upper-cased; ``*`` (a stop) is kept. Anything else --
sequence before the first header, an empty name, a record without sequence,
digits, alignment gaps (``-``, ``.``) -- raises :class:`FastaError`, which names
the file and the line.
"""
from __future__ import annotations

import os
import re
from typing import List, NamedTuple, Union

__all__ = ["FastaError", "FastaRecord", "read_fasta", "parse_fasta"]

# Residue letters and '*' (stop). Whitespace inside a line is ignored.
_INVALID = re.compile(r"[^A-Za-z*\s]")


class FastaError(ValueError):
    """Malformed FASTA input; the message starts with ``FILE:LINE:``."""


class FastaRecord(NamedTuple):
    name: str         # the header's first word
    description: str  # the rest of the header line (may be empty)
    sequence: str     # upper-case letters


def parse_fasta(text: str, source: str = "<string>") -> List[FastaRecord]:
    """Records of the FASTA ``text``; ``source`` names it in error messages."""
    records: List[FastaRecord] = []
    name = description = None
    header_line = 0
    parts: List[str] = []

    def close():
        if name is None:
            return
        if not parts:
            raise FastaError(f"{source}:{header_line}: record {name!r} has no sequence")
        records.append(FastaRecord(name, description, "".join(parts).upper()))

    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if stripped.startswith(">"):
            close()
            header = stripped[1:].strip()
            if not header:
                raise FastaError(f"{source}:{number}: header line without a name")
            fields = header.split(None, 1)
            name, description = fields[0], fields[1] if len(fields) > 1 else ""
            header_line, parts = number, []
        elif not stripped or stripped.startswith(";"):
            continue  # blank lines, and ';' comments of the old format
        elif name is None:
            raise FastaError(f"{source}:{number}: sequence data before the first '>' header "
                             f"(is this a FASTA file?)")
        else:
            bad = _INVALID.search(stripped)
            if bad:
                what = ("an alignment gap; give unaligned sequences"
                        if bad.group() in "-." else "not a residue letter")
                column = line.index(bad.group()) + 1
                raise FastaError(f"{source}:{number}: column {column}: {bad.group()!r} in "
                                 f"record {name!r} is {what}")
            parts.append("".join(stripped.split()))
    close()
    if not records:
        raise FastaError(f"{source}: no FASTA records (no line starts with '>')")
    return records


def read_fasta(path: Union[str, os.PathLike]) -> List[FastaRecord]:
    """Records of the FASTA file at ``path`` (see :func:`parse_fasta`)."""
    source = os.fspath(path)
    try:
        with open(source, encoding="utf-8") as handle:
            text = handle.read()
    except UnicodeDecodeError as err:
        raise FastaError(f"{source}: not a text file ({err.reason} at byte {err.start})") \
            from None
    return parse_fasta(text, source)
