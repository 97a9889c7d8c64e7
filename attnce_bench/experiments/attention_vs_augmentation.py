#!/usr/bin/env python3
"""Does the positive attention find hard positives? alpha of a positive view vs its crop scale.

For a trained solo-learn checkpoint (``attentionnce``, ``mocov3_attentionnce``, or ``simclr`` with
an explicit ``--d-pos``) and an image folder, every image gets one anchor view, M - 1 reference
positives and one probe positive: a fixed-scale crop (RandomResizedCrop with scale=(s, s), so only
its aspect ratio is random) of area fraction s, at the positive crops' size. For each s the probe's
positive attention ``alpha = softmax_m(cos(anchor, p_m) / d_pos)`` is computed exactly as the loss
does (L2-normalised embeddings, :func:`attnce_plugin.attention.positive_attention`); the references
and the anchor are shared by all scales, so the scales are compared on the same draws.

Encoders (as in training): ``attentionnce`` / ``simclr``: anchor and positives through backbone +
projector (``anchor: mean`` averages the normalised projections of 2 anchor views). MoCo form:
the anchor query from backbone + projector + predictor, the positives' keys from the momentum
backbone + projector; the loss's attention also covers the other anchor view's key, so P = M + 1
entries there (P = M otherwise) and ``alpha*P = 1`` means uniform attention.

Outputs in --out: table.md (also printed), results.csv, results.json, plot.png (alpha*P vs scale).

Usage:
    python3 -m attnce_bench.experiments.attention_vs_augmentation --ckpt trained_models/.../run-ep=399.ckpt \\
        --data datasets/cifar10/val --num-images 512 --repeats 4 \\
        --scales 1.0,0.5,0.25,0.12,0.06 --out attn_vs_aug
"""

from __future__ import annotations

import argparse
import copy
import csv
import json
import math
import random
import shlex
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

import torch
import torch.nn.functional as F

from attnce_plugin.attention import positive_attention  # noqa: E402

