"""The one runner: each run is solo-learn's own ``main_pretrain.py`` on a shipped config plus
overrides, in a subprocess, then the offline probe of its last checkpoint. A run's folder
``<out>/runs/<run.key>/`` holds ``config.yaml`` (resolved; the shipped config's name and every
override in its header), ``command.sh``, ``train.log``, ``record.jsonl`` (the RunRecorder's) and
``result.json``; a run whose ``result.json`` says "ok" is finished, and is reused."""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

from omegaconf import DictConfig, OmegaConf

from benchmarks.recorder import read_records
from benchmarks.runs import METHODS, PIXELS, UNTRAINED, Row, Run, matched_epochs, method_overrides

REPO_ROOT = Path(__file__).resolve().parents[1]
Result = Dict[str, Any]


class BenchConfigError(ValueError):
    """A benchmark setting is unknown or inconsistent (raised before any training)."""


#: The embedded data's size: the views' and (benchmarks/hooks.py) the validation images'.
CROP = 32
#: Seconds between looks at a training run's record for its progress line.
PROGRESS_S = 10.0


@dataclass
class Budget:
    """What every run shares beyond its row: the data folders, sizes, the ``--set`` values
    (``[METHOD:]KEY=VALUE``) and the raw overrides after ``--``."""

    train: str
    val: str
    note: str
    batch_size: int
    limit_train_batches: Optional[int] = None
    crop_min_scale: Optional[float] = None
    sets: Sequence[str] = ()
    overrides: Sequence[str] = ()


def parse_set(text: str) -> tuple:
    """(method or None, key, value) of ``--set key=value`` or ``--set method:key=value``."""
    lhs, eq, value = text.partition("=")
    method, _, key = lhs.rpartition(":")
    key = key.strip().lstrip("+")
    if not eq or not key:
        raise BenchConfigError(f"--set {text!r}: expected KEY=VALUE or METHOD:KEY=VALUE")
    if method and method not in METHODS:
        raise BenchConfigError(f"--set {text!r}: method {method!r} is not one of {list(METHODS)}")
    return method or None, key, value.strip()


def config_name(method: str) -> str:
    """The CIFAR family's config: run as ``custom`` data, solo-learn gives it ResNet's ImageNet
    stem (its CIFAR stem is ~6x slower on a CPU)."""
    return f"pretrain/cifar/{METHODS[method][1]}.yaml"


def overrides(run: Run, budget: Budget, run_dir: Path) -> List[str]:
    """Every override of a run, later ones winning: the method's, the budget's, the row's, the
    ``--set`` values, the raw ones. No loader workers: on 2 cores they slow the step more than
    they save."""
    method = run.row.method
    out = method_overrides(method) + [
        "++data.dataset=custom",
        f"++data.train_path={budget.train}",
        f"++data.val_path={budget.val}",
        "++data.num_workers=0",
        f"++views.crop_size={CROP}",
    ]
    scale = budget.crop_min_scale
    if scale is not None:  # solo reads one crop_min_scale per pipeline; the MoCo form has three
        if METHODS[method][1].startswith("mocov3"):
            out += [f"++augmentations.{i}.rrc.crop_min_scale={scale}" for i in range(3)]
        else:
            out += [f"++augmentations.0.rrc.crop_min_scale={scale}"]
            out += [f"++views.positive_min_scale={scale}"]
    out.append("trainer=cpu")
    record = "++diagnostics.callbacks.record"
    out += [
        f"++name={method}-fashion_mnist-seed{run.seed}",
        f"++seed={run.seed}",
        f"++max_epochs={run.epochs}",
        f"++optimizer.batch_size={budget.batch_size}",
        "++scheduler.warmup_epochs=1",  # solo's 10 is longer than a CPU budget's whole run
        "++knn_eval.enabled=True",
        "++knn_eval.k=20",
        f"++checkpoint.dir={run_dir / 'ckpt'}",
        "++checkpoint.keep_prev=False",
        "++auto_resume.enabled=False",
        "++enable_progress_bar=False",
        f"{record}._target_=benchmarks.recorder.RunRecorder",
        f"{record}.path={run_dir / 'record.jsonl'}",
    ]
    if budget.limit_train_batches is not None:
        out.append(f"++limit_train_batches={budget.limit_train_batches}")
    out += run.row.overrides
    own = {f"method_kwargs.{k}" for k, _ in run.row.kwargs}  # a row's settings win over --set
    sets = [parse_set(s) for s in budget.sets]
    out += [f"++{k}={v}" for m, k, v in sets if m in (None, method) and k not in own]
    return out + list(budget.overrides)


