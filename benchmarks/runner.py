"""The one runner: each run is solo-learn's own ``main_pretrain.py`` on a shipped config plus
overrides, in a subprocess, then the offline probe of its last checkpoint. A run's folder
``<out>/runs/<run.key>/`` holds ``config.yaml`` (resolved; the shipped config's name and every
override in its header), ``command.sh``, ``train.log``, ``record.jsonl`` (the RunRecorder's) and
``result.json`` (written whole or not at all); a run whose ``result.json`` says "ok" is finished,
and is reused. A run stopped before it finished (killed, a machine gone) keeps the checkpoint of
its last epoch, and the same command resumes it from there through solo-learn's
``resume_from_checkpoint``."""

from __future__ import annotations

import dataclasses
import importlib.resources
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from hydra import compose as hydra_compose
from hydra import initialize_config_dir, initialize_config_module
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from benchmarks.data import DATASETS, Dataset, subset
from benchmarks.recorder import read_records
from benchmarks.runs import (
    PIXELS,
    UNTRAINED,
    Preset,
    Result,
    Row,
    Run,
    identity,
    matched_epochs,
    method_of,
)

REPO_ROOT = Path(__file__).resolve().parents[1]
#: The embedded data's size: its views' and (benchmarks/hooks.py) its validation images'.
CROP = 32
PROGRESS_S = 10.0  # between looks at a training run's record
OURS = "pkg://attnce_plugin.configs"  # our configs' Hydra search path
#: A solo-learn config's method (its file names differ: barlow.yaml is barlow_twins).
METHOD_LINE = re.compile(r"^method: \"?(\w+)", re.M)


@dataclass
class Budget:
    """What every run shares beyond its row: the data set (``root``: ``--data-dir``, or the
    converted Fashion-MNIST), the settings (preset and options), the offline probe or none."""

    data: str
    root: Path
    note: str
    settings: Preset
    probe: bool = True  # the offline probe of each run's last checkpoint

    @property
    def spec(self) -> Dataset:
        return DATASETS[self.data]

    def splits(self, transform: Any) -> Tuple[Any, Any]:
        """The probes' train and validation images: class-stratified subsets of ``num_train`` (the
        data set's cap where None) and ``num_val`` (all where None)."""
        train, val = self.spec.splits(self.root, transform)
        return subset(train, self.num_train), subset(val, self.settings.num_val)

    @property
    def num_train(self) -> Optional[int]:
        return self.settings.num_train or self.spec.probe_cap


def parse_set(text: str) -> str:
    """The Hydra override ``++KEY=VALUE`` of ``--set KEY=VALUE``."""
    key, eq, value = text.partition("=")
    if not eq or not key.strip().lstrip("+"):
        raise ValueError(f"--set {text!r}: expected KEY=VALUE")
    return f"++{key.strip().lstrip('+')}={value.strip()}"


def device_overrides() -> List[str]:
    """One CPU process (devices "1": solo-learn takes its len) without loader workers (on 2 cores
    they cost more than they save); or every visible GPU (DDP where several), bf16, the config's
    data format where DALI is installed (else image folders)."""
    import torch

    n, dali = torch.cuda.device_count(), importlib.util.find_spec("nvidia.dali") is not None
    folders = [] if n and dali else ["++data.format=image_folder"]
    if not n:
        out = ["++accelerator=cpu", "++devices='1'", "++strategy=auto", "++precision=32"]
        out += ["++sync_batchnorm=False", "++num_sanity_val_steps=0", "++data.num_workers=0"]
        return out + folders
    out = ["++accelerator=gpu", f"++devices={list(range(n))}", "++precision=bf16-mixed"]
    return out + [f"++strategy={'ddp' if n > 1 else 'auto'}", f"++sync_batchnorm={n > 1}", *folders]


