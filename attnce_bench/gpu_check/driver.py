"""``run``: install the carried wheels offline, then every part in priority order, one deadline.

Imports only the standard library: it runs before the carried packages are installed. Each part is
a subprocess (``python -m attnce_bench.gpu_check.<part>``) with its own timeout, the smaller of
its cap and what is left of the deadline (minus a reserve for writing the report); a part whose
timeout would fall below its minimum is skipped and says so. A part that fails or times out is
recorded and the next one runs.

``--out`` receives four files (the device tool brings back at most 8): ``summary.md`` (part,
status, seconds, key numbers), ``report.md`` (the summary, every part's tables, the log tail of
every part that did not pass), ``results.json`` and ``logs.tar.gz`` (every log; no checkpoints).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

from attnce_bench.gpu_check import REPO_ROOT
from attnce_bench.gpu_check.common import FAIL, OK, SKIPPED, TIMEOUT, log_tail, run_logged
from attnce_bench.gpu_check.prepare import PrepareError, load_manifest

#: Seconds kept back from the deadline for the report and the tarball.
RESERVE_S = 15.0
#: Log files larger than this are left out of logs.tar.gz (none should be).
MAX_LOG_BYTES = 4 * 2**20


@dataclass(frozen=True)
class Part:
    """One part of the check.

    Attributes:
        pid: id shown in the summary ("1", "6a", ...).
        title: what it checks.
        module: the part's module, run as ``python -m <module>``.
        cap_cuda / cap_cpu: its timeout at most, in seconds, on each kind of run.
        min_s: below this many seconds left it is skipped rather than started.
        cpu_skip: non-empty: skipped with ``--cpu``, for this reason.
        tiny_skip: non-empty: skipped with ``--tiny``, for this reason.
        args: part-specific settings added to the shared ones.
        needs: a shared setting an earlier part must have provided (its result's
            ``data["provides"]``), else this part is skipped.
    """

    pid: str
    title: str
    module: str
    cap_cuda: float
    cap_cpu: float
    min_s: float
    cpu_skip: str = ""
    tiny_skip: str = ""
    args: Dict[str, Any] = field(default_factory=dict)
    needs: str = ""


_PKG = "attnce_bench.gpu_check"

PARTS: Sequence[Part] = (
    Part("0", "environment (versions, origins, CUDA)", f"{_PKG}.env_check", 60, 120, 10),
    Part("1", "loss vs float64: fp32, TF32, fp16/bf16 autocast", f"{_PKG}.loss_check", 90, 180, 15),
    Part(
        "2",
        "solo-learn main_pretrain.py, shipped custom configs",
        f"{_PKG}.pretrain_check",
        240,
        600,
        60,
    ),
    Part(
        "3",
        "attnce-knn (main_knn.py) on a part-2 checkpoint",
        f"{_PKG}.knn_check",
        90,
        120,
        30,
        cpu_skip="solo-learn's main_knn.py moves every batch to CUDA (`im.cuda()`): CUDA only",
        needs="checkpoint_dir",
    ),
    Part(
        "4",
        "two ranks (gloo) vs one process: loss and gradients",
        f"{_PKG}.dist_check",
        90,
        180,
        20,
    ),
    Part(
        "5",
        "loss vs solo-learn's SimCLR / MoCo v3 losses (bench_loss)",
        f"{_PKG}.loss_bench",
        120,
        240,
        20,
    ),
    Part("6a", "step time through Lightning, eager", f"{_PKG}.step_check", 150, 300, 30),
    Part(
        "6b",
        "step time through Lightning, torch.compile",
        f"{_PKG}.step_check",
        600,
        300,
        60,
        tiny_skip="compiling takes 20-30 s per model on a small CPU, too long for the tests",
        args={"compile": True},
    ),
)


@dataclass
class Outcome:
    """What one part did."""

    pid: str
    title: str
    status: str
    seconds: float = 0.0
    key: str = ""
    data: Dict[str, Any] = field(default_factory=dict)
    section: str = ""
    log: Optional[Path] = None


def install_wheels(
    gpucheck: Path, manifest: Dict[str, Any], target: Path, say: Callable[[str], None]
) -> List[str]:
    """Install the carried wheels into ``target`` without network; returns the installed files.

    A wheel with ``only_if_missing`` (setuptools, for pkg_resources) is installed only where this
    interpreter cannot import that module: shadowing a working setuptools would gain nothing.
    """
    wheels = []
    for wheel in manifest["wheels"]:
        module = wheel.get("only_if_missing")
        if module:
            probe = subprocess.run(
                [sys.executable, "-c", f"import {module}"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            if probe.returncode == 0:
                say(f"[gpu_check] {wheel['file']}: not installed, {module} is importable here")
                continue
        wheels.append(gpucheck / "wheels" / wheel["file"])
    shutil.rmtree(target, ignore_errors=True)  # pip --target would keep an older copy
    target.mkdir(parents=True)
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--no-index",
        "--no-deps",
        "--no-compile",
        "--disable-pip-version-check",
        "-q",
        "--target",
        str(target),
        *map(str, wheels),
    ]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        # Every carried wheel is pure Python: unpacking it is an install (no scripts needed).
        say(f"[gpu_check] pip install failed ({proc.stdout.strip()[-300:]}); unpacking instead")
        for whl in wheels:
            with zipfile.ZipFile(whl) as zf:
                zf.extractall(target)
    return [w.name for w in wheels]


def part_env(site: Path, gpucheck: Path) -> Dict[str, str]:
    """Environment of every part: the wheels first, then this checkout, then solo-learn's copy."""
    env = dict(os.environ)
    solo = gpucheck / "solo-learn"
    old = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys([str(site), str(REPO_ROOT), str(solo), *old]))
    env.update(
        {
            "SOLO_LEARN_DIR": str(solo),
            "PYTHONWARNINGS": "ignore",
            "PYTHONUNBUFFERED": "1",
            "HYDRA_FULL_ERROR": "1",
            "WANDB_MODE": "disabled",
        }
    )
    return env


