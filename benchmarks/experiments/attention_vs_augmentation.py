"""Does the positive attention find hard positives? alpha of a positive view vs its crop scale.

For a trained checkpoint (``attentionnce``, ``mocov3_attentionnce``, or ``simclr`` with an
explicit ``--d-pos``) and an image folder, every image gets one anchor view, M - 1 reference
positives and one probe positive: a crop of fixed area fraction s (RandomResizedCrop with
scale=(s, s)) at the positive crops' size. For each s the probe's attention
``alpha = softmax_m(cos(anchor, p_m) / d_pos)`` is computed as the loss does
(:func:`attnce_plugin.attention.positive_attention`); anchor and references are shared by all
scales. Encoders as in training: the SimCLR form embeds all views with backbone + projector
(``anchor: mean`` averages two anchor views); the MoCo form's anchor is the query, its positives
the momentum keys, and its attention also covers the other anchor view's key (P = M + 1)::

    python3 -m benchmarks --experiment attention_vs_augmentation --ckpt <run>/<name>.ckpt \\
        --data <image folder> --num-images 1000 --repeats 2 --out attn_vs_aug

Writes table.md (also printed), results.csv, results.json and plot.png (alpha*P vs scale).
"""

from __future__ import annotations

import copy
import csv
import json
import math
import random
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

import torch
import torch.nn.functional as F

from attnce_plugin.attention import positive_attention
from benchmarks.options import Options
from benchmarks.report import line_plot, table

#: Form of each supported method: which networks give the anchor and the positives.
FORMS = {"attentionnce": "simclr", "simclr": "simclr", "mocov3_attentionnce": "moco"}
#: Photometric settings of a solo-learn pipeline that ``--probe-photometric none`` switches off.
PHOTOMETRIC = ("color_jitter", "grayscale", "gaussian_blur", "solarization", "equalization",
               "horizontal_flip")  # fmt: skip
COLUMNS = (("scale", "scale"), ("alpha", "alpha_probe"), ("alpha_p", "alpha*P"),
           ("alpha_p_std", "std"), ("alpha_p_stderr", "stderr"),
           ("cos_anchor_probe", "cos(anchor,probe)"), ("cos_anchor_refs", "cos(anchor,refs)"),
           ("cos_probe_refs", "cos(probe,refs)"), ("lowest", "frac lowest"))  # fmt: skip


def check(opts: Options) -> Dict[str, Any]:
    """The checkpoint's args.json after checking every flag (errors name the flag)."""
    if not opts.ckpt or not opts.data:
        raise ValueError("--experiment attention_vs_augmentation needs --ckpt and --data")
    if not opts.scales or not all(0.0 < s <= 1.0 for s in opts.scales):
        raise ValueError(f"--scales={list(opts.scales)}: allowed values are numbers in (0, 1]")
    if opts.num_positives < 2:
        raise ValueError(f"--num-positives={opts.num_positives}: allowed values are >= 2 (with "
                         "M = 1 the probe is the only positive and its alpha is 1)")  # fmt: skip
    if opts.num_images < 1 or opts.repeats < 1:
        raise ValueError(f"--num-images={opts.num_images}, --repeats={opts.repeats}: must be >= 1")
    if opts.d_pos is not None and not (math.isfinite(opts.d_pos) and opts.d_pos > 0):
        raise ValueError(f"--d-pos={opts.d_pos}: allowed values are finite numbers > 0")
    args_json = Path(opts.args_json or Path(opts.ckpt).parent / "args.json")
    for flag, path in (("--ckpt", Path(opts.ckpt)), ("--args", args_json)):
        if not path.is_file():
            raise FileNotFoundError(f"{flag}: no file at {path}")
    if not Path(opts.data).is_dir():
        raise FileNotFoundError(f"--data: no folder at {opts.data}")
    run = json.loads(args_json.read_text())
    if run.get("method") not in FORMS:
        raise ValueError(f"--ckpt is a {run.get('method')!r} checkpoint; allowed methods: "
                         f"{sorted(FORMS)} (others have no positive attention)")  # fmt: skip
    if run["method"] == "simclr" and opts.d_pos is None:
        raise ValueError("--d-pos is required for a simclr checkpoint (it has no attention)")
    return run


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