def overrides(run: Run, budget: Budget, run_dir: Path) -> List[str]:
    """Every override of a run, later ones winning: the method's, the data's, the device's, our
    recipe (our methods only), the budget's, the ``--set`` and raw ones, the row's."""
    spec, data, chosen = method_of(run.row.method), budget.spec, budget.settings
    train, val = data.paths(budget.root)
    out = [*spec.overrides, f"++data.dataset={data.solo_name}"]
    out += [f"++data.train_path={train}", f"++data.val_path={val}", *device_overrides()]
    if not spec.solo:
        scale = chosen.crop_min_scale
        pipelines = 3 if spec.config.startswith("mocov3") else 1  # solo reads one per pipeline
        out += [f"++views.crop_size={CROP}"] * (budget.data == "fashion-mnist")
        if scale is not None:
            out += [f"++augmentations.{i}.rrc.crop_min_scale={scale}" for i in range(pipelines)]
            out += [f"++views.positive_min_scale={scale}"] if pipelines == 1 else []
        out += chosen.recipe
    out += [f"++name={run.row.method}-{budget.data}-seed{run.seed}", f"++seed={run.seed}"]
    out += [f"++max_epochs={run.epochs}", f"++optimizer.batch_size={chosen.batch_size}"]
    warmup = chosen.warmup_epochs
    out += [f"++scheduler.warmup_epochs={warmup}"] if warmup is not None else []
    out += ["++knn_eval.enabled=True", "++knn_eval.k=20", f"++checkpoint.dir={run_dir / 'ckpt'}"]
    out += ["++checkpoint.keep_prev=False", "++auto_resume.enabled=False", "++wandb.enabled=False"]
    out += ["++enable_progress_bar=False", *chosen.sets]
    return out + list(run.row.overrides)


def config_of(run: Run, budget: Budget) -> Tuple[str, str]:
    """(config path for main_pretrain.py's ``--config-path``, config name) of a run's method on
    the budget's data; ValueError names what exists where none is shipped."""
    from attnce_plugin.install import solo_checkout_dir

    spec, data = method_of(run.row.method), budget.spec
    if not spec.solo:
        name = f"pretrain/{data.family}/{spec.config}{budget.settings.variant}.yaml"
        if not importlib.resources.files("attnce_plugin.configs").joinpath(name).is_file():
            raise ValueError(f"--methods {run.row.method}: no {name} ships in attnce_plugin")
        return OURS, name
    folder = solo_checkout_dir() / "scripts" / "pretrain" / str(data.solo_family)
    configs = {m[1]: p for p in folder.glob("*.y*ml") for m in METHOD_LINE.finditer(p.read_text())}
    if data.solo_family is None or spec.config not in configs:
        raise ValueError(
            f"--methods {run.row.method}: solo-learn ships no config of {spec.config} for --data "
            f"{budget.data} (its methods there: {sorted(configs) or 'none'})"
        )
    return str(folder), configs[spec.config].name


def compose(config: str, overrides: Sequence[str], path: str = OURS) -> DictConfig:
    """The config with overrides, resolved, as main_pretrain.py gets it; Hydra's errors as
    ValueError."""
    try:
        if path.startswith("pkg://"):
            init: Any = initialize_config_module(path[len("pkg://") :], version_base="1.2")
        else:
            init = initialize_config_dir(path, version_base="1.2")
        with init:
            cfg = hydra_compose(config, overrides=list(overrides))
        OmegaConf.resolve(cfg)
    except (HydraException, OmegaConfBaseException) as err:
        raise ValueError(f"{config} with overrides {list(overrides)}: {err}") from err
    return cfg