#: Form of each supported method: which networks give the anchor and the positives.
FORMS = {"attentionnce": "simclr", "simclr": "simclr", "mocov3_attentionnce": "moco"}
#: Photometric settings of a solo-learn pipeline that ``--probe-photometric none`` switches off.
PHOTOMETRIC = (
    "color_jitter",
    "grayscale",
    "gaussian_blur",
    "solarization",
    "equalization",
    "horizontal_flip",
)


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    """Parse and validate the command line (errors name the flag and exit with status 2)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ckpt", type=Path, required=True, help="solo-learn .ckpt")
    p.add_argument("--args", type=Path, help="its args.json (default: beside the .ckpt)")
    p.add_argument("--data", type=Path, required=True, help="ImageFolder (train or val)")
    p.add_argument("--num-images", type=int, default=256, help="seeded subset size")
    p.add_argument("--scales", default="1.0,0.5,0.25,0.12,0.06", help="probe area fractions")
    p.add_argument("--num-positives", type=int, help="M (default: the checkpoint's)")
    p.add_argument("--repeats", type=int, default=2, help="random draws per image")
    p.add_argument("--d-pos", type=float, help="attention scale (default: the checkpoint's)")
    p.add_argument(
        "--reference-aug",
        choices=("checkpoint", "standard"),
        default="checkpoint",
        help="checkpoint: the run's positive pipelines; standard: RRC(0.08, 1) + flip",
    )
    p.add_argument(
        "--probe-photometric",
        choices=("same", "none"),
        default="same",
        help="same: the references' colour/blur/flip recipe; none: crop only",
    )
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=64, help="(image, repeat) draws per batch")
    p.add_argument("--num-workers", type=int, default=0)
    p.add_argument("--out", type=Path, required=True, help="output folder")
    args = p.parse_args(argv)

    try:
        args.scales = sorted({float(s) for s in args.scales.split(",") if s.strip()}, reverse=True)
    except ValueError:
        p.error(f"--scales must be comma-separated numbers in (0, 1], got {args.scales!r}")
    if not args.scales or not all(0.0 < s <= 1.0 for s in args.scales):
        p.error(f"--scales must be numbers in (0, 1] (area fractions), got {args.scales}")
    if args.num_positives is not None and args.num_positives < 2:
        p.error(
            f"--num-positives must be >= 2, got {args.num_positives}: with M = 1 the probe is "
            "the only positive and its alpha is 1 whatever the crop"
        )
    for flag in ("num_images", "repeats", "batch_size"):
        if getattr(args, flag) < 1:
            p.error(f"--{flag.replace('_', '-')} must be >= 1, got {getattr(args, flag)}")
    if args.num_workers < 0:
        p.error(f"--num-workers must be >= 0, got {args.num_workers}")
    if args.d_pos is not None and not (math.isfinite(args.d_pos) and args.d_pos > 0):
        p.error(f"--d-pos must be a finite number > 0, got {args.d_pos}")
    args.args = args.args or args.ckpt.parent / "args.json"
    for flag, path, kind in (
        ("--ckpt", args.ckpt, "file"),
        ("--args", args.args, "file"),
        ("--data", args.data, "dir"),
    ):
        if not (path.is_file() if kind == "file" else path.is_dir()):
            p.error(
                f"{flag}: no {kind} at {path}" + (" (pass --args PATH)" if flag == "--args" else "")
            )
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        p.error(f"--device {args.device}: CUDA is not available here; use --device cpu")
    run = json.loads(args.args.read_text())
    method = run.get("method")
    if method not in FORMS:
        p.error(
            f"--ckpt is a {method!r} checkpoint; allowed methods: {sorted(FORMS)} (others have "
            "no positive attention to measure)"
        )
    if method == "simclr" and args.d_pos is None:
        p.error(
            "--d-pos is required for a simclr checkpoint (it has no positive attention; the "
            "result is what AttentionNCE's attention would give on a SimCLR encoder)"
        )
    args.run, args.method, args.form = run, method, FORMS[method]
    crops = [a for a in run["augmentations"] for _ in range(int(a["num_crops"]))]
    if args.num_positives is None:
        args.num_positives = len(crops) - 2
        if args.num_positives < 2:
            p.error(
                f"--num-positives is required: the checkpoint has {len(crops) - 2} positive "
                "crop(s) and M must be >= 2"
            )
    if args.d_pos is None:
        args.d_pos = float(run["method_kwargs"]["d_pos"])
    return args


def pipeline_configs(run: Dict[str, Any], num_positives: int, reference: str) -> Dict[str, Any]:
    """solo-learn augmentation configs: ``anchor``, ``other`` (2nd anchor crop), ``positives``.

    Positive slot m uses the pipeline of the run's positive crop m (cycled if M differs; a run
    without positive crops, i.e. SimCLR, uses its 2nd anchor crop, which SimCLR treats as the
    positive). ``standard`` replaces them by RRC(0.08, 1) + flip at the same size.
    """
    from omegaconf import OmegaConf

    crops = [a for a in run["augmentations"] for _ in range(int(a["num_crops"]))]
    pos = crops[2:] or crops[1:2]
    slots = [OmegaConf.create(pos[m % len(pos)]) for m in range(num_positives)]
    if reference == "standard":
        for cfg in slots:
            cfg.rrc = {"enabled": True, "crop_min_scale": 0.08, "crop_max_scale": 1.0}
            for key in PHOTOMETRIC:
                cfg[key] = {**cfg.get(key, {}), "prob": 0.5 if key == "horizontal_flip" else 0.0}
    return {
        "anchor": OmegaConf.create(crops[0]),
        "other": OmegaConf.create(crops[1]),
        "positives": slots,
    }


def probe_config(slot: Any, scale: float, photometric: str) -> Any:
    """The probe's pipeline: ``slot``'s recipe with a fixed RRC scale (and optionally no colour)."""
    cfg = copy.deepcopy(slot)  # DictConfig.copy() would share the nested nodes
    cfg.rrc = {"enabled": True, "crop_min_scale": scale, "crop_max_scale": scale}
    if photometric == "none":
        for key in PHOTOMETRIC:
            cfg[key] = {**cfg.get(key, {}), "prob": 0.0}
    return cfg


class ProbeViews(torch.utils.data.Dataset):
    """Item ``i * R + r``: draw r of image i, as a dict of [3, h, w] tensors ``anchor``,
    ``other`` (2nd anchor view, only if its transform is given), ``refs`` (list of M - 1) and
    ``probes`` (list, one per scale)."""

    def __init__(
        self, images: Any, subset: List[int], repeats: int, seed: int, transforms: Dict[str, Any]
    ) -> None:
        self.images, self.subset, self.repeats, self.seed = images, subset, repeats, seed
        self.t = transforms

    def __len__(self) -> int:
        return len(self.subset) * self.repeats

    def __getitem__(self, item: int) -> Dict[str, Any]:
        # torchvision (and solo's blur) draw from the global RNGs: seed them per item so that the
        # views do not depend on batch size, workers or order.
        torch.manual_seed(self.seed * 1_000_003 + item)
        random.seed(self.seed * 1_000_003 + item)
        img, _ = self.images[self.subset[item // self.repeats]]
        views = {"anchor": self.t["anchor"](img)}
        if self.t["other"] is not None:
            views["other"] = self.t["other"](img)
        views["refs"] = [t(img) for t in self.t["refs"]]
        views["probes"] = [t(img) for t in self.t["probes"]]
        return views


def load_model(run: Dict[str, Any], ckpt: Path, device: torch.device) -> torch.nn.Module:
    """Rebuild the run's solo-learn method from its args.json and load the checkpoint, eval mode."""
    from attnce_plugin.solo_compat import require_solo

    require_solo()
    from omegaconf import OmegaConf
    from solo.methods import METHODS

    from attnce_plugin.registration import register

    register()  # our methods into solo.methods.METHODS (idempotent)

    cfg = OmegaConf.create(run)
    OmegaConf.set_struct(cfg, False)
    model = METHODS[run["method"]](cfg)
    state = torch.load(ckpt, map_location="cpu", weights_only=False)
    missing, unexpected = model.load_state_dict(state.get("state_dict", state), strict=False)
    if missing or unexpected:
        raise SystemExit(
            f"{ckpt}: weights do not fit the {run['method']} model of its args.json: "
            f"missing {missing[:5]}, unexpected {unexpected[:5]}"
        )
    return model.to(device).eval()


