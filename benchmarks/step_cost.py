"""Training-step cost through Lightning: s/step, images/s and peak memory of SimCLR, AttentionNCE,
MoCo v3 and AttentionNCE's MoCo form, each beside its plain-torch bound::

    python3 -m benchmarks.step_cost --device cuda --out bench_out/step_cuda.md        # 16-mixed
    python3 -m benchmarks.step_cost --threads 2 --methods simclr attentionnce    # 32 px, fp32

A method row: the shipped ``pretrain/custom/`` config with the run table's overrides, built as
``main_pretrain.py`` builds it, trained through Lightning on one fixed batch of random crops:
``--warmup`` steps, then ``--rounds`` fits of ``--steps`` steps; s/step is the median fit's (range:
min-max), its phases and peak memory the run recorder's. Its bound: copies of its backbone and
projector stepped in plain torch on the same crops and precision (every view forwarded alone, a
squared-norm loss, SGD; the MoCo forms differentiate the 2 anchors and run every view through a
no-grad copy); its phases: the median step less its median forward and optimizer step. ``--runs``
adds the method's step in the records of a ``python3 -m benchmarks --out`` folder.
"""

from __future__ import annotations

import argparse
import copy
import inspect
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Dict, List, Optional, Sequence

import torch
from omegaconf import OmegaConf

from benchmarks.recorder import PHASES, RunRecorder, read_records
from benchmarks.report import table
from benchmarks.runner import compose
from benchmarks.runs import METHODS, TIME_MATCH, Row, Run, method_overrides

#: The rows, each with the baseline it is compared with (the run table's equal-time pairs).
BASELINE = {m: base for base, target in TIME_MATCH.items() for m in (base, target)}


def time_interleaved(calls: Dict[str, Callable], repeats: int, device: torch.device) -> Dict:
    """Median seconds of each call over ``repeats`` rounds, each round starting at another call
    (a slow phase of a shared machine hits all alike)."""
    sync = torch.cuda.synchronize if device.type == "cuda" else lambda: None
    names, samples = list(calls), {name: [] for name in calls}
    for rep in range(repeats):
        for name in names[rep % len(names) :] + names[: rep % len(names)]:
            sync()
            start = time.perf_counter()
            calls[name]()
            sync()
            samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(s) for name, s in samples.items()}


def overrides(args: argparse.Namespace, train_path: str, method: str) -> List[str]:
    # One GPU: SyncBatchNorm would do nothing there.
    gpu = ["++devices=[0]", "++strategy=auto", "++sync_batchnorm=False"]
    out = [*method_overrides(method), *(["trainer=cpu"] if args.device == "cpu" else gpu)]
    out += [f"++precision={args.precision}", f"++data.train_path={train_path}", "~data.val_path"]
    out += [f"++views.crop_size={args.size}", f"++optimizer.batch_size={args.batch_size}"]
    out += [f"++performance.disable_channel_last={str(not args.channels_last).lower()}"]
    out += ["++knn_eval.enabled=False", "++scheduler.warmup_epochs=0", "++max_epochs=1"]
    return out


def build(config: str, overrides: Sequence[str]) -> Any:
    """(model, cfg) as main_pretrain.py builds them from ``pretrain/custom/<config>.yaml``, the
    shipped configs' Hydra callback called as Hydra calls it, on main_pretrain.py's globals."""
    import solo.args.pretrain
    from solo.methods import METHODS as SOLO_METHODS
    from solo.utils.misc import make_contiguous

    from attnce_plugin.seam import SoloLearnCallback

    cfg = compose(f"pretrain/custom/{config}.yaml", overrides)
    task = SimpleNamespace(__globals__={"parse_cfg": solo.args.pretrain.parse_cfg})
    SoloLearnCallback().on_job_start(cfg, task_function=task)
    OmegaConf.set_struct(cfg, False)
    cfg = task.__globals__["parse_cfg"](cfg)
    model = SOLO_METHODS[cfg.method](cfg)
    make_contiguous(model)
    if not cfg.performance.disable_channel_last:
        model = model.to(memory_format=torch.channels_last)
    return model, cfg


def fit(model: Any, cfg: Any, batch: List[Any], steps: int, record: Path) -> List[Dict]:
    """``steps`` steps of the same batch with the config's trainer keys; the recorder's records."""
    from lightning.pytorch import Trainer

    keys = inspect.signature(Trainer.__init__).parameters
    kwargs = {k: v for k, v in OmegaConf.to_container(cfg).items() if k in keys}
    kwargs.update(callbacks=[RunRecorder(record)], max_epochs=1, limit_train_batches=steps)
    kwargs.update(logger=False, enable_checkpointing=False, enable_progress_bar=False)
    kwargs.update(enable_model_summary=False, num_sanity_val_steps=0)
    # batch_size=None: the items are the batches, passed through as they are.
    loader = torch.utils.data.DataLoader([batch] * steps, batch_size=None)
    record.unlink(missing_ok=True)
    Trainer(**kwargs).fit(model, train_dataloaders=loader)
    return read_records(record)