@dataclass
class Prepared:
    """A run ready to launch: its folder, shipped config, overrides, command, resolved config and
    the machine folders these name, by the ``<name>`` config.yaml writes for each."""

    run: Run
    run_dir: Path
    source: str
    config: str
    overrides: List[str]
    command: List[str]
    resolved: DictConfig
    folders: Dict[str, Path]

    def texts(self) -> Dict[str, str]:
        """``config.yaml`` (the shipped config's name and the overrides in its header) and
        ``command.sh``, each folder of this machine written as ``<name>``: a record reads the same
        wherever it trained. The run itself gets the real paths."""
        head = [f"# {self.config} from {self.source}, with these overrides:"]
        head += [f"#   {o}" for o in self.overrides]
        script = f"cd {shlex.quote(str(self.run_dir))} && PYTHONPATH={REPO_ROOT}${{PYTHONPATH:+:"
        script += f"$PYTHONPATH}} python3 {shlex.join(self.command[1:])}"
        texts = {"config.yaml": "\n".join(head) + "\n" + OmegaConf.to_yaml(self.resolved)}
        texts["command.sh"] = f"#!/bin/sh\n# Re-run this benchmark run by hand:\n{script}\n"
        for name, path in sorted(self.folders.items(), key=lambda f: -len(str(f[1]))):
            pattern = re.escape(str(path)) + "(?=[/\\s'\"$:]|$)"
            texts = {file: re.sub(pattern, f"<{name}>", text) for file, text in texts.items()}
        return texts

    def write(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        for file, text in self.texts().items():
            (self.run_dir / file).write_text(text)

    def written(self) -> bool:
        """Whether the folder's config.yaml is this run's: a checkpoint of another config (other
        epochs, settings, code defaults) is no point to resume from."""
        path = self.run_dir / "config.yaml"
        return path.is_file() and path.read_text() == self.texts()["config.yaml"]


def prepare(run: Run, budget: Budget, out: Path) -> Prepared:
    """Compose a run's config and command (ValueError names a bad override)."""
    from attnce_plugin.install import solo_checkout_dir

    run_dir = out / "runs" / run.key
    path, config = config_of(run, budget)
    ovr = overrides(run, budget, run_dir)
    solo = solo_checkout_dir()
    command = [sys.executable, str(solo / "main_pretrain.py"), "--config-path", path]
    hook = "+hydra.callbacks.bench"  # the record; the embedded data validated at its size
    command += ["--config-name", config, *ovr, f"{hook}._target_=benchmarks.hooks.Bench"]
    command += [f"{hook}.record={run_dir / 'record.jsonl'}"]
    command += [f"{hook}.size={CROP}"] * (budget.data == "fashion-mnist")
    folders = {"out": out, "repo": REPO_ROOT, "solo-learn": solo, "data": budget.root}
    return Prepared(run, run_dir, path, config, ovr, command, compose(config, ovr, path), folders)


def cpu_name() -> str:
    """The CPU's model name: seconds per epoch compare only on one processor."""
    lines = (
        Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").is_file() else []
    )
    return next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")), "?")


def provenance() -> Dict[str, str]:
    """The plugin version and the git commit of this checkout that trains a run ("-dirty" when
    its tracked code differs from that commit; "unknown" outside a git checkout)."""
    from attnce_plugin import __version__

    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(REPO_ROOT), *args], capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    commit = git("rev-parse", "HEAD") or "unknown"
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", "attnce_plugin")
    return {"plugin_version": __version__, "commit": commit + "-dirty" * bool(dirty)}


def new_result(run: Run, **fields: Any) -> Result:
    row = run.row
    result = dict(key=run.key, label=row.label, method=row.method, comparison=row.comparison)
    result.update(seed=run.seed, epochs=run.epochs, status="ok", error="", epochs_done=0)
    result.update(matched_to=row.time_of.label if row.time_of else None, wall_seconds=0.0)
    return {**result, "settings": list(row.overrides), "run_dir": "", "cpu": "", **fields}


def last_checkpoint(run_dir: Path) -> Optional[Tuple[Path, int]]:
    """(the newest checkpoint that loads, its epochs) of an unfinished run, or None. solo-learn
    deletes the previous checkpoint after the next one is written, so a file torn by a kill still
    leaves the one before it."""
    import torch

    found = []
    for path in (run_dir / "ckpt").rglob("*-ep=*.ckpt"):
        epoch = re.search(r"-ep=(\d+)\.ckpt$", path.name)
        found += [(int(epoch.group(1)) + 1, path)] if epoch else []
    for epochs, path in sorted(found, reverse=True):
        try:
            torch.load(path, map_location="cpu", weights_only=False, mmap=True)
        except Exception:  # torn by a kill: the one before it
            continue
        return path, epochs
    return None