def _read_result(pdir: Path) -> Dict[str, Any]:
    try:
        return json.loads((pdir / "result.json").read_text())
    except (OSError, ValueError):
        return {}


def run_part(
    part: Part,
    *,
    work: Path,
    env: Dict[str, str],
    device: str,
    tiny: bool,
    timeout: float,
    shared: Dict[str, Any],
) -> Outcome:
    """Run one part as a subprocess and turn what it left behind into an :class:`Outcome`."""
    pdir = work / f"part{part.pid}"
    shutil.rmtree(pdir, ignore_errors=True)
    pdir.mkdir(parents=True)
    args = {**shared, **part.args}
    cmd = [
        sys.executable,
        "-m",
        part.module,
        "--out",
        str(pdir),
        "--device",
        device,
        "--deadline",
        f"{time.time() + timeout - 3:.1f}",
        "--args",
        json.dumps(args),
    ]
    if tiny:
        cmd.append("--tiny")
    log = pdir / "log.txt"
    proc = run_logged(cmd, REPO_ROOT, log, timeout, env)
    result = _read_result(pdir)
    section = ""
    if (pdir / "section.md").is_file():
        section = (pdir / "section.md").read_text()
    status = result.get("status", "")
    key = result.get("key", "")
    if proc["timed_out"]:
        status = TIMEOUT
        key = f"killed at its {timeout:.0f} s timeout" + (f"; had: {key}" if key else "")
    elif proc["rc"] != 0 or status != OK:
        if status in ("", OK, "running"):
            tail = [ln for ln in log_tail(log, 4000).splitlines() if ln.strip()]
            key = key or (tail[-1][:300] if tail else "no output")
            key = f"exit code {proc['rc']}: {key}"
        status = FAIL
    return Outcome(
        part.pid, part.title, status, proc["seconds"], key, result.get("data", {}), section, log
    )


def _skip(part: Part, reason: str) -> Outcome:
    return Outcome(part.pid, part.title, SKIPPED, 0.0, reason)


def summary_table(outcomes: Sequence[Outcome]) -> List[str]:
    lines = ["| part | what | status | s | key numbers |", "|---|---|---|---|---|"]
    for o in outcomes:
        status = o.status if o.status in (OK, SKIPPED) else f"**{o.status}**"
        key = o.key.replace("|", "/").replace("\n", " ")
        lines.append(f"| {o.pid} | {o.title} | {status} | {o.seconds:.0f} | {key} |")
    return lines


def write_outputs(
    out: Path, work: Path, outcomes: Sequence[Outcome], header: List[str], total_s: float
) -> str:
    """summary.md, report.md, results.json, logs.tar.gz in ``out``; returns the summary text."""
    out.mkdir(parents=True, exist_ok=True)
    summary = (
        "\n".join(
            [
                "# GPU check summary",
                "",
                *header,
                "",
                *summary_table(outcomes),
                "",
                f"total {total_s:.0f} s",
            ]
        )
        + "\n"
    )
    (out / "summary.md").write_text(summary)
    report = [summary, ""]
    for o in outcomes:
        report += [f"## Part {o.pid}: {o.title} ({o.status}, {o.seconds:.0f} s)", ""]
        if o.status == SKIPPED:
            report += [f"Skipped: {o.key}", ""]
            continue
        report.append(o.section.strip() or "(no tables)")
        report.append("")
        if o.status != OK and o.log is not None:
            tail = "\n".join(log_tail(o.log, 6000).splitlines()[-60:])
            report += ["Log tail:", "", "```", tail, "```", ""]
    (out / "report.md").write_text("\n".join(report) + "\n")
    (out / "results.json").write_text(
        json.dumps(
            {
                "header": header,
                "total_seconds": total_s,
                "parts": [
                    {
                        "id": o.pid,
                        "title": o.title,
                        "status": o.status,
                        "seconds": o.seconds,
                        "key": o.key,
                        "data": o.data,
                    }
                    for o in outcomes
                ],
            },
            indent=1,
            default=str,
        )
        + "\n"
    )
    with tarfile.open(out / "logs.tar.gz", "w:gz") as tar:
        for path in sorted(work.rglob("*")):
            if (
                path.is_file()
                and path.suffix in (".txt", ".log", ".json", ".md")
                and path.stat().st_size <= MAX_LOG_BYTES
                and "site" not in path.relative_to(work).parts[:1]
            ):
                tar.add(path, arcname=str(path.relative_to(work)))
    return summary


