"""The one runner: each run is solo-learn's own ``main_pretrain.py`` on a shipped config plus
overrides, in a subprocess; then the offline probe of its checkpoint.

A run's folder ``<out>/runs/<run.key>/`` holds ``config.yaml`` (the resolved config, with the
shipped config's name and every override in its header), ``command.sh`` (runnable by hand),
``train.log``, ``record.jsonl`` (the plugin's run recorder, ``diagnostics.record``) and
``result.json`` (what tables are built from; a finished run whose config digest matches is reused).
Those files, without the checkpoint, are a run's record: a report rebuilt from them needs nothing
else.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple, Union

from omegaconf import DictConfig, OmegaConf

import attnce_plugin
from benchmarks.runs import (
    DATASETS,
    DISPLAY,
    METHODS,
    REFERENCE_LABELS,
    Run,
    crop_scale_overrides,
    matched_epochs,
)

#: Hydra search-path entry of the shipped configs.
CONFIG_ROOT = "pkg://attnce_plugin.configs"
#: The repository root: holds the benchmarks and (in a clone) attnce_plugin packages.
REPO_ROOT = Path(__file__).resolve().parents[1]


class BenchConfigError(ValueError):
    """A benchmark setting is unknown or inconsistent (raised before any training)."""


@dataclass
class Data:
    """The folders every run of a benchmark reads (val None: no validation and no probe)."""

    dataset: str
    train: str
    val: Optional[str]
    note: str
    #: The converted-data cache holding ``train`` and ``val`` (its subfolder's name says what
    #: the data is): where it lies does not enter a run's digest.
    cache: Optional[str] = None


@dataclass
class Budget:
    """What every run of one benchmark shares, beyond its method and settings."""

    data: Data
    batch_size: int
    num_workers: Optional[int] = None
    crop_size: Optional[int] = None
    limit_train_batches: Optional[int] = None
    cpu: bool = True
    #: ``[METHOD:]KEY=VALUE`` of ``--set``, then raw Hydra overrides after ``--``.
    sets: Sequence[str] = ()
    overrides: Sequence[str] = ()
    #: ``--curve-every N``: keep a checkpoint every N epochs and probe each (a learning curve).
    curve_every: Optional[int] = None
    #: every crop's RandomResizedCrop minimum scale (None: the configs' own)
    crop_min_scale: Optional[float] = None


@dataclass
class Result:
    """What one run produced; ``status`` is "ok", "failed" or "skipped"."""

    key: str
    label: str
    method: str
    comparison: str
    seed: int
    epochs: int
    matched_to: Optional[str] = None
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
    peak_mem_mib: Optional[float] = None
    settings: List[str] = field(default_factory=list)
    run_dir: str = ""
    reused: bool = False
    #: With ``--curve-every``: one point per kept checkpoint, ``{"epochs", "train_seconds",
    #: "offline_acc1", "offline_knn_acc1"}``, in epoch order.
    curve: List[Dict[str, float]] = field(default_factory=list)
    #: The processor it trained on (:func:`processor_name`): the CPU's model name, or the GPU's
    #: on an accelerator. Seconds per epoch compare only on one processor. Empty in records
    #: written before the field existed.
    cpu: str = ""


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what :mod:`platform` knows."""
    try:
        return next(
            ln.split(":", 1)[1].strip()
            for ln in Path("/proc/cpuinfo").read_text().splitlines()
            if ln.startswith("model name")
        )
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def processor_name(resolved: DictConfig) -> str:
    """What a run's seconds were measured on: the GPU's name when its config trains on one, else
    :func:`cpu_name` (which, off x86 Linux, may only name the architecture)."""
    if str(resolved.get("accelerator", "cpu")) in ("gpu", "cuda", "auto"):
        import torch

        if torch.cuda.is_available():
            return torch.cuda.get_device_name(0)
    return cpu_name()


def parse_set(text: str) -> tuple:
    """``key=value`` (all runs) or ``method:key=value`` (one method's runs) of ``--set``."""
    lhs, eq, value = text.partition("=")
    method, _, key = lhs.rpartition(":")
    key = key.strip().lstrip("+")
    if not eq or not key:
        raise BenchConfigError(f"--set {text!r}: expected KEY=VALUE or METHOD:KEY=VALUE")
    if method and method not in METHODS:
        raise BenchConfigError(f"--set {text!r}: method {method!r} is not one of {list(METHODS)}")
    return method or None, key, value.strip()