def launch(prep: Prepared, budget: Budget) -> Result:
    """Train one run (or resume it from its last checkpoint), read its record, keep solo-learn's
    parsed config (``args.json``: the untrained reference rows are built from it), probe its last
    checkpoint, save its result."""
    from benchmarks.probe import backbone

    record, log = prep.run_dir / "record.jsonl", prep.run_dir / "train.log"
    result = new_result(prep.run, run_dir=str(prep.run_dir), cpu=cpu_name(), **provenance())
    resume = last_checkpoint(prep.run_dir) if prep.written() else None
    command, before = list(prep.command), 0.0
    if resume is None:
        shutil.rmtree(prep.run_dir, ignore_errors=True)  # an unfinished run's files are stale
        prep.write()
        save_result(dict(result, status="running", error="started, not finished"))
    else:
        ckpt, done = resume
        prior = read_result(prep.run_dir)  # the part before: "running", or "failed"
        kept = [r for r in read_records(record) if r.get("epoch", 0) <= done]
        write_atomically(record, "".join(json.dumps(r) + "\n" for r in kept))
        before = float(kept[-1]["elapsed_seconds"]) if kept else 0.0
        result["resumed"] = {"after_epoch": done, "commit": prior.get("commit", "unknown")}
        command.append(f"++resume_from_checkpoint='{ckpt}'")
        print(f"    resuming after epoch {done} from {ckpt}", file=sys.stderr)
    env = dict(os.environ, PYTHONWARNINGS=os.environ.get("PYTHONWARNINGS", "ignore"))
    # The run's cwd is its folder: this checkout's packages must be the ones imported there.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    start = time.perf_counter()
    with open(log, "a" if resume else "w") as fh:
        proc = subprocess.Popen(command, cwd=prep.run_dir, stdout=fh, stderr=fh, env=env)
        try:
            code = wait_showing_epochs(proc, record, prep.run.epochs)
        finally:  # Ctrl-C or SIGTERM: the training stops too (a no-op once it has ended)
            proc.kill()
    result["wall_seconds"] = before + time.perf_counter() - start
    epochs = read_records(record, "epoch")
    result["epochs_done"] = len(epochs)
    if epochs:
        seconds = sum(float(r["train_seconds"]) for r in epochs)
        peak = max(float(r.get("peak_rss_mib") or 0) for r in epochs)
        result.update(train_seconds=seconds, seconds_per_epoch=seconds / len(epochs))
        result.update(knn_acc1=epochs[-1].get("val_knn_acc1"), peak_mem_mib=peak or None)
        result.update(linear_acc1=epochs[-1].get("val_acc1"))
    if code != 0:
        tail = log.read_text(errors="replace").splitlines()[-15:]
        result.update(status="failed", error=f"exit {code}:\n" + "\n".join(tail))
    elif len(epochs) < prep.run.epochs:
        result.update(status="failed", error=f"{len(epochs)} of {prep.run.epochs} epochs recorded")
    ckpts = sorted((prep.run_dir / "ckpt").rglob("*.ckpt"), key=lambda p: p.stat().st_mtime)
    if ckpts and (ckpts[-1].parent / "args.json").is_file():
        shutil.copy(ckpts[-1].parent / "args.json", prep.run_dir / "args.json")
    if result["status"] == "ok" and budget.probe and not ckpts:
        result["error"] = "offline probe skipped: no checkpoint"
    elif result["status"] == "ok" and budget.probe:
        trained = lambda: backbone(ckpts[-1].parent / "args.json", ckpts[-1])  # noqa: E731
        probe_into(result, trained, budget, prep.resolved)
    if result["status"] == "ok":  # command.sh trains it again; an unfinished run resumes from it
        shutil.rmtree(prep.run_dir / "ckpt", ignore_errors=True)
    save_result(result)
    return result


