"""The experiments of docs/: ``python3 -m benchmarks --experiment NAME``, each a run list on the one
runner plus one table (or, for the two that train nothing, a short measurement)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Tuple

from benchmarks.options import Options
from benchmarks.runs import PRESETS


def out_dir(opts: Options, name: str) -> Path:
    """``--out``, or ``bench_out/<name>`` when it is left at the benchmark's default."""
    return Path(f"bench_out/{name}" if opts.out == "bench_out" else opts.out).resolve()


def seeds_epochs(opts: Options) -> Tuple[List[int], int]:
    """The seeds and the equal-epoch budget: the flags, else the preset's."""
    preset = PRESETS[opts.preset]
    return list(opts.seeds or preset.seeds), opts.epochs or preset.epochs


def write_table(out: Path, command: str, text: str) -> str:
    """``<out>/table.md``: the command as a comment line, then ``text``; printed too."""
    md = f"<!-- {command} -->\n\n{text.rstrip()}\n"
    out.mkdir(parents=True, exist_ok=True)
    (out / "table.md").write_text(md)
    print(md + f"\nWrote {out / 'table.md'}")
    return md