def config_name(method: str, dataset: str) -> str:
    """The shipped primary config of a method on a dataset."""
    return f"pretrain/{DATASETS[dataset].family}/{METHODS[method][0]}.yaml"


def overrides(run: Run, budget: Budget, run_dir: Path) -> List[str]:
    """Every override of a run, later ones winning: the method's, the budget's, the run's
    settings, the ``--set`` values, the raw overrides, the learning curve's checkpoints."""
    ds = DATASETS[budget.data.dataset]
    out = list(METHODS[run.method][1])
    out += [f"++data.dataset={ds.solo_dataset}", f"++data.train_path={budget.data.train}"]
    out.append(f"++data.val_path={budget.data.val}" if budget.data.val else "~data.val_path")
    if budget.num_workers is not None:
        out.append(f"++data.num_workers={budget.num_workers}")
    crop = budget.crop_size or ds.val_size or None
    if crop:
        out.append(f"++views.crop_size={crop}")
    if budget.crop_min_scale is not None:
        out += crop_scale_overrides(run.method, budget.crop_min_scale)
    if budget.cpu:
        out.append("trainer=cpu")
    out += [
        f"++name={run.method}-{budget.data.dataset}-seed{run.seed}",
        f"++seed={run.seed}",
        f"++max_epochs={run.epochs}",
        f"++optimizer.batch_size={budget.batch_size}",
        # solo's default of 10 warm-up epochs is longer than a CPU budget's whole run.
        "++scheduler.warmup_epochs=1",
        "++knn_eval.enabled=True",
        "++knn_eval.k=20",
        f"++checkpoint.dir={run_dir / 'ckpt'}",
        "++checkpoint.keep_prev=False",
        "++auto_resume.enabled=False",
        "++enable_progress_bar=False",
        f"++diagnostics.record={run_dir / 'record.jsonl'}",
    ]
    if budget.limit_train_batches is not None:
        out.append(f"++limit_train_batches={budget.limit_train_batches}")
    out += run.settings
    for method, key, value in map(parse_set, budget.sets):
        if method in (None, run.method):
            out.append(f"++{key}={value}")
    out += budget.overrides
    if curves(budget, run):
        # solo's Checkpointer saves when current_epoch % frequency == 0: after epochs 1, N+1, ...
        out += [f"++checkpoint.frequency={budget.curve_every}", "++checkpoint.keep_prev=True"]
    return out


def curves(budget: Budget, run: Run) -> bool:
    """Whether a run keeps a learning curve: with ``--curve-every``, every run of fixed epochs
    (an equal-time run's epochs come from timings, so its last epoch may fall off the grid)."""
    return bool(budget.curve_every) and run.matched_to is None


def check_curve_epochs(runs: Sequence[Run], every: int) -> None:
    """solo's Checkpointer saves only when ``current_epoch % every == 0``: the last epoch is
    saved, and probed, only when ``(epochs - 1) % every == 0``.

    Raises:
        BenchConfigError: a run of fixed epochs whose last epoch would not be saved.
    """
    bad = sorted({r.epochs for r in runs if r.matched_to is None and (r.epochs - 1) % every})
    if bad:
        ok = ", ".join(str(e - (e - 1) % every) for e in bad)
        raise BenchConfigError(
            f"--curve-every={every}: solo-learn saves checkpoints after epochs 1, {every + 1}, "
            f"{2 * every + 1}, ...; epochs {bad} would end between two (e.g. {ok} instead)"
        )


def hydra_overrides(budget: Budget) -> List[str]:
    """The benchmark's Hydra callback: ``custom`` data validated at the crop size."""
    size = DATASETS[budget.data.dataset].val_size and (
        budget.crop_size or DATASETS[budget.data.dataset].val_size
    )
    if not size or not budget.data.val:
        return []
    key = "hydra.callbacks.bench"
    return [f"+{key}._target_=benchmarks.hooks.ValidateAtTrainSize", f"+{key}.size={size}"]