def wait_showing_epochs(proc: subprocess.Popen, record: Path, epochs: int) -> int:
    """Wait for the training process, showing its finished epochs and the time left on one
    updating line; the record is read after each ``PROGRESS_S`` seconds of waiting, not polled."""
    shown, end = 0, "\r" if sys.stderr.isatty() else "\n"
    while True:
        try:
            code: Optional[int] = proc.wait(timeout=PROGRESS_S)
        except subprocess.TimeoutExpired:
            code = None
        done = read_records(record, "epoch")
        if len(done) > shown:
            shown = len(done)
            per_epoch = sum(float(r["train_seconds"]) for r in done) / shown
            left = (epochs - shown) * per_epoch / 60
            line = f"    epoch {shown}/{epochs}, {per_epoch:.0f} s/epoch, ~{left:.0f} min left"
            print(line, end=end, file=sys.stderr)
        if code is not None:
            print(end="\n" if shown and end == "\r" else "", file=sys.stderr)  # ends the line
            return code


def write_atomically(path: Path, text: str) -> None:
    """``path`` holds the old text or the new, whatever moment a kill comes."""
    part = path.with_name(path.name + ".part")
    part.write_text(text)
    os.replace(part, path)


def save_result(result: Result) -> None:
    # No run_dir inside: it is the record's own folder, wherever the record lies later.
    text = json.dumps(dict(result, run_dir=""), indent=2) + "\n"
    write_atomically(Path(result["run_dir"], "result.json"), text)


def read_result(run_dir: Path) -> Result:
    """A run folder's ``result.json``; {} where none reads (never written, or written by hand)."""
    try:
        return dict(json.loads((run_dir / "result.json").read_text()), run_dir=str(run_dir))
    except (OSError, ValueError):
        return {}


def read_results(out: Path, runs: Sequence[Run] = ()) -> List[Result]:
    """Every record in ``out/runs`` ("ok" or not): ``runs``' in their order, then by folder. A
    run folder with a record but no readable ``result.json`` (a run killed before it finished,
    under an older runner) is an "incomplete" result, its key its folder."""
    order = {(r.row, r.seed): i for i, r in enumerate(runs)}
    runs_dir = out / "runs"
    folders = {
        p.parent for name in ("record.jsonl", "result.json") for p in runs_dir.glob(f"**/{name}")
    }
    results = []
    for folder in sorted(folders, key=str):
        key = folder.relative_to(runs_dir).as_posix()
        comparison, label, seed = key.split("/")
        stub = dict(key=key, label=label, method="?", comparison=comparison, status="incomplete")
        stub.update(seed=int(seed.removeprefix("seed")), epochs=0, settings=[], error="no result")
        results.append(read_result(folder) or dict(stub, run_dir=str(folder)))
    return sorted(results, key=lambda r: order.get(identity(r), len(order)))


def probe_into(result: Result, backbone: Callable[[], Any], budget: Budget, cfg: Any) -> None:
    """Fill the offline columns (a failure is recorded in ``error``, not raised)."""
    from benchmarks.hooks import val_transform
    from benchmarks.probe import probe_backbone

    try:
        first = cfg.augmentations[0]  # solo-learn normalises the data as this pipeline says
        transform = val_transform(int(first.crop_size), first)
        result.update(probe_backbone(backbone(), *budget.splits(transform)))
    except Exception as err:  # a probe failure must not lose the pretraining result
        result["error"] = f"offline probe failed: {type(err).__name__}: {err}"


