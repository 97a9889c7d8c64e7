"""Part 5: ``attnce_bench.cost.bench_loss`` on the check's device, a trimmed grid.

CUDA: B = 256 / 1024 / 4096 images, M = 1 / 4 / 8 (the full grid of docs/performance.md minus
B = 64). Its tables go into the report unchanged; the summary gives our SimCLR-form loss over
solo-learn's ``simclr_loss_func`` and the MoCo form over ``mocov3_loss_func`` at M = 4. Fails when
one of the plugin's losses is not finite at the small temperature / d_neg the script tries.
"""

from __future__ import annotations

import re
import sys
from typing import Dict, List, Tuple

from attnce_bench.gpu_check.common import PartContext, check, part_main

_RATIO = re.compile(r"\*\*([\d.]+)x\*\*")


def bench_argv(ctx: PartContext) -> List[str]:
    if ctx.tiny:
        return [
            "--device",
            "cpu",
            "--batches",
            "16",
            "--views",
            "2",
            "--repeats",
            "2",
            "--dim",
            "16",
        ]
    if ctx.cuda:
        return ["--device", "cuda", "--batches", "256", "1024", "4096", "--views", "1", "4", "8"]
    return ["--device", "cpu", "--batches", "64", "256", "--views", "4", "--repeats", "5"]


def _section(lines: List[str], title: str) -> List[List[str]]:
    """Data rows (cells) of the first table after the heading that starts with ``title``."""
    rows: List[List[str]] = []
    inside = False
    for line in lines:
        if line.startswith("### "):
            if inside and rows:
                break
            inside = line.startswith(title)
            continue
        if inside and line.startswith("|") and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if cells and cells[0].isdigit():
                rows.append(cells)
    return rows


def parse(text: str) -> Dict[str, object]:
    """Time ratios per (B, M) and the finite-loss table from bench_loss's markdown."""
    lines = text.splitlines()
    simclr: Dict[Tuple[int, int], float] = {}
    for cells in _section(lines, "### SimCLR form: forward+backward time"):
        m = _RATIO.search(cells[6])
        if m:
            simclr[(int(cells[0]), int(cells[1]))] = float(m.group(1))
    moco: Dict[Tuple[int, int], float] = {}
    for cells in _section(lines, "### MoCo v3 form"):
        m = _RATIO.search(cells[4])
        if m:
            moco[(int(cells[0]), int(cells[1]))] = float(m.group(1))
    finite = {
        int(c[0]): {"ours": c[2] == "yes", "ours_moco": c[4] == "yes"}
        for c in _section(lines, "### Finite loss")
    }
    return {"simclr_ratio": simclr, "moco_ratio": moco, "finite": finite}


def run(ctx: PartContext) -> None:
    from attnce_bench.cost import bench_loss

    argv = bench_argv(ctx)
    table = ctx.out / "bench_loss.md"
    rc = bench_loss.main([*argv, "--out", str(table)])
    check(rc == 0, f"bench_loss exited with {rc}")
    text = table.read_text()
    ctx.emit(f"`python3 -m attnce_bench.cost.bench_loss {' '.join(argv)}`")
    ctx.emit()
    for line in text.splitlines():
        if not line.startswith("<!--"):
            ctx.emit(line)
    parsed = parse(text)
    simclr, moco = parsed["simclr_ratio"], parsed["moco_ratio"]
    ctx.data.update(
        {
            "simclr_ratio": {f"B={b},M={m}": r for (b, m), r in simclr.items()},
            "moco_ratio": {f"B={b},M={m}": r for (b, m), r in moco.items()},
            "finite": parsed["finite"],
        }
    )
    check(bool(simclr) and bool(moco), "could not read the time tables of bench_loss's output")
    views = sorted({m for _, m in simclr})
    m_key = 4 if 4 in views else views[-1]
    ctx.key = (
        f"ours/solo SimCLR at M={m_key}: "
        + ", ".join(f"B{b} {r:.2f}x" for (b, m), r in sorted(simclr.items()) if m == m_key)
        + "; MoCo form/solo: "
        + ", ".join(f"B{b} {r:.2f}x" for (b, m), r in sorted(moco.items()) if m == m_key)
    )
    bad = [
        f"B={b} {name}" for b, row in parsed["finite"].items() for name, ok in row.items() if not ok
    ]
    check(bool(parsed["finite"]), "no finite-loss table in bench_loss's output")
    check(not bad, f"not finite at small tau / d_neg: {', '.join(bad)}")


if __name__ == "__main__":
    sys.exit(part_main(run))