def _embed(
    fn: Callable[[torch.Tensor], torch.Tensor], views: List[torch.Tensor]
) -> List[torch.Tensor]:
    """``fn`` on each [b, 3, h, w] of ``views``, one call per distinct shape (fewer, fuller
    batches; eval-mode BatchNorm makes the outputs independent of batching)."""
    out: List[Optional[torch.Tensor]] = [None] * len(views)
    for shape in {tuple(v.shape) for v in views}:
        idx = [i for i, v in enumerate(views) if tuple(v.shape) == shape]
        for i, z in zip(idx, fn(torch.cat([views[i] for i in idx])).chunk(len(idx))):
            out[i] = z
    return out  # type: ignore[return-value]


@torch.no_grad()
def encode(
    model: Any, form: str, mean_anchor: bool, batch: Dict[str, Any], device: torch.device
) -> Dict[str, Any]:
    """Embeddings of one batch of b draws: ``anchor`` [b, d], ``refs`` [b, R, d] (MoCo: the other
    anchor view's key first, as in the loss; R = P - 1), ``probes`` list of [b, d]."""
    other = [batch["other"]] if "other" in batch else []
    views = [v.to(device) for v in [*other, *batch["refs"], *batch["probes"]]]
    refs_end = len(other) + len(batch["refs"])
    if form == "moco":
        anchor = model(batch["anchor"].to(device))["q"]
        keys = _embed(lambda x: model.momentum_forward(x)["k"], views)
        refs = keys[:refs_end]  # the other anchor view's key is a positive in the MoCo form
    else:
        anchor = model(batch["anchor"].to(device))["z"]
        keys = _embed(lambda x: model.multicrop_forward(x)["z"], views)
        refs = keys[len(other) : refs_end]
        if mean_anchor:  # AttentionNCE*: mean of the 2 anchor views' unit projections
            anchor = (F.normalize(anchor, dim=-1) + F.normalize(keys[0], dim=-1)) / 2
    return {"anchor": anchor, "refs": torch.stack(refs, dim=1), "probes": keys[refs_end:]}