def compose(config: str, overrides: Sequence[str]) -> DictConfig:
    """The shipped config with overrides, resolved, as main_pretrain.py gets it; Hydra's errors
    as :class:`BenchConfigError`."""
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
    """A run ready to launch: its folder, shipped config, overrides, command, resolved config."""

    run: Run
    run_dir: Path
    config: str
    overrides: List[str]
    command: List[str]
    resolved: DictConfig

    def write(self) -> None:
        """``config.yaml`` and ``command.sh`` (runnable by hand, from any folder)."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        head = [f"# {self.config} from attnce_plugin.configs, with these overrides:"]
        head += [f"#   {o}" for o in self.overrides]
        yaml = OmegaConf.to_yaml(self.resolved)
        (self.run_dir / "config.yaml").write_text("\n".join(head) + "\n" + yaml)
        path = f"PYTHONPATH={shlex.quote(str(REPO_ROOT))}${{PYTHONPATH:+:$PYTHONPATH}}"
        command = " ".join(map(shlex.quote, self.command))
        text = f"#!/bin/sh\ncd {shlex.quote(str(self.run_dir))} && {path} {command}\n"
        (self.run_dir / "command.sh").write_text(text)


def prepare(run: Run, budget: Budget, out: Path) -> Prepared:
    """Compose a run's config and command (Hydra errors raise :class:`BenchConfigError`)."""
    from attnce_plugin.install import solo_checkout_dir

    run_dir = out / "runs" / run.key
    config = config_name(run.row.method)
    ovr = overrides(run, budget, run_dir)
    command = [
        sys.executable,
        str(solo_checkout_dir() / "main_pretrain.py"),
        "--config-path",
        "pkg://attnce_plugin.configs",
        "--config-name",
        config,
        *ovr,
    ]
    hook = "+hydra.callbacks.bench"  # else solo validates custom data at 224 px
    command += [f"{hook}._target_=benchmarks.hooks.ValidateAtTrainSize", f"{hook}.size={CROP}"]
    return Prepared(run, run_dir, config, ovr, command, compose(config, ovr))