def bound(model: Any, crops: List[torch.Tensor], mocov3: bool, args: argparse.Namespace) -> Dict:
    """The plain-torch step of ``model``'s network on ``crops`` (see the module docstring)."""
    device = crops[0].device  # Lightning left the model on the CPU after its fits
    net = copy.deepcopy(torch.nn.Sequential(model.backbone, model.projector)).to(device)
    momentum = copy.deepcopy(net).requires_grad_(False) if mocov3 else None
    opt = torch.optim.SGD(net.parameters(), lr=1e-3, momentum=0.9)
    crops = [c.to(memory_format=torch.channels_last) if args.channels_last else c for c in crops]
    dtype = {"16-mixed": torch.float16, "bf16-mixed": torch.bfloat16}.get(args.precision)

    def forward() -> torch.Tensor:
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            with torch.no_grad():
                [momentum(c) for c in (crops if mocov3 else [])]
            return sum(net(c).float().square().mean() for c in crops[: 2 if mocov3 else None])

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        forward().backward()
        opt.step()  # the gradients stay: the optimizer's own timing steps on them

    for _ in range(args.warmup):
        step()
    calls = {"step": step, "forward": forward, "optimizer": opt.step}
    t = time_interleaved(calls, args.rounds * args.steps, device)
    backward = t["step"] - t["forward"] - t["optimizer"]
    return {"s": t["step"], "range": None, **t, "backward": backward, "data": 0.0, "peak": None}


def phases(epoch: Dict[str, Any], steps: int) -> Dict[str, float]:
    """The recorder's phases of an epoch, per step ("optimizer" is printed "rest")."""
    return {k: epoch[f"{k}_seconds"] / steps for k in PHASES}


def measure(method: str, args: argparse.Namespace, tmp: Path, ran: List[Dict]) -> List[Dict]:
    """The method's row, its run rows (``ran``: from run_row) and its bound."""
    model, cfg = build(METHODS[method][1], overrides(args, str(tmp / "data"), method))
    device, gen = torch.device(args.device), torch.Generator().manual_seed(0)
    sizes = [int(p.crop_size) for p in cfg.augmentations for _ in range(int(p.num_crops))]
    crops = [torch.randn(args.batch_size, 3, s, s, generator=gen).to(device) for s in sizes]
    targets = torch.randint(0, int(cfg.data.num_classes), (args.batch_size,), generator=gen)
    batch = [torch.arange(args.batch_size, device=device), crops, targets.to(device)]
    if args.warmup:
        fit(model, cfg, batch, args.warmup, tmp / "record.jsonl")
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    seconds, split = [], []
    for _ in range(args.rounds):
        records = fit(model, cfg, batch, args.steps, tmp / "record.jsonl")
        losses = [r["loss"] for r in records if r["event"] == "step"]
        if len(losses) != args.steps or None in losses:  # None: a non-finite loss
            raise RuntimeError(f"{method}: step losses {losses}, expected {args.steps} finite ones")
        epoch = next(r for r in records if r["event"] == "epoch")
        seconds.append(epoch["train_seconds"] / args.steps)
        split.append(phases(epoch, args.steps))
    precision = next(r for r in records if r["event"] == "fit_start")["precision"]
    peak = epoch["peak_cuda_mib" if device.type == "cuda" else "peak_rss_mib"]  # only grows
    row = {"method": method, "views": len(sizes), "precision": precision, "peak": peak}
    row.update(s=statistics.median(seconds), range=(min(seconds), max(seconds)))
    row.update({k: statistics.fmean(p[k] for p in split) for k in PHASES})
    plain = {**row, "method": "bound", **bound(model, crops, "mocov3" in method, args)}
    return [row, *({**row, **r} for r in ran), plain]


def run_row(method: str, out: Path, args: argparse.Namespace) -> Dict[str, Any]:
    """The method's step in a real run (its loader included): from seed 0's record under ``out``,
    the last epoch's s/step and phases (range: over the epochs)."""
    run_dir = out / "runs" / Run(Row(method, 0 if BASELINE[method] == method else 4), 0, 0).key
    if not (run_dir / "record.jsonl").is_file():
        raise FileNotFoundError(f"--runs {out}: no record of {method} in {run_dir}")
    cfg = OmegaConf.load(run_dir / "config.yaml")
    got, want = (cfg.optimizer.batch_size, cfg.views.crop_size), (args.batch_size, args.size)
    if got != want:
        raise ValueError(f"--runs: {run_dir} trained at (batch, px) {got}, not {want}")
    records = read_records(run_dir / "record.jsonl")
    n = next(r["num_training_batches"] for r in records if r["event"] == "fit_start")
    epochs = [r for r in records if r["event"] == "epoch"]
    per_step = [e["train_seconds"] / n for e in epochs]
    row = {"method": f"{method} (run)", "s": per_step[-1], "peak": epochs[-1]["peak_rss_mib"]}
    return {**row, "range": (min(per_step), max(per_step)), **phases(epochs[-1], n)}


