"""What every part of the GPU check shares: its command line, its result files, markdown helpers.

A part is a module run as ``python -m attnce_bench.gpu_check.<part> --out DIR --device cuda|cpu
[--tiny] --deadline EPOCH --args JSON``. It writes ``DIR/result.json`` (status, one line of key
numbers, data) and ``DIR/section.md`` (its tables), also while it runs (:meth:`PartContext.save`),
so that the driver can still report what a part had done when its timeout killed it.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

OK, FAIL, SKIPPED, TIMEOUT, RUNNING = "ok", "FAIL", "skipped", "TIMEOUT", "running"


class CheckFailed(AssertionError):
    """A part's check did not hold (the message says which and by how much)."""


@dataclass
class PartContext:
    """What a part is given, and where it reports."""

    out: Path
    device: str
    tiny: bool
    deadline: float
    args: Dict[str, Any] = field(default_factory=dict)
    lines: List[str] = field(default_factory=list)
    data: Dict[str, Any] = field(default_factory=dict)
    key: str = ""

    @property
    def cuda(self) -> bool:
        return self.device == "cuda"

    def left(self) -> float:
        """Seconds until this part's deadline."""
        return self.deadline - time.time()

    def emit(self, text: str = "") -> None:
        """Add a line to the part's markdown section (and print it to the part's log)."""
        print(text, flush=True)
        self.lines.append(text)

    def table(self, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        """Emit a markdown table."""
        self.emit("| " + " | ".join(header) + " |")
        self.emit("|" + "---|" * len(header))
        for row in rows:
            self.emit("| " + " | ".join(str(c) for c in row) + " |")
        self.emit()

    def save(self, status: str = RUNNING) -> None:
        """Write result.json and section.md as they stand."""
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "section.md").write_text("\n".join(self.lines) + "\n")
        result = {"status": status, "key": self.key, "data": self.data}
        tmp = self.out / "result.json.tmp"
        tmp.write_text(json.dumps(result, indent=1, default=str) + "\n")
        tmp.replace(self.out / "result.json")


def part_main(run: Callable[[PartContext], None], argv: Optional[Sequence[str]] = None) -> int:
    """Command-line entry of a part: build the context, run, record ok / FAIL, return the exit code.

    ``run`` sets ``ctx.key`` and emits its tables; it raises :class:`CheckFailed` (or anything
    else) when the check does not hold.
    """
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", choices=["cuda", "cpu"], required=True)
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--deadline", type=float, default=None, help="epoch seconds")
    parser.add_argument("--args", default="{}", help="part-specific settings, JSON")
    ns = parser.parse_args(argv)
    from attnce_bench.gpu_check.procs import install_term_handler

    install_term_handler()
    ctx = PartContext(
        out=ns.out,
        device=ns.device,
        tiny=ns.tiny,
        deadline=ns.deadline or time.time() + 3600,
        args=json.loads(ns.args),
    )
    ctx.out.mkdir(parents=True, exist_ok=True)
    try:
        run(ctx)
    except Exception as err:  # noqa: BLE001  (a part reports every failure, then exits non-zero)
        traceback.print_exc()
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        ctx.key = (ctx.key + "; " if ctx.key else "") + f"{type(err).__name__}: {first}"[:300]
        ctx.emit()
        ctx.emit(f"**FAILED**: `{type(err).__name__}: {str(err).strip()[:2000]}`")
        ctx.save(FAIL)
        return 1
    ctx.save(OK)
    return 0


def check(condition: bool, message: str) -> None:
    """Raise :class:`CheckFailed` with ``message`` unless ``condition``."""
    if not condition:
        raise CheckFailed(message)


def fmt(x: Optional[float], digits: int = 3) -> str:
    """A number for a table: significant digits, 'n/a' for None, 'NaN'/'inf' kept visible."""
    if x is None:
        return "n/a"
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if x == 0:
        return "0"
    if abs(x) < 1e-3 or abs(x) >= 1e5:
        return f"{x:.{max(digits - 1, 1)}e}"
    return f"{x:.{digits}g}"


def run_logged(
    cmd: Sequence[str], cwd: Path, log: Path, timeout: float, env: Optional[Dict[str, str]] = None
) -> Dict[str, Any]:
    """Run ``cmd`` with stdout+stderr into ``log``, killing its whole process group at ``timeout``.

    Returns:
        ``{"rc": int or None, "timed_out": bool, "seconds": float}``.
    """
    from attnce_bench.gpu_check.procs import run_group

    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as fh:
        fh.write("$ " + " ".join(str(c) for c in cmd) + "\n")
        fh.flush()
        return run_group(list(map(str, cmd)), cwd=cwd, stdout=fh, timeout=timeout, env=env)


def log_tail(log: Path, chars: int = 2500) -> str:
    """The end of a log file ('' when missing)."""
    try:
        return log.read_text(errors="replace")[-chars:]
    except OSError:
        return ""


def python() -> str:
    """This interpreter, for the subprocesses a part starts."""
    return sys.executable


__all__ = [
    "OK",
    "FAIL",
    "SKIPPED",
    "TIMEOUT",
    "RUNNING",
    "CheckFailed",
    "PartContext",
    "part_main",
    "check",
    "fmt",
    "run_logged",
    "log_tail",
    "python",
]