def main(opts: Options, command: str) -> int:
    """Measure, print and write the per-scale table."""
    run = check(opts)
    from solo.data.pretrain_dataloader import build_transform_pipeline
    from torchvision.datasets import ImageFolder

    form, m = FORMS[run["method"]], opts.num_positives
    d_pos = opts.d_pos if opts.d_pos is not None else float(run["method_kwargs"]["d_pos"])
    seed = (opts.seeds or (0,))[0]
    scales = sorted(set(opts.scales), reverse=True)
    device = torch.device("cuda" if (opts.accelerator or "cpu") in ("gpu", "cuda") else "cpu")
    images = ImageFolder(str(opts.data))
    if opts.num_images > len(images):
        raise ValueError(f"--num-images={opts.num_images}: allowed <= {len(images)} ({opts.data})")
    g = torch.Generator().manual_seed(seed)
    subset = sorted(torch.randperm(len(images), generator=g)[: opts.num_images].tolist())
    pipes = pipeline_configs(run, m, opts.reference_aug)
    mean_anchor = run["method_kwargs"].get("anchor") == "mean"

    def build(cfg: Any) -> Callable:
        return build_transform_pipeline(run["data"]["dataset"], cfg)  # solo's own normalisation

    transforms = {
        "anchor": build(pipes["anchor"]),
        # The 2nd anchor view only where the loss uses it: MoCo's key, the mean anchor.
        "other": build(pipes["other"]) if form == "moco" or mean_anchor else None,
        "refs": [build(c) for c in pipes["positives"][:-1]],
        "probes": [build(probe_config(pipes["positives"][-1], s, opts.probe_photometric))
                   for s in scales],
    }  # fmt: skip
    loader = torch.utils.data.DataLoader(
        ProbeViews(images, subset, opts.repeats, seed, transforms),
        batch_size=opts.batch_size or 64, num_workers=opts.num_workers or 0,
    )  # fmt: skip
    model = load_model(run, Path(opts.ckpt), device)
    per_draw: Dict[str, List[torch.Tensor]] = {}
    for batch in loader:
        emb = encode(model, form, mean_anchor, batch, device)
        for probe in emb["probes"]:
            for k, v in probe_attention(emb["anchor"], emb["refs"], probe, d_pos).items():
                per_draw.setdefault(k, []).append(v.cpu())
    # [num_batches * S] chunks of [b] -> [N * R, S], draws in item order -> mean over repeats.
    values = {
        k: torch.stack([torch.cat(v[j :: len(scales)]) for j in range(len(scales))], dim=1)
        .view(opts.num_images, opts.repeats, len(scales)).mean(dim=1)
        for k, v in per_draw.items()
    }  # fmt: skip
    rows = summarise(values, scales)
    num_p = m + (form == "moco")
    refs = f"{m - 1} from the checkpoint's positive pipeline(s)"
    if opts.reference_aug == "standard":
        refs = f"{m - 1} standard RRC scale (0.08, 1) + flip, no colour"
    if form == "moco":
        refs = "the other anchor view's momentum key (2nd anchor pipeline), then " + refs
    control = " (what AttentionNCE's attention would give on a SimCLR encoder)"
    recipe = "the references' colour/blur/flip recipe"
    header = [
        f"# Positive attention vs probe crop scale: {run['method']}"
        + (control if run["method"] == "simclr" else ""), "",
        f"- command: `{command}`",
        f"- checkpoint: {opts.ckpt} (backbone {run['backbone']['name']})."
        + (" NOTE: trained with loss=mocov3, attention unused in training"
           if run["method_kwargs"].get("loss") == "mocov3" else ""),
        f"- M = {m} positives, P = {num_p} attention entries (1/P = {1 / num_p:.4f}), d_pos = "
        f"{d_pos:g}, images = {opts.num_images} x {opts.repeats} draws, seed {seed}",
        f"- anchor: the checkpoint's anchor pipeline; references: {refs}",
        f"- probe: RandomResizedCrop scale=(s, s) at {int(pipes['positives'][-1].crop_size)} px, "
        + (recipe if opts.probe_photometric == "same" else "no colour, blur or flip"),
        "- alpha*P: 1 = uniform; std/stderr over images; frac lowest: probe gets the least alpha",
        "",
    ]  # fmt: skip
    body = [[f"{r[c]:.4g}" if c == "scale" else f"{r[c]:.4f}" for c, _ in COLUMNS] for r in rows]
    md = "\n".join(header) + "\n" + table([t for _, t in COLUMNS], body) + "\n"
    print(md)
    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "table.md").write_text(md)
    with open(out / "results.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    meta = {"method": run["method"], "num_positives": m, "d_pos": d_pos, "seed": seed,
            "num_images": opts.num_images, "repeats": opts.repeats, "ckpt": str(opts.ckpt),
            "reference_aug": opts.reference_aug, "probe_photometric": opts.probe_photometric,
            "scales": scales, "num_attention_entries": num_p}  # fmt: skip
    (out / "results.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    series = {"alpha*P": [(r["scale"], (r["alpha_p"], r["alpha_p_stderr"])) for r in rows]}
    title = f"{run['method']}, M={m}, d_pos={d_pos:g}"
    xlabel = "probe RandomResizedCrop scale (area fraction)"
    line_plot(series, out / "plot.png", title, xlabel, "alpha_probe * P (± stderr)")
    return 0