def cells(r: Dict[str, Any], args: argparse.Namespace) -> List[Any]:
    span = "{:.4f}-{:.4f}".format(*r["range"]) if r["range"] else "-"
    speed, phase = f"{args.batch_size / r['s']:.1f}", [f"{r[k]:.4f}" for k in PHASES]
    return [r["method"], r["views"], r["precision"], f"{r['s']:.4f}", span, speed, *phase]


def report(groups: Sequence[List[Dict]], args: argparse.Namespace, argv: Sequence[str]) -> str:
    gpu = f" ({torch.cuda.get_device_name(0)})" if args.device == "cuda" else ""
    peak = "CUDA max_memory_allocated" if gpu else "process peak RSS so far"
    head = (
        f"device {args.device}{gpu}, torch {torch.__version__}, threads {torch.get_num_threads()}, "
        f"resnet18 (ImageNet stem), batch {args.batch_size}, {args.size} px, channels_last "
        f"{'on' if args.channels_last else 'off'}, s/step: median of {args.rounds} fits of "
        f"{args.steps} steps each (range: their min-max) after {args.warmup} warm-up steps; "
        f"phases: mean s/step; peak memory: {peak}"
    )
    cols = "method views precision s/step range images/s data forward backward rest".split()
    cols += ["to its bound", "to simclr", "to its base", "peak MiB"]
    by = {r["method"]: r for group in groups for r in group[:-1]}
    body = []
    for *rows, plain in groups:
        base = BASELINE[rows[0]["method"]]
        for r in rows:
            tag = r["method"][len(rows[0]["method"]) :]  # a run row is compared with run rows
            others = {"bound": plain, "simclr": by.get("simclr" + tag), base: by.get(base + tag)}
            x = {k: f"{r['s'] / o['s']:.2f}x" if o else "n/a" for k, o in others.items()}
            body.append(cells(r, args) + [x["bound"], x["simclr"], f"{x[base]} ({base})"])
            body[-1].append(f"{r['peak']:.0f}")
        body.append(cells(plain, args) + ["-"] * 4)
    command = " ".join(["python3 -m benchmarks.step_cost", *argv])
    return f"<!-- {command} -->\n\n{head}\n\n{table(cols, body)}\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    add = p.add_argument
    add("--device", choices=("cpu", "cuda"), default="cpu")
    add("--out", type=Path, help="also write the table to this file")
    # 1 thread: on a shared machine a 2-thread OpenMP barrier stalls while another process runs.
    add("--threads", type=int, default=1, help="CPU threads (0: torch's default)")
    add("--precision", help="Lightning's (default 16-mixed on cuda, 32 on cpu)")
    add("--channels-last", action=argparse.BooleanOptionalAction, default=True)
    add("--batch-size", type=int, default=128)
    add("--size", type=int, help="crop px (default 224 on cuda, 32 on cpu)")
    add("--steps", type=int, default=20, help="timed steps per fit")
    add("--rounds", type=int, default=5, help="timed fits per method (median)")
    add("--warmup", type=int, default=5, help="untimed steps first")
    add("--methods", nargs="+", choices=list(BASELINE), default=list(BASELINE))
    add("--runs", type=Path, help="a benchmarks --out folder: its runs' steps too")
    args = p.parse_args(argv)
    if args.steps < 1 or args.rounds < 1 or args.warmup < 0:
        p.error("--steps and --rounds must be >= 1, --warmup >= 0")
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda but torch.cuda.is_available() is False")
    if args.device == "cpu" and args.threads > 0:
        torch.set_num_threads(args.threads)
    args.precision = args.precision or ("16-mixed" if args.device == "cuda" else "32")
    args.size = args.size or (224 if args.device == "cuda" else 32)
    try:  # the records asked for exist, before anything is timed
        ran = {m: [run_row(m, args.runs, args)] if args.runs else [] for m in args.methods}
    except (ValueError, FileNotFoundError) as err:
        p.error(str(err))
    warnings.filterwarnings("ignore")  # solo-learn's and Lightning's deprecations and hints
    groups = []
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(10):  # parse_cfg counts data.train_path's class folders
            (Path(tmp) / "data" / f"class{k}").mkdir(parents=True)
        for method in args.methods:
            groups.append(measure(method, args, Path(tmp), ran[method]))
            print(f"  [{method}: {groups[-1][0]['s']:.4f} s/step]", file=sys.stderr, flush=True)
    text = report(groups, args, argv)
    print(text, end="")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