def compose(config: str, overrides: Sequence[str]) -> DictConfig:
    """The shipped config with overrides, resolved, as main_pretrain.py gets it.

    Raises:
        BenchConfigError: the config or an override is not valid (Hydra's message included).
    """
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    try:
        with initialize_config_module("attnce_plugin.configs", version_base="1.2"):
            cfg = hydra_compose(config, overrides=list(overrides))
        OmegaConf.resolve(cfg)
    except (HydraException, OmegaConfBaseException) as err:
        raise BenchConfigError(f"{config} with overrides {list(overrides)}: {err}") from err
    return cfg


@dataclass
class Prepared:
    """A run ready to launch: its folder, command and resolved config (composed once)."""

    run: Run
    run_dir: Path
    config: str
    overrides: List[str]
    command: List[str]
    resolved: DictConfig = field(repr=False)
    #: (path, placeholder) pairs the digest writes as placeholders.
    portable: Sequence[Tuple[str, str]] = ()

    @property
    def digest(self) -> str:
        """Hash of the command, the resolved config and the plugin's version: a finished run is
        reused only for exactly this (a version that changes the loss's rounding changes every
        trained number). The run's folder and the data cache are placeholders in it, so a
        committed record is reused from any clone; the checkpoint settings are left out."""
        # Where and how often checkpoints are kept does not change what is trained.
        args = [a for a in self.command[2:] if not a.startswith("++checkpoint.")]
        trained = OmegaConf.masked_copy(
            self.resolved, [k for k in self.resolved if k != "checkpoint"]
        )
        text = "\n".join([attnce_plugin.__version__, *args, OmegaConf.to_yaml(trained)])
        for path, placeholder in self.portable:
            text = text.replace(path, placeholder)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def write(self) -> None:
        """``config.yaml`` and ``command.sh`` of the run."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        header = [f"# {self.config} from attnce_plugin.configs, with these overrides:"]
        header += [f"#   {o}" for o in self.overrides]
        (self.run_dir / "config.yaml").write_text(
            "\n".join(header) + "\n" + OmegaConf.to_yaml(self.resolved)
        )
        (self.run_dir / "command.sh").write_text(
            "#!/bin/sh\n# Re-run this benchmark run by hand (from any folder):\n"
            f"cd {shlex.quote(str(self.run_dir))} && "
            f"PYTHONPATH={shlex.quote(str(REPO_ROOT))}${{PYTHONPATH:+:$PYTHONPATH}} "
            + " ".join(map(shlex.quote, self.command))
            + "\n"
        )


def prepare(run: Run, budget: Budget, out: Path) -> Prepared:
    """Compose a run's config and command (Hydra errors raise :class:`BenchConfigError`)."""
    from attnce_plugin.solo_compat import solo_checkout_dir

    run_dir = out / "runs" / run.key
    config = config_name(run.method, budget.data.dataset)
    ovr = overrides(run, budget, run_dir)
    script = solo_checkout_dir() / "main_pretrain.py"
    command = [sys.executable, str(script), "--config-path", CONFIG_ROOT, "--config-name", config]
    command += ovr + hydra_overrides(budget)
    portable = [(str(run_dir), "<run>")]
    if budget.data.cache:
        portable.append((str(budget.data.cache), "<data-cache>"))
    return Prepared(run, run_dir, config, ovr, command, compose(config, ovr), portable)


def read_record(path: Path, event: str = "epoch") -> List[Dict[str, Any]]:
    """The recorder's lines of one event, in order; [] when there are none yet."""
    from attnce_plugin.callbacks.recorder import read_records  # imports lightning: not at load

    return read_records(path, event) if path.is_file() else []


