"""Launching solo-learn's own ``main_pretrain.py`` for each benchmark run, and watching it.

Each run gets a folder ``<out>/runs/<comparison>/<label>/seed<k>/`` holding:

* ``config.yaml``: what the run's shipped config and overrides resolve to, with both in its header
  (:mod:`attnce_bench.compose`);
* ``command.sh``: the exact command, runnable by hand (the shipped config and the overrides);
* ``train.log``: main_pretrain.py's stdout and stderr;
* ``epochs.jsonl``: one line per epoch written inside the run by
  :class:`attnce_bench.hooks.BenchHooks` (training seconds, online kNN / linear accuracy);
* ``ckpt/``: solo-learn's checkpoint (the last epoch only);
* ``result.json``: what the tables are built from.

Memory is the peak, over the run, of the summed resident memory of the subprocess tree
(main_pretrain.py and its dataloader workers), sampled every 0.5 s from /proc. Both the plain RSS
sum and the PSS sum (which counts pages shared by forked workers once) are recorded; tables show
PSS where the kernel provides it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from omegaconf import OmegaConf

import attnce_plugin
from attnce_bench.compose import CONFIG_ROOT, RunConfig, save_run_config
from attnce_bench.plan import RunSpec

#: The folder holding the attnce_bench and attnce_plugin packages (a checkout or site-packages).
PACKAGE_ROOT = Path(__file__).resolve().parents[1]


@dataclass
class RunResult:
    """What one run produced; ``status`` is "ok", "failed" or "skipped"."""

    key: str
    label: str
    method: str
    comparison: str
    seed: int
    epochs: int
    num_positives: int
    matched_to: Optional[str]
    status: str = "ok"
    error: str = ""
    epochs_done: int = 0
    train_seconds: Optional[float] = None
    seconds_per_epoch: Optional[float] = None
    wall_seconds: float = 0.0
    knn_acc1: Optional[float] = None
    linear_acc1: Optional[float] = None
    offline_acc1: Optional[float] = None
    offline_knn_acc1: Optional[float] = None
    offline_l2: Optional[float] = None
    offline_uniformity: Optional[float] = None
    offline_eff_rank: Optional[float] = None
    probe_seconds: Optional[float] = None
    peak_rss_mib: Optional[float] = None
    peak_pss_mib: Optional[float] = None
    settings: Dict[str, Any] = field(default_factory=dict)
    run_dir: str = ""
    reused: bool = False

    @property
    def peak_mem_mib(self) -> Optional[float]:
        return self.peak_pss_mib if self.peak_pss_mib is not None else self.peak_rss_mib


# --------------------------------------------------------------------------------------------
# Reuse


def config_digest(run: RunConfig) -> str:
    """Hash of a run's resolved config, its command line and the plugin's version, to tell whether
    a finished run can be reused: a version that changes the loss's arithmetic (even only its fp32
    rounding, which changes every trained number) does not reuse the runs of an older one."""
    text = "\n".join(
        [
            f"attnce_plugin {attnce_plugin.__version__}",
            run.config_name,
            *run.overrides,
            *run.hydra_overrides,
            OmegaConf.to_yaml(run.resolved, sort_keys=True),
        ]
    )
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# --------------------------------------------------------------------------------------------
# Memory of the process tree


def _children_map() -> Dict[int, List[int]]:
    kids: Dict[int, List[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        # The command name is in parentheses and may hold spaces; ppid is the 2nd field after it.
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        kids.setdefault(ppid, []).append(int(entry))
    return kids


def _tree(pid: int) -> List[int]:
    kids = _children_map()
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def _mem_kib(pid: int) -> Tuple[int, Optional[int]]:
    """(RSS, PSS) of one process in KiB; PSS is None where smaps_rollup is unreadable."""
    rss, pss = 0, None
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1])
                    break
    except OSError:
        return 0, None
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    pss = int(line.split()[1])
                    break
    except OSError:
        pss = None
    return rss, pss


class TreeMemorySampler:
    """Samples the summed RSS / PSS of a process tree in a background thread (Linux /proc)."""

    def __init__(self, pid: int, interval: float = 0.5) -> None:
        self.pid = pid
        self.interval = interval
        self.peak_rss_kib = 0
        self.peak_pss_kib: Optional[int] = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self.available = os.path.isdir("/proc/self")

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def sample(self) -> None:
        rss_total, pss_total, pss_ok = 0, 0, True
        for p in _tree(self.pid):
            rss, pss = _mem_kib(p)
            rss_total += rss
            if pss is None:
                pss_ok = False
            else:
                pss_total += pss
        self.peak_rss_kib = max(self.peak_rss_kib, rss_total)
        if pss_ok and rss_total:
            self.peak_pss_kib = max(self.peak_pss_kib or 0, pss_total)

    def __enter__(self) -> "TreeMemorySampler":
        if self.available:
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self.available:
            self._thread.join()


# --------------------------------------------------------------------------------------------
# Running


def read_epoch_log(path: Path) -> List[Dict[str, Any]]:
    """The per-epoch records of a run (``event == "epoch"``), in order; [] if none yet."""
    if not path.is_file():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line being written right now
        if rec.get("event") == "epoch":
            out.append(rec)
    return out


def _error_tail(log: Path, lines: int = 15) -> str:
    if not log.is_file():
        return "(no train.log)"
    text = log.read_text(errors="replace").replace("\r", "\n").splitlines()
    text = [t for t in text if t.strip()]
    return "\n".join(text[-lines:])


def pretrain_command(main_pretrain: Path, run: RunConfig, passthrough: Sequence[str]) -> List[str]:
    """solo-learn's main_pretrain.py on the shipped config with the run's overrides."""
    return [
        sys.executable,
        str(main_pretrain),
        "--config-path",
        CONFIG_ROOT,
        "--config-name",
        run.config_name,
        *run.overrides,
        *run.hydra_overrides,
        *passthrough,
    ]


def _subprocess_env() -> Dict[str, str]:
    env = dict(os.environ)
    # The run's cwd is its own folder: make these attnce_plugin / attnce_bench packages the ones
    # imported there, whether installed or in a checkout.
    paths = [str(PACKAGE_ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    env.setdefault("PYTHONWARNINGS", "ignore")
    return env


def run_pretrain(
    spec: RunSpec,
    run: RunConfig,
    run_dir: Path,
    main_pretrain: Path,
    passthrough: Sequence[str] = (),
    on_epoch: Optional[Callable[[Dict[str, Any]], None]] = None,
) -> RunResult:
    """Run main_pretrain.py for one spec and collect its timings, accuracies and memory.

    Args:
        on_epoch: called with each new epoch record while the run goes (progress bars).
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    for stale in ("epochs.jsonl", "result.json"):
        (run_dir / stale).unlink(missing_ok=True)
    save_run_config(run, run_dir / "config.yaml")
    cmd = pretrain_command(main_pretrain, run, passthrough)
    (run_dir / "command.sh").write_text(
        "#!/bin/sh\n# Re-run this benchmark run by hand (from any folder):\n"
        f"cd {shlex.quote(str(run_dir))} && "
        f"PYTHONPATH={shlex.quote(str(PACKAGE_ROOT))}${{PYTHONPATH:+:$PYTHONPATH}} "
        + " ".join(shlex.quote(c) for c in cmd)
        + "\n"
    )
    result = RunResult(
        key=spec.key,
        label=spec.label,
        method=spec.method,
        comparison=spec.comparison,
        seed=spec.seed,
        epochs=spec.epochs,
        num_positives=spec.num_positives,
        matched_to=spec.matched_to,
        settings=dict(spec.settings),
        run_dir=str(run_dir),
    )
    log_path = run_dir / "epochs.jsonl"
    seen = 0
    start = time.perf_counter()
    with open(run_dir / "train.log", "w") as log:
        proc = subprocess.Popen(
            cmd, cwd=run_dir, stdout=log, stderr=subprocess.STDOUT, env=_subprocess_env()
        )
        try:
            with TreeMemorySampler(proc.pid) as mem:
                while proc.poll() is None:
                    time.sleep(0.5)
                    records = read_epoch_log(log_path)
                    for rec in records[seen:]:
                        if on_epoch is not None:
                            on_epoch(rec)
                    seen = len(records)
        except BaseException:
            proc.terminate()  # Ctrl-C: do not leave a training process behind
            proc.wait()
            raise
    result.wall_seconds = time.perf_counter() - start
    records = read_epoch_log(log_path)
    for rec in records[seen:]:
        if on_epoch is not None:
            on_epoch(rec)
    result.peak_rss_mib = mem.peak_rss_kib / 1024.0 if mem.peak_rss_kib else None
    result.peak_pss_mib = mem.peak_pss_kib / 1024.0 if mem.peak_pss_kib else None
    result.epochs_done = len(records)
    if records:
        secs = [float(r["train_seconds"]) for r in records]
        result.train_seconds = sum(secs)
        result.seconds_per_epoch = sum(secs) / len(secs)
        last = records[-1]
        result.knn_acc1 = last.get("val_knn_acc1")
        result.linear_acc1 = last.get("val_acc1")
    if proc.returncode != 0:
        result.status = "failed"
        result.error = (
            f"main_pretrain.py exited with {proc.returncode}:\n{_error_tail(run_dir / 'train.log')}"
        )
    elif result.epochs_done < spec.epochs:
        result.status = "failed"
        result.error = f"only {result.epochs_done} of {spec.epochs} epochs were logged"
    return result


def find_checkpoint(run_dir: Path) -> Optional[Path]:
    """The newest ``.ckpt`` under ``run_dir/ckpt`` (solo's Checkpointer keeps the last one)."""
    ckpts = sorted((run_dir / "ckpt").rglob("*.ckpt"), key=lambda p: p.stat().st_mtime)
    return ckpts[-1] if ckpts else None


def save_result(result: RunResult, digest: str) -> None:
    data = asdict(result)
    data["config_digest"] = digest
    Path(result.run_dir, "result.json").write_text(json.dumps(data, indent=2))


def load_result(run_dir: Path, digest: str) -> Optional[RunResult]:
    """A finished, successful earlier result of exactly this config, or None."""
    path = run_dir / "result.json"
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError:
        return None
    if data.pop("config_digest", None) != digest or data.get("status") != "ok":
        return None
    known = {f for f in RunResult.__dataclass_fields__}
    result = RunResult(**{k: v for k, v in data.items() if k in known})
    result.reused = True
    return result
