"""The ``softsw`` command: one entry point for softsw's command-line tools.

    softsw demo [OPTIONS]     align two protein sequences (python -m softsw.demo)
    softsw info [--json]      how this softsw was built, and the GPUs it sees
    softsw bench [OPTIONS]    benchmark softsw against its baselines
    softsw search Q.fasta T.fasta [OPTIONS]   all-against-all search, best hits as a table
    softsw SUBCOMMAND --help  the options of one subcommand

Each subcommand is a module with a ``main(argv) -> int``; adding one is one entry in
``SUBCOMMANDS``. Modules are imported only when their subcommand runs.
"""
from __future__ import annotations

import importlib
import sys
from typing import Dict, Optional, Sequence, Tuple

# name -> (module whose main(argv) runs it, one line for the overview)
SUBCOMMANDS: Dict[str, Tuple[str, str]] = {
    "demo": ("softsw.demo", "align two protein sequences: hard and soft scores, the "
                            "optimal alignment, the expected alignment (--plot FILE.png)"),
    "info": ("softsw.info.__main__", "how this softsw was built, and whether it fits the "
                                     "torch and GPUs here"),
    "bench": ("softsw.bench", "benchmark softsw against its baselines"),
    "search": ("softsw.seqsearch", "score every query of a FASTA file against every target "
                                   "of another; write the best hits as a table"),
}


def usage() -> str:
    width = max(len(name) for name in SUBCOMMANDS)
    lines = ["usage: softsw SUBCOMMAND [OPTIONS]", "",
             "Differentiable (soft) Smith-Waterman local alignment for PyTorch.", "",
             "subcommands:"]
    lines += [f"  {name:<{width}}  {text}" for name, (_, text) in SUBCOMMANDS.items()]
    lines += ["", "softsw SUBCOMMAND --help lists the options of one subcommand; "
              "softsw --version prints the version."]
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    if args[0] == "--version":
        from softsw import __version__
        print(f"softsw {__version__}")
        return 0
    name, rest = args[0], args[1:]
    if name not in SUBCOMMANDS:
        print(usage(), file=sys.stderr)
        print(f"\nsoftsw: error: unknown subcommand {name!r} (choose from "
              f"{', '.join(SUBCOMMANDS)})", file=sys.stderr)
        return 2
    module = importlib.import_module(SUBCOMMANDS[name][0])
    return module.main(rest)


if __name__ == "__main__":
    sys.exit(main())