def probe_attention(
    anchor: torch.Tensor, refs: torch.Tensor, probe: torch.Tensor, d_pos: float
) -> Dict[str, torch.Tensor]:
    """The probe positive's attention among the P = R + 1 positives of each anchor.

    Args:
        anchor: [n, d] anchor embeddings (any norm; normalised here, as the loss does).
        refs: [n, R, d] reference positives' embeddings, R >= 1.
        probe: [n, d] probe positives' embeddings.
        d_pos: positive-attention scale > 0.

    Returns:
        [n] tensors: ``alpha`` of the probe, ``alpha_p`` (= alpha * P), ``cos_anchor_probe``,
        ``cos_anchor_refs`` (mean over refs), ``cos_probe_refs`` (mean over refs), ``lowest``
        (1.0 where no reference gets less attention than the probe).
    """
    a = F.normalize(anchor.float(), dim=-1)
    r = F.normalize(refs.float(), dim=-1)
    pr = F.normalize(probe.float(), dim=-1)
    cands = torch.cat([r, pr.unsqueeze(1)], dim=1)  # [n, P, d], probe last
    sims = (a.unsqueeze(1) * cands).sum(dim=-1)  # [n, P], as in the loss
    alpha = positive_attention(sims, d_pos)
    probe_alpha = alpha[:, -1]
    return {
        "alpha": probe_alpha,
        "alpha_p": probe_alpha * alpha.shape[1],
        "cos_anchor_probe": sims[:, -1],
        "cos_anchor_refs": sims[:, :-1].mean(dim=1),
        "cos_probe_refs": (r * pr.unsqueeze(1)).sum(dim=-1).mean(dim=1),
        "lowest": (probe_alpha <= alpha[:, :-1].min(dim=1).values).float(),
    }


def summarise(values: Dict[str, torch.Tensor], scales: Sequence[float]) -> List[Dict[str, float]]:
    """Per-scale rows from per-image values ([N, S] each, already averaged over repeats)."""
    n = values["alpha_p"].shape[0]
    rows = []
    for j, s in enumerate(scales):
        ap = values["alpha_p"][:, j].double()
        std = float(ap.std()) if n > 1 else float("nan")
        row = {"scale": s, **{k: float(v[:, j].mean()) for k, v in values.items()}}
        rows.append({**row, "alpha_p_std": std, "alpha_p_stderr": std / math.sqrt(n)})
    return rows


def markdown(rows: List[Dict[str, float]], header: List[str]) -> str:
    """The results as a markdown table under ``header`` lines."""
    cols = (
        "scale",
        "alpha",
        "alpha_p",
        "alpha_p_std",
        "alpha_p_stderr",
        "cos_anchor_probe",
        "cos_anchor_refs",
        "cos_probe_refs",
        "lowest",
    )
    names = (
        "scale",
        "alpha_probe",
        "alpha*P",
        "std",
        "stderr",
        "cos(anchor,probe)",
        "cos(anchor,refs)",
        "cos(probe,refs)",
        "frac lowest",
    )
    lines = header + ["", "| " + " | ".join(names) + " |", "|" + "---|" * len(names)]
    lines += [
        "| " + " | ".join(f"{r[c]:.4g}" if c == "scale" else f"{r[c]:.4f}" for c in cols) + " |"
        for r in rows
    ]
    return "\n".join(lines) + "\n"