class _Tail:
    """The epoch records a growing record file has gained since the last call: the runner's
    poll reads only the new bytes, not the whole file (a line per step) twice a second."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset = path, 0

    def new_epochs(self) -> List[Dict[str, Any]]:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except OSError:
            return []
        complete = data[: data.rfind(b"\n") + 1]  # a half-written last line waits for next time
        self.offset += len(complete)
        from attnce_plugin.callbacks.recorder import parse_records

        return parse_records(complete.decode(errors="replace").splitlines(), "epoch")


def _tree_pss_kib(pid: int) -> int:
    """Summed PSS (RSS where smaps_rollup is unreadable) of a process and its descendants:
    forked dataloader workers share pages, which PSS counts once."""
    kids: Dict[int, List[int]] = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        kids.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry))
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        todo += kids.get(p, [])
        for name, key in (("smaps_rollup", "Pss:"), ("status", "VmRSS:")):
            try:
                line = next(ln for ln in open(f"/proc/{p}/{name}") if ln.startswith(key))
                total += int(line.split()[1])
                break
            except (OSError, StopIteration):
                continue
    return total


#: Seconds between two PSS samples: the kernel walks every mapping of the tree for one (about
#: 70 ms of CPU for a 1.3 GB training process here), so sampling twice a second took 13 % of a
#: core; memory is flat after the first steps, so a slower sample finds the same peak.
PSS_EVERY = 2.0


def _watch_memory(pid: int, peak: List[int], stop: threading.Event) -> None:
    while not stop.wait(PSS_EVERY):
        peak[0] = max(peak[0], _tree_pss_kib(pid))


def launch(prep: Prepared, on_epoch: Optional[Callable[[Dict[str, Any]], None]] = None) -> Result:
    """Train one run and collect its timings, online accuracies and memory (no probe)."""
    run = prep.run
    for stale in ("record.jsonl", "result.json"):
        (prep.run_dir / stale).unlink(missing_ok=True)
    shutil.rmtree(prep.run_dir / "ckpt", ignore_errors=True)  # an older run's checkpoints
    prep.write()
    result = Result(
        run.key, run.label, run.method, run.comparison, run.seed, run.epochs, run.matched_to,
        settings=list(run.settings), run_dir=str(prep.run_dir),
        cpu=processor_name(prep.resolved),
    )  # fmt: skip
    env = dict(os.environ, PYTHONWARNINGS=os.environ.get("PYTHONWARNINGS", "ignore"))
    # The run's cwd is its folder: make this checkout's packages the ones imported there.
    env["PYTHONPATH"] = os.pathsep.join(
        dict.fromkeys([str(REPO_ROOT), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))])
    )
    record, peak, stop = prep.run_dir / "record.jsonl", [0], threading.Event()
    tail = _Tail(record)
    start = time.perf_counter()
    with open(prep.run_dir / "train.log", "w") as log:
        proc = subprocess.Popen(
            prep.command, cwd=prep.run_dir, stdout=log, stderr=subprocess.STDOUT, env=env
        )
        watcher = threading.Thread(target=_watch_memory, args=(proc.pid, peak, stop), daemon=True)
        watcher.start()
        try:
            while proc.poll() is None:
                time.sleep(0.5)
                for rec in tail.new_epochs():
                    if on_epoch is not None:
                        on_epoch(rec)
        except BaseException:
            proc.terminate()  # Ctrl-C or SIGTERM: leave no training process behind
            proc.wait()
            raise
        finally:
            stop.set()
            watcher.join()
    result.wall_seconds = time.perf_counter() - start
    for rec in tail.new_epochs():
        if on_epoch is not None:
            on_epoch(rec)
    epochs = read_record(record)
    result.peak_mem_mib = peak[0] / 1024.0 if peak[0] else None
    result.epochs_done = len(epochs)
    if epochs:
        result.train_seconds = sum(float(r["train_seconds"]) for r in epochs)
        result.seconds_per_epoch = result.train_seconds / len(epochs)
        result.knn_acc1 = epochs[-1].get("val_knn_acc1")
        result.linear_acc1 = epochs[-1].get("val_acc1")
    if proc.returncode != 0:
        log_end = (prep.run_dir / "train.log").read_text(errors="replace").splitlines()[-15:]
        result.status, result.error = "failed", f"exit {proc.returncode}:\n" + "\n".join(log_end)
    elif result.epochs_done < run.epochs:
        result.status = "failed"
        result.error = f"only {result.epochs_done} of {run.epochs} epochs were recorded"
    return result


def save_result(result: Result, digest: str) -> None:
    # No run_dir: it is the record's own folder (load_result sets it), wherever the record lies.
    data = dict(asdict(result), config_digest=digest, run_dir="")
    Path(result.run_dir, "result.json").write_text(json.dumps(data, indent=2) + "\n")


def load_result(run_dir: Path, digest: Optional[str] = None) -> Optional[Result]:
    """A finished, successful run's result (of exactly this digest, when given), or None."""
    try:
        data = json.loads((run_dir / "result.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None
    if data.pop("config_digest", None) != digest and digest is not None:
        return None
    if data.get("status") != "ok":
        return None
    known = Result.__dataclass_fields__
    result = Result(**{k: v for k, v in data.items() if k in known and k != "reused"}, reused=True)
    result.run_dir = str(run_dir)  # where the record is now (records move: committed, copied)
    return result


def probe_into(result: Result, make_backbone: Callable[[], Any], budget: Budget, cfg: Any) -> None:
    """Fill ``result``'s offline columns (a failure is recorded in ``error``, not raised)."""
    from benchmarks.probe import probe_backbone, probe_settings

    if budget.data.val is None:
        result.error = "offline probe skipped: no validation data"
        return
    try:
        probe = probe_backbone(
            make_backbone(),
            str(cfg.data.dataset),
            Path(budget.data.train),
            Path(budget.data.val),
            **probe_settings(OmegaConf.to_container(cfg, resolve=True)),
        )
    except Exception as err:  # a probe failure must not lose the pretraining result
        result.error = f"offline probe failed: {type(err).__name__}: {err}"
        return
    result.offline_acc1, result.offline_knn_acc1 = probe.acc1, probe.knn_acc1
    result.offline_l2 = probe.l2
    result.offline_uniformity, result.offline_eff_rank = probe.uniformity, probe.eff_rank


def epochs_at(ckpt: Path) -> int:
    """Epochs trained at a checkpoint: solo's Checkpointer names it ``...-ep=<0-based epoch>``
    (0 for a name without it)."""
    _, sep, epoch = ckpt.stem.rpartition("-ep=")
    return int(epoch) + 1 if sep and epoch.isdigit() else 0


def curve_into(result: Result, run_dir: Path, budget: Budget, cfg: Any) -> None:
    """``result.curve``: every kept checkpoint probed as the last one is, at the training
    seconds the record gives up to its epoch (the last point is the run's own probe)."""
    from benchmarks.probe import load_pretrained_backbone

    seconds = {
        int(r["epoch"]): float(r["train_seconds"]) for r in read_record(run_dir / "record.jsonl")
    }
    result.curve = []
    for ckpt in sorted((run_dir / "ckpt").rglob("*.ckpt"), key=epochs_at):
        n = epochs_at(ckpt)
        point = result
        if n != result.epochs_done or result.offline_acc1 is None:
            point = Result("", "", "", "", 0, n)
            probe_into(point, lambda c=ckpt: load_pretrained_backbone(c), budget, cfg)
            if point.offline_acc1 is None:
                result.error = f"learning curve at epoch {n}: {point.error}"
                continue
        result.curve.append(
            {
                "epochs": n,
                "train_seconds": sum(v for e, v in seconds.items() if e <= n),
                "offline_acc1": point.offline_acc1,
                "offline_knn_acc1": point.offline_knn_acc1,
            }
        )


def find_checkpoint(run_dir: Path) -> Optional[Path]:
    ckpts = list((run_dir / "ckpt").rglob("*.ckpt"))
    return max(ckpts, key=lambda p: (epochs_at(p), p.stat().st_mtime)) if ckpts else None


def _progress(total: int, desc: str, position: int) -> Any:
    try:
        from tqdm import tqdm
    except ImportError:  # plain lines without tqdm
        return None
    return tqdm(total=total, desc=desc, position=position, leave=position == 0, file=sys.stderr)


def execute(
    runs: Sequence[Run],
    budget: Budget,
    out: Path,
    probe: bool = True,
    fresh: bool = False,
    dry_run: bool = False,
    keep_checkpoints: bool = False,
    only: Optional[Set[str]] = None,
) -> List[Result]:
    """Train (or reuse) and probe every run, in order; with ``only`` (run keys), train only
    those and take the others from their records where they have run (parts of a preset).

    An equal-time run's epochs are fixed once, from the first seed's seconds per epoch of its
    baseline and of the row it matches. All configs are composed before the first run starts, so
    a bad override fails at once.
    """
    from benchmarks.probe import load_pretrained_backbone

    # Composed once, all before the first run starts: a bad override fails at once.
    prepared = {r.key: prepare(r, budget, out) for r in runs if r.epochs > 0}
    results: List[Result] = []
    matched: Dict[str, int] = {}
    bar = _progress(len(runs), "runs", 0)
    for i, run in enumerate(runs):
        if bar is not None:
            bar.set_description(f"[{i + 1}/{len(runs)}] {run.label} seed {run.seed}")
            bar.update(0 if i == 0 else 1)
        if run.epochs == 0:
            n = _matched(run, results, matched, min(r.seed for r in runs))
            if not isinstance(n, int) and only is not None and run.key not in only:
                continue  # another part's run, not timed (or not timeable) here: nothing to show
            if not isinstance(n, int):
                why = n or (
                    f"no timing of '{run.matched_to}' or of its baseline on the first seed (not "
                    "run yet, or failed): the equal-time epochs are unknown"
                )
                results.append(_skipped(run, why))
                continue
            run = run.with_epochs(n)
        prep = prepared.get(run.key) or prepare(run, budget, out)
        skip = only is not None and run.key not in only
        if dry_run:
            prep.write()
            continue
        prior = None if fresh and not skip else load_result(prep.run_dir, prep.digest)
        if skip:
            if prior is not None:
                results.append(prior)
            continue
        lacks_curve = prior is not None and curves(budget, run) and not prior.curve
        kept = {epochs_at(c) for c in (prep.run_dir / "ckpt").rglob("*.ckpt")}
        grid = set(range(1, run.epochs + 1, budget.curve_every or 1))
        if prior is not None and (
            (probe and prior.offline_acc1 is None)
            or (keep_checkpoints and run.epochs not in kept)
            or (lacks_curve and not grid <= kept)
        ):
            prior = None  # trained without what is asked for now (its probe, its checkpoints)
        if prior is not None:
            if lacks_curve:
                curve_into(prior, prep.run_dir, budget, prep.resolved)
                save_result(prior, prep.digest)
                if not keep_checkpoints:
                    shutil.rmtree(prep.run_dir / "ckpt", ignore_errors=True)
            results.append(prior)
            continue
        inner = _progress(run.epochs, "  epochs", 1)

        def show(rec: Dict[str, Any], bar: Any = inner) -> None:
            msg = (
                f"{rec.get('train_seconds', 0):.0f}s/ep kNN {rec.get('val_knn_acc1', float('nan')):.1f}"
                f" lin {rec.get('val_acc1', float('nan')):.1f}"
            )
            if bar is not None:
                bar.set_postfix_str(msg)
                bar.update(1)
            else:
                print(f"  epoch {rec.get('epoch')}: {msg}", file=sys.stderr)

        result = launch(prep, show)
        if inner is not None:
            inner.close()
        ckpt = find_checkpoint(prep.run_dir)
        if ckpt is not None and (ckpt.parent / "args.json").is_file():
            # The parsed config solo-learn saved: the untrained reference rebuilds from it.
            shutil.copy(ckpt.parent / "args.json", prep.run_dir / "args.json")
        if result.status == "ok" and probe:
            if ckpt is None or epochs_at(ckpt) != result.epochs_done:
                result.error = "offline probe skipped: no checkpoint of the last epoch"
            else:
                probe_into(result, lambda: load_pretrained_backbone(ckpt), budget, prep.resolved)
                if curves(budget, run):
                    curve_into(result, prep.run_dir, budget, prep.resolved)
        if not keep_checkpoints:
            shutil.rmtree(prep.run_dir / "ckpt", ignore_errors=True)
        save_result(result, prep.digest)
        results.append(result)
        if result.status != "ok":
            print(f"run {run.key} FAILED:\n{result.error}", file=sys.stderr)
    if bar is not None:
        bar.update(1)
        bar.close()
    return results


def _skipped(run: Run, why: str) -> Result:
    return Result(
        run.key, run.label, run.method, run.comparison, run.seed, 0, run.matched_to, "skipped", why
    )


def unmatchable(runs: Sequence[Run], results: Sequence[Any]) -> List[Result]:
    """The equal-time runs with no record whose two timings come from different processors, as
    'skipped' results with that reason: what ``--part`` says of them, for ``--report-only``."""
    have = {r.key if isinstance(r, Result) else r["key"] for r in results}  # failed ones too
    timed = [r for r in results if isinstance(r, Result)]  # a failed record loads as a dict
    first_seed = min((r.seed for r in runs), default=0)
    skipped = []
    for run in runs:
        if run.epochs == 0 and run.key not in have:
            why = _matched(run, timed, {}, first_seed)
            if isinstance(why, str):
                skipped.append(_skipped(run, why))
    return skipped


def _matched(
    run: Run, results: Sequence[Result], cache: Dict[str, int], first_seed: int
) -> Optional[Union[int, str]]:
    """An equal-time run's epochs (int); None while a timing is missing; the reason (str) when
    the two timings come from different processors, since a ratio of seconds across machines is
    not a time match. An empty ``cpu`` (a record older than the field) counts as a match."""
    if run.label not in cache:

        def per_epoch(label: str) -> Optional[Result]:
            return next(
                (
                    r
                    for r in results
                    if r.label == label and r.seed == first_seed and r.status == "ok"
                    and r.comparison == "equal-epoch"
                ),
                None,
            )  # fmt: skip

        base, target = per_epoch(DISPLAY[run.method]), per_epoch(run.matched_to or "")
        if base is None or target is None:
            return None
        if base.cpu and target.cpu and base.cpu != target.cpu:
            return (
                f"'{base.label}' trained on {base.cpu!r} and '{target.label}' on "
                f"{target.cpu!r}: their seconds do not compare, so the equal-time epochs are "
                "unknown (train both on one CPU)"
            )
        cache[run.label] = matched_epochs(
            base.epochs, base.seconds_per_epoch, target.seconds_per_epoch
        )
    return cache[run.label]


#: The reference rows: (label, key) of the untrained backbone and the raw pixels.
REFERENCES = tuple(zip(REFERENCE_LABELS, ("random-init", "raw-pixels")))


def reference_results(
    results: Sequence[Result], budget: Budget, seeds: Sequence[int], out: Path
) -> List[Result]:
    """The untrained backbone (one per seed) and the raw pixels, probed on the same images; the
    backbone is rebuilt from a finished run's saved config (``args.json``). Each is a record under
    ``<out>/runs/reference/``, reused while the data and the plugin version are the same."""
    from benchmarks.probe import Pixels, random_backbone

    sources = [Path(r.run_dir) / "args.json" for r in results if r.status == "ok" and r.run_dir]
    args_json = next((p for p in sources if p.is_file()), None)
    if args_json is None or budget.data.val is None:
        return []
    cfg = OmegaConf.create(json.loads(args_json.read_text()))
    backbone = OmegaConf.to_yaml(cfg.get("backbone", {})) + f"crop {budget.crop_size}"
    refs = []
    for label, key in REFERENCES:
        for seed in seeds if key == "random-init" else seeds[:1]:
            ref = Result(f"reference/{key}/seed{seed}", label, "none", "reference", seed, 0)
            ref.run_dir = str(out / "runs" / ref.key)
            digest = hashlib.sha256(
                "\n".join([attnce_plugin.__version__, budget.data.note, ref.key, backbone]).encode()
            ).hexdigest()[:16]
            prior = load_result(Path(ref.run_dir), digest)
            if prior is not None:
                refs.append(prior)
                continue
            make = (
                (lambda s=seed: random_backbone(args_json, s)) if key == "random-init" else Pixels
            )
            probe_into(ref, make, budget, cfg)
            ref.status = "ok" if ref.offline_acc1 is not None else "failed"
            Path(ref.run_dir).mkdir(parents=True, exist_ok=True)
            save_result(ref, digest)  # a record too: --report-only shows it
            refs.append(ref)
    return refs