def cpu_name() -> str:
    """The CPU's model name: seconds per epoch compare only on one processor."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        return next(ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


#: The fields of a ``result.json``, in the order of every committed one.
FIELDS = (
    "key label method comparison seed epochs matched_to status error epochs_done "
    "train_seconds seconds_per_epoch wall_seconds knn_acc1 linear_acc1 offline_acc1 "
    "offline_knn_acc1 offline_l2 offline_uniformity offline_eff_rank peak_mem_mib settings "
    "run_dir cpu plugin_version commit"
).split()


def provenance() -> Dict[str, str]:
    """The plugin version and the git commit of this checkout that trains a run ("-dirty" when
    its tracked code differs from that commit; "unknown" outside a git checkout)."""
    from attnce_plugin import __version__

    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(REPO_ROOT), *args], capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    commit = git("rev-parse", "HEAD") or "unknown"
    changed = git("status", "--porcelain", "--untracked-files=no", "--", "attnce_plugin")
    if commit != "unknown" and changed:
        commit += "-dirty"
    return {"plugin_version": __version__, "commit": commit}


def new_result(run: Run, **fields: Any) -> Result:
    row = run.row
    known = dict(
        key=run.key,
        label=row.label,
        method=row.method,
        comparison=row.comparison,
        seed=run.seed,
        epochs=run.epochs,
        status="ok",
        error="",
        epochs_done=0,
        matched_to=row.time_of.label if row.time_of else None,
        wall_seconds=0.0,
        settings=list(row.overrides),
        run_dir="",
        cpu="",
    )
    return {**dict.fromkeys(FIELDS), **known, **fields}


def launch(prep: Prepared) -> Result:
    """Train one run, then read its timings, online accuracies and peak memory from its record
    (the runner only waits: nothing polls the record while it grows)."""
    for stale in ("record.jsonl", "result.json"):
        (prep.run_dir / stale).unlink(missing_ok=True)
    shutil.rmtree(prep.run_dir / "ckpt", ignore_errors=True)
    prep.write()
    result = new_result(prep.run, run_dir=str(prep.run_dir), cpu=cpu_name(), **provenance())
    env = dict(os.environ, PYTHONWARNINGS=os.environ.get("PYTHONWARNINGS", "ignore"))
    # The run's cwd is its folder: this checkout's packages must be the ones imported there.
    paths = [str(REPO_ROOT), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    start = time.perf_counter()
    with open(prep.run_dir / "train.log", "w") as log:
        proc = subprocess.Popen(
            prep.command, cwd=prep.run_dir, stdout=log, stderr=subprocess.STDOUT, env=env
        )
        try:
            code = wait_showing_epochs(proc, prep.run_dir / "record.jsonl", prep.run.epochs)
        finally:  # Ctrl-C or SIGTERM: the training stops too
            if proc.poll() is None:
                proc.kill()
    result["wall_seconds"] = time.perf_counter() - start
    record = prep.run_dir / "record.jsonl"
    epochs = read_records(record, "epoch") if record.is_file() else []
    result["epochs_done"] = len(epochs)
    if epochs:
        seconds = sum(float(r["train_seconds"]) for r in epochs)
        last, peak = epochs[-1], max(float(r.get("peak_rss_mib") or 0) for r in epochs)
        result.update(
            train_seconds=seconds,
            seconds_per_epoch=seconds / len(epochs),
            knn_acc1=last.get("val_knn_acc1"),
            linear_acc1=last.get("val_acc1"),
            peak_mem_mib=peak or None,
        )
    if code != 0:
        tail = (prep.run_dir / "train.log").read_text(errors="replace").splitlines()[-15:]
        result.update(status="failed", error=f"exit {code}:\n" + "\n".join(tail))
    elif len(epochs) < prep.run.epochs:
        result.update(status="failed", error=f"{len(epochs)} of {prep.run.epochs} epochs recorded")
    return result


def wait_showing_epochs(proc: subprocess.Popen, record: Path, epochs: int) -> int:
    """Wait for the training process, showing its finished epochs and the time left on one
    updating line: the record is read when the process has run another ``PROGRESS_S`` seconds, not
    polled in a loop."""
    shown, tty = -1, sys.stderr.isatty()
    while True:
        try:
            code = proc.wait(timeout=PROGRESS_S)
        except subprocess.TimeoutExpired:
            code = None
        done = read_records(record, "epoch") if record.is_file() else []
        if len(done) != shown and done:
            shown = len(done)
            per_epoch = float(done[-1]["elapsed_seconds"]) / shown
            left = (epochs - shown) * per_epoch / 60
            line = f"    epoch {shown}/{epochs}, {per_epoch:.0f} s/epoch, ~{left:.0f} min left"
            print(("\r" if tty else "") + line, end="" if tty else "\n", file=sys.stderr)
        if code is not None:
            print("", file=sys.stderr) if tty and shown > 0 else None
            return code


def save_result(result: Result) -> None:
    # No run_dir inside: it is the record's own folder, wherever the record lies later.
    text = json.dumps(dict(result, run_dir=""), indent=2) + "\n"
    Path(result["run_dir"], "result.json").write_text(text)


def load_result(run_dir: Path) -> Optional[Result]:
    """A finished, successful run's result, or None."""
    try:
        data = json.loads((run_dir / "result.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return dict(data, run_dir=str(run_dir)) if data.get("status") == "ok" else None


def probe_into(result: Result, backbone: Callable[[], Any], budget: Budget, cfg: Any) -> None:
    """Fill the offline columns (a failure is recorded in ``error``, not raised)."""
    from benchmarks.probe import probe_backbone, probe_settings

    try:
        settings = probe_settings(OmegaConf.to_container(cfg, resolve=True))
        result.update(probe_backbone(backbone(), Path(budget.train), Path(budget.val), **settings))
    except Exception as err:  # a probe failure must not lose the pretraining result
        result["error"] = f"offline probe failed: {type(err).__name__}: {err}"


def equal_time_epochs(run: Run, results: Sequence[Result], out: Path) -> Union[int, str]:
    """An equal-time run's epochs, from the lowest seed on which its baseline and the row it
    matches have both finished (in this command or in an earlier part); else why not."""
    assert run.row.time_of is not None
    found: List[Dict[int, Result]] = []
    for row in (Row(run.row.method), run.row.time_of):
        folder = out / "runs" / Path(Run(row, 0, 0).key).parent
        prior = [load_result(p.parent) for p in folder.glob("seed*/result.json")]
        now = [r for r in results if r["key"].startswith(f"{folder.relative_to(out / 'runs')}/")]
        found.append({int(r["seed"]): r for r in prior + now if r and r["status"] == "ok"})
    seeds = sorted(set(found[0]) & set(found[1]))
    if not seeds:
        return f"no finished '{Row(run.row.method).label}' and '{run.row.time_of.label}' runs"
    b, t = found[0][seeds[0]], found[1][seeds[0]]
    if b.get("cpu") and t.get("cpu") and b["cpu"] != t["cpu"]:
        return (
            f"'{b['label']}' trained on {b['cpu']!r} and '{t['label']}' on {t['cpu']!r}: "
            "their seconds do not compare"
        )
    return matched_epochs(int(b["epochs"]), b["seconds_per_epoch"], t["seconds_per_epoch"])


def execute(
    runs: Sequence[Run],
    budget: Budget,
    out: Path,
    probe: bool = True,
    dry_run: bool = False,
    keep_checkpoints: bool = False,
) -> List[Result]:
    """Train (or reuse) and probe every run, in order; every config is composed before the first
    run starts, so that a bad override fails at once."""
    from benchmarks.probe import load_pretrained_backbone

    prepared = {r.key: prepare(r, budget, out) for r in runs if r.epochs}
    results: List[Result] = []
    for i, run in enumerate(runs, 1):
        what = f"[{i}/{len(runs)}] {run.row.label}, seed {run.seed}"
        prior = load_result(out / "runs" / run.key)  # to train it again, delete its folder
        if prior is not None and run.epochs in (0, prior["epochs"]):
            print(f"{what}: reused {prior['run_dir']}", file=sys.stderr)
            results.append(prior)
            continue
        if not run.epochs:
            n = equal_time_epochs(run, results, out)
            if isinstance(n, str):
                print(f"{what}: skipped: {n}", file=sys.stderr)
                results.append(new_result(run, status="skipped", error=n))
                continue
            run = dataclasses.replace(run, epochs=n)
        prep = prepared.get(run.key) or prepare(run, budget, out)
        if dry_run:
            prep.write()
            continue
        print(f"{what}, {run.epochs} epochs: training, log in {prep.run_dir}", file=sys.stderr)
        result = launch(prep)
        ckpts = sorted((prep.run_dir / "ckpt").rglob("*.ckpt"), key=lambda p: p.stat().st_mtime)
        if ckpts and (ckpts[-1].parent / "args.json").is_file():
            # solo-learn's parsed config: the untrained reference rows are built from it.
            shutil.copy(ckpts[-1].parent / "args.json", prep.run_dir / "args.json")
        if result["status"] == "ok" and probe:
            if not ckpts:
                result["error"] = "offline probe skipped: no checkpoint"
            else:
                backbone = lambda: load_pretrained_backbone(ckpts[-1])  # noqa: E731
                probe_into(result, backbone, budget, prep.resolved)
        if not keep_checkpoints:
            shutil.rmtree(prep.run_dir / "ckpt", ignore_errors=True)
        save_result(result)
        results.append(result)
        print(
            f"{what}: {result['status']}, {result['seconds_per_epoch'] or 0:.1f} s/epoch; "
            f"{result['error']}",
            file=sys.stderr,
        )
    return results


def reference_results(results: Sequence[Result], budget: Budget, out: Path) -> List[Result]:
    """The untrained backbone (one per seed) and the raw pixels, probed on the same images, the
    backbone rebuilt from a trained run's ``args.json``; records under ``<out>/runs/reference/``,
    reused when there."""
    from benchmarks.probe import Pixels, random_backbone

    sources = [Path(r["run_dir"], "args.json") for r in results if r["status"] == "ok"]
    args_json = next((p for p in sources if p.is_file()), None)
    if args_json is None:
        return []
    cfg = OmegaConf.create(json.loads(args_json.read_text()))
    seeds = sorted({int(r["seed"]) for r in results})
    refs = []
    for label, key, ref_seeds in ((UNTRAINED, "random-init", seeds), (PIXELS, "raw-pixels", [0])):
        for seed in ref_seeds:
            ref = new_result(Run(Row("simclr", comparison="reference"), seed, 0))
            ref.update(key=f"reference/{key}/seed{seed}", label=label, method="none", settings=[])
            ref["run_dir"] = str(out / "runs" / ref["key"])
            prior = load_result(Path(ref["run_dir"]))
            if prior is None:
                make = lambda s=seed: random_backbone(args_json, s)  # noqa: E731
                probe_into(ref, make if key == "random-init" else Pixels, budget, cfg)
                ref["status"] = "ok" if ref["offline_acc1"] is not None else "failed"
                Path(ref["run_dir"]).mkdir(parents=True, exist_ok=True)
                save_result(ref)
            refs.append(prior or ref)
    return refs