def run_all(
    gpucheck: Path,
    out: Path,
    work: Optional[Path],
    cpu: bool,
    tiny: bool,
    deadline_s: float,
    only: Optional[Sequence[str]] = None,
    parts: Sequence[Part] = PARTS,
) -> int:
    """The whole check (``parts``: :data:`PARTS`; the tests pass their own).

    Returns:
        The exit code: 0 every part that ran passed, 1 a part failed or timed out, 2 the prepared
        folder is missing or damaged, 3 CUDA is not usable (without ``--cpu``).
    """
    start = time.time()
    deadline = start + deadline_s
    gpucheck = Path(gpucheck).resolve()
    out = Path(out).resolve()
    temp_work = work is None
    work = Path(tempfile.mkdtemp(prefix="gpucheck-work-")) if work is None else Path(work)
    work = work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    device = "cpu" if cpu else "cuda"

    def say(text: str) -> None:
        print(text, flush=True)

    header = [
        f"mode: {'--cpu' if cpu else 'cuda'}{' --tiny' if tiny else ''}, deadline "
        f"{deadline_s:.0f} s, host {platform.node()}, python {platform.python_version()}",
        f"prepared folder: {gpucheck}; scratch: {work}",
    ]
    say(f"[gpu_check] {header[0]}")
    outcomes: List[Outcome] = []
    try:
        manifest = load_manifest(gpucheck)
    except PrepareError as err:
        say(f"[gpu_check] {err}")
        outcomes.append(Outcome("0", "prepared folder", FAIL, 0.0, str(err).splitlines()[0]))
        say(write_outputs(out, work, outcomes, header, time.time() - start))
        return 2
    header.append(
        f"solo-learn {str(manifest['solo_learn'].get('commit'))[:10]} (modified locally: "
        f"{manifest['solo_learn'].get('modified_locally')}), prepared "
        f"{manifest['created']}"
    )
    site = work / "site"
    installed = install_wheels(gpucheck, manifest, site, say)
    header.append(f"wheels installed into {site}: {', '.join(installed)}")
    say(f"[gpu_check] {header[-1]} ({time.time() - start:.0f} s)")
    env = part_env(site, gpucheck)
    data = manifest["data"]
    shared: Dict[str, Any] = {
        "gpucheck": str(gpucheck),
        "data": {"train": str(gpucheck / data["train"]), "val": str(gpucheck / data["val"])},
    }

    no_cuda = False
    for part in parts:
        left = deadline - time.time() - RESERVE_S
        cap = part.cap_cpu if cpu else part.cap_cuda
        if cpu and part.cpu_skip:
            outcome = _skip(part, part.cpu_skip)
        elif tiny and part.tiny_skip:
            outcome = _skip(part, part.tiny_skip)
        elif no_cuda:
            outcome = _skip(part, "CUDA is not usable (part 0)")
        elif only is not None and part.pid != "0" and part.pid not in only:
            outcome = _skip(part, "not selected (--only)")
        elif part.needs and not shared.get(part.needs):
            outcome = _skip(part, f"no {part.needs} from an earlier part")
        elif min(cap, left) < part.min_s:
            outcome = _skip(
                part,
                f"does not fit: {max(left, 0):.0f} s left of the deadline, needs "
                f"at least {part.min_s:.0f} s",
            )
        else:
            say(f"[gpu_check] part {part.pid}: {part.title} (timeout {min(cap, left):.0f} s)")
            outcome = run_part(
                part,
                work=work,
                env=env,
                device=device,
                tiny=tiny,
                timeout=min(cap, left),
                shared=shared,
            )
        outcomes.append(outcome)
        say(
            f"[gpu_check] part {part.pid}: {outcome.status} in {outcome.seconds:.0f} s: "
            f"{outcome.key}"
        )
        if part.pid == "0" and outcome.status != OK and not cpu and not outcome.data.get("cuda"):
            no_cuda = True
        shared.update(outcome.data.get("provides") or {})

    total = time.time() - start
    say("")
    say(write_outputs(out, work, outcomes, header, total))
    say(f"[gpu_check] wrote {out}/summary.md, report.md, results.json, logs.tar.gz")
    if temp_work:
        # Checkpoints are hundreds of MB; the logs stay for a look (and are in logs.tar.gz).
        for ckpt in work.rglob("*.ckpt"):
            ckpt.unlink()
        say(f"[gpu_check] scratch kept without checkpoints: {work}")
    if no_cuda:
        return 3
    return 0 if all(o.status in (OK, SKIPPED) for o in outcomes) else 1