def equal_time_epochs(run: Run, out: Path) -> Union[int, str]:
    """An equal-time run's epochs, from the lowest seed on which its baseline and the row it
    matches have both finished (in this command or an earlier part); else why not."""
    assert run.row.time_of is not None
    base, target = Row(run.row.method), run.row.time_of
    done = {identity(r): r for r in read_results(out) if r["status"] == "ok"}
    seeds = sorted(s for row, s in filter(None, done) if row == base and (target, s) in done)
    if not seeds:
        return f"no finished '{base.label}' and '{target.label}' runs"
    b, t = done[base, seeds[0]], done[target, seeds[0]]
    if b.get("cpu") and t.get("cpu") and b["cpu"] != t["cpu"]:
        where = f"'{base.label}' on {b['cpu']!r}, '{target.label}' on {t['cpu']!r}"
        return f"{where}: seconds do not compare"
    return matched_epochs(int(b["epochs"]), b["seconds_per_epoch"], t["seconds_per_epoch"])


def execute(runs: Sequence[Run], budget: Budget, out: Path) -> List[Result]:
    """Train (or reuse) and probe every run, in order; every config is composed before the first
    run starts, so that a bad override fails at once."""
    prepared = {r.key: prepare(r, budget, out) for r in runs if r.epochs}
    finished = {identity(r): r for r in read_results(out) if r["status"] == "ok"}
    results: List[Result] = []
    for i, run in enumerate(runs, 1):
        what = f"[{i}/{len(runs)}] {run.row.label}, seed {run.seed}"
        prior = finished.get((run.row, run.seed))  # to train it again, delete its folder
        if prior is not None and run.epochs in (0, prior["epochs"]):
            print(f"{what}: reused {prior['run_dir']}", file=sys.stderr)
            results.append(prior)
            continue
        if not run.epochs:
            n = equal_time_epochs(run, out)
            if isinstance(n, str):
                print(f"{what}: skipped: {n}", file=sys.stderr)
                results.append(new_result(run, status="skipped", error=n))
                continue
            run = dataclasses.replace(run, epochs=n)
        prep = prepared.get(run.key) or prepare(run, budget, out)
        print(f"{what}, {run.epochs} epochs: training, log in {prep.run_dir}", file=sys.stderr)
        results.append(r := launch(prep, budget))
        done = f"{what}: {r['status']}, {r.get('seconds_per_epoch') or 0:.1f} s/epoch"
        print("; ".join(filter(None, [done, r["error"]])), file=sys.stderr)
    return results


def reference_results(results: Sequence[Result], budget: Budget, out: Path) -> List[Result]:
    """The untrained backbone (one per seed, built from a trained run's ``args.json``) and the raw
    pixels, probed on the same images; records under ``<out>/runs/reference/``, reused."""
    import torch

    from benchmarks.probe import backbone

    sources = [Path(r["run_dir"], "args.json") for r in results if r["status"] == "ok"]
    args_json = next((p for p in sources if p.is_file()), None)
    if args_json is None:
        return []
    cfg = OmegaConf.create(json.loads(args_json.read_text()))
    seeds = sorted({int(r["seed"]) for r in results})
    finished = {r["key"]: r for r in read_results(out) if r["status"] == "ok"}
    refs = []
    for label, key, ref_seeds in ((UNTRAINED, "random-init", seeds), (PIXELS, "raw-pixels", [0])):
        for seed in ref_seeds:
            ref = new_result(Run(Row("simclr", comparison="reference"), seed, 0), cpu=cpu_name())
            ref.update(provenance())  # the probe's code, as a trained run's
            ref.update(key=f"reference/{key}/seed{seed}", label=label, method="none", settings=[])
            ref["run_dir"] = str(out / "runs" / ref["key"])
            prior = finished.get(ref["key"])
            if prior is None:
                untrained = lambda s=seed: backbone(args_json, seed=s)  # noqa: E731
                probe_into(ref, untrained if label == UNTRAINED else torch.nn.Flatten, budget, cfg)
                ref["status"] = "ok" if ref.get("offline_acc1") is not None else "failed"
                Path(ref["run_dir"]).mkdir(parents=True, exist_ok=True)
                save_result(ref)
            refs.append(prior or ref)
    return refs