def write_plot(rows: List[Dict[str, float]], title: str, path: Path) -> None:
    """alpha*P (± stderr) vs probe scale, log x axis, the uniform level 1 dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.errorbar(
        [r["scale"] for r in rows],
        [r["alpha_p"] for r in rows],
        yerr=[r["alpha_p_stderr"] for r in rows],
        marker="o",
        capsize=3,
    )
    ax.axhline(1.0, ls="--", c="grey", lw=1, label="uniform")
    ax.set(
        xscale="log",
        xlabel="probe RandomResizedCrop scale (area fraction)",
        ylabel="alpha_probe * P",
        title=title,
    )
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def describe(args: argparse.Namespace, probe_size: int, argv: Optional[Sequence[str]]) -> List[str]:
    """Header lines of the table: command, checkpoint, M / P / d_pos / images, the view recipes."""
    run, num_p = args.run, args.num_positives + (1 if args.form == "moco" else 0)
    cli = [Path(__file__).as_posix(), *(sys.argv[1:] if argv is None else argv)]
    refs = (
        f"{args.num_positives - 1} from the checkpoint's positive pipeline(s)"
        if args.reference_aug == "checkpoint"
        else f"{args.num_positives - 1} standard RRC scale (0.08, 1) + flip, no colour"
    )
    if args.form == "moco":
        refs = "the other anchor view's momentum key (2nd anchor pipeline), then " + refs
    label = (
        " (what AttentionNCE's attention would give on a SimCLR encoder)"
        if args.method == "simclr"
        else ""
    )
    note = (
        " NOTE: trained with loss=mocov3, attention unused in training"
        if run["method_kwargs"].get("loss") == "mocov3"
        else ""
    )
    recipe = (
        "the references' colour/blur/flip recipe"
        if args.probe_photometric == "same"
        else "no colour, blur or flip"
    )
    return [
        f"# Positive attention vs probe crop scale: {args.method}{label}",
        "",
        f"- command: `python3 {' '.join(shlex.quote(str(a)) for a in cli)}`",
        f"- checkpoint: {args.ckpt} (backbone {run['backbone']['name']}).{note}",
        f"- M = {args.num_positives} positives, P = {num_p} attention entries (1/P = "
        f"{1 / num_p:.4f}), d_pos = {args.d_pos:g}, images = {args.num_images} x "
        f"{args.repeats} draws, seed {args.seed}",
        f"- anchor: the checkpoint's anchor pipeline; references: {refs}",
        f"- probe: RandomResizedCrop scale=(s, s) at {probe_size} px, {recipe}",
        "- alpha*P: 1 = uniform; std/stderr over images; frac lowest: probe gets the least alpha",
    ]


def write_outputs(
    out: Path, table: str, rows: List[Dict[str, float]], meta: Dict[str, Any]
) -> None:
    """table.md, results.csv, results.json and plot.png in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "table.md").write_text(table)
    with open(out / "results.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    (out / "results.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    write_plot(
        rows,
        f"{meta['method']}, M={meta['num_positives']}, d_pos={meta['d_pos']:g}",
        out / "plot.png",
    )


def main(argv: Optional[Sequence[str]] = None) -> List[Dict[str, float]]:
    """Run the measurement; returns the per-scale rows (also written to --out)."""
    args = parse_args(argv)
    from solo.data.pretrain_dataloader import build_transform_pipeline
    from torchvision.datasets import ImageFolder

    run, device = args.run, torch.device(args.device)
    images = ImageFolder(str(args.data))
    if args.num_images > len(images):
        raise SystemExit(
            f"--num-images must be <= {len(images)} (the images in {args.data}), "
            f"got {args.num_images}"
        )
    g = torch.Generator().manual_seed(args.seed)
    subset = sorted(torch.randperm(len(images), generator=g)[: args.num_images].tolist())

    pipes = pipeline_configs(run, args.num_positives, args.reference_aug)
    mean_anchor = run["method_kwargs"].get("anchor") == "mean"

    def build(cfg: Any) -> Callable:
        return build_transform_pipeline(
            run["data"]["dataset"], cfg
        )  # solo's own, same normalisation

    transforms = {
        "anchor": build(pipes["anchor"]),
        # The 2nd anchor view is needed only where the loss uses it: MoCo's key, the mean anchor.
        "other": build(pipes["other"]) if args.form == "moco" or mean_anchor else None,
        "refs": [build(c) for c in pipes["positives"][:-1]],
        "probes": [
            build(probe_config(pipes["positives"][-1], s, args.probe_photometric))
            for s in args.scales
        ],
    }
    loader = torch.utils.data.DataLoader(
        ProbeViews(images, subset, args.repeats, args.seed, transforms),
        batch_size=args.batch_size,
        num_workers=args.num_workers,
    )
    model = load_model(run, args.ckpt, device)

    per_draw: Dict[str, List[torch.Tensor]] = {}
    for batch in loader:
        emb = encode(model, args.form, mean_anchor, batch, device)
        for probe in emb["probes"]:
            for k, v in probe_attention(emb["anchor"], emb["refs"], probe, args.d_pos).items():
                per_draw.setdefault(k, []).append(v.cpu())
    num_s = len(args.scales)
    # [num_batches * S] chunks of [b] -> [N * R, S], draws in item order -> mean over repeats.
    values = {
        k: torch.stack([torch.cat(v[j::num_s]) for j in range(num_s)], dim=1)
        .view(args.num_images, args.repeats, num_s)
        .mean(dim=1)
        for k, v in per_draw.items()
    }
    rows = summarise(values, args.scales)

    table = markdown(rows, describe(args, int(pipes["positives"][-1].crop_size), argv))
    print(table)
    meta = {
        k: getattr(args, k)
        for k in (
            "method",
            "num_positives",
            "d_pos",
            "num_images",
            "repeats",
            "reference_aug",
            "probe_photometric",
            "seed",
        )
    }
    meta.update(
        ckpt=str(args.ckpt),
        scales=args.scales,
        num_attention_entries=args.num_positives + (args.form == "moco"),
    )
    write_outputs(args.out, table, rows, meta)
    return rows


if __name__ == "__main__":
    main()
