"""Offline linear probe: multinomial logistic regression on frozen backbone features.

solo-learn's ``main_linear.py`` trains its probe with solo's ``custom`` transforms, which
upscale every image to 224 px (RandomResizedCrop(224) for training, Resize(256)+CenterCrop(224)
for validation): on 32 px data that is ~49x the compute of the pretraining crops and would not
fit the CPU budget. The benchmark therefore fits its own probe, the standard "linear evaluation on
frozen features" protocol:

1. load the backbone weights from the run's last solo-learn checkpoint (``backbone.*`` keys);
2. extract features of every train and val image once, at the pretraining crop size
   (Resize + CenterCrop, the pretraining normalisation, no augmentation);
3. standardise with train statistics and fit a softmax classifier with L-BFGS, choosing the
   L2 strength from a small grid on a stratified 20 % hold-out of the train features, then
   refitting on all of them;
4. report top-1 accuracy on the val images;
5. representation health of the val features (:func:`offline_health`): uniformity (Wang & Isola,
   2020) and effective rank of the covariance (Roy & Vetterli, 2007) of the backbone features, on
   a seeded random subset of at most 2048 val images. Computed for every method alike (SimCLR and
   MoCo v3 too), on the same frozen features the probe reads.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Optional, Sequence, Tuple

from attnce_plugin.representation import effective_rank, uniformity

import torch
import torch.nn as nn
import torch.nn.functional as F

#: L2 strengths tried on the hold-out split (per-sample loss, so comparable across sizes).
DEFAULT_L2_GRID: Tuple[float, ...] = (1e-5, 1e-4, 1e-3, 1e-2)

#: Val images the health metrics use at most (uniformity is O(n^2): 2048 images = 2.1M pairs).
HEALTH_MAX_SAMPLES = 2048


@dataclass
class ProbeResult:
    """Outcome of :func:`linear_probe`."""

    acc1: float
    l2: float
    num_train: int
    num_val: int
    seconds: float
    #: Health of the val backbone features (see :func:`offline_health`); None if not computed.
    uniformity: Optional[float] = None
    eff_rank: Optional[float] = None


def build_backbone(cfg: Any) -> nn.Module:
    """Build the backbone of a solo-learn pretraining config the way solo-learn's BaseMethod does.

    Args:
        cfg: the run's composed config (``backbone.name``, ``backbone.kwargs``, ``method``,
            ``data.dataset``).

    Returns:
        The backbone with its classification head removed (outputs ``[B, features_dim]``).
    """
    from solo.methods.base import BaseMethod

    name = cfg["backbone"]["name"]
    if name not in BaseMethod._BACKBONES:
        raise ValueError(
            f"backbone.name={name!r}: allowed values are {sorted(BaseMethod._BACKBONES)}"
        )
    kwargs = dict(cfg["backbone"].get("kwargs") or {})
    method = str(cfg["method"])
    # solo's ViT factories special-case the method name "mocov3"; our MoCo method builds the same.
    if method.startswith("mocov3"):
        method = "mocov3"
    backbone = BaseMethod._BACKBONES[name](method, **kwargs)
    if name.startswith("resnet"):
        backbone.fc = nn.Identity()
        if cfg["data"]["dataset"] in ("cifar10", "cifar100"):
            # solo's CIFAR stem: 3x3 conv, no max-pool (weights come from the checkpoint).
            backbone.conv1 = nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=2, bias=False)
            backbone.maxpool = nn.Identity()
    return backbone


def load_backbone(ckpt_path: Optional[Path], cfg: Any, seed: int = 0) -> nn.Module:
    """Backbone of ``cfg`` with the ``backbone.*`` weights of a solo-learn checkpoint, in eval mode.

    ``ckpt_path=None`` gives the randomly initialised backbone (seeded): the "no pretraining"
    reference row, which says how much of a probe's accuracy random features already reach.
    """
    torch.manual_seed(seed)
    backbone = build_backbone(cfg)
    if ckpt_path is None:
        return backbone.eval()
    state = torch.load(ckpt_path, map_location="cpu", weights_only=False)["state_dict"]
    prefix = "backbone."
    weights = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
    if not weights:
        raise ValueError(f"{ckpt_path}: no 'backbone.*' weights in the checkpoint's state_dict")
    missing, unexpected = backbone.load_state_dict(weights, strict=False)
    if missing:
        raise ValueError(f"{ckpt_path}: backbone weights missing for {missing[:5]}...")
    return backbone.eval()


def _dataset(dataset: str, folder: Path, train: bool, transform: Any) -> Any:
    """The images solo-learn pretrained/validated on, without augmentation."""
    from torchvision import datasets

    if dataset in ("cifar10", "cifar100"):
        cls = datasets.CIFAR10 if dataset == "cifar10" else datasets.CIFAR100
        return cls(str(folder), train=train, download=False, transform=transform)
    if dataset == "stl10":
        return datasets.STL10(str(folder), split="train" if train else "test", download=False,
                              transform=transform)
    return datasets.ImageFolder(str(folder), transform)


def _loader(dataset: str, folder: Path, train: bool, size: int, mean: Sequence[float],
            std: Sequence[float], batch_size: int, num_workers: int) -> Any:
    from torch.utils.data import DataLoader
    from torchvision import transforms

    t = transforms.Compose([
        transforms.Resize(size, interpolation=transforms.InterpolationMode.BICUBIC),
        transforms.CenterCrop(size),
        transforms.ToTensor(),
        transforms.Normalize(mean=mean, std=std),
    ])
    return DataLoader(_dataset(dataset, folder, train, t), batch_size=batch_size, shuffle=False,
                      num_workers=num_workers)


@torch.no_grad()
def extract_features(backbone: nn.Module, loader: Any, device: torch.device) -> Tuple[torch.Tensor, torch.Tensor]:
    """Features and labels of every image of ``loader``.

    Returns:
        ``(features [N, D] float32 on CPU, labels [N] int64)``.
    """
    backbone = backbone.to(device)
    feats, labels = [], []
    for x, y in loader:
        feats.append(backbone(x.to(device)).float().flatten(1).cpu())
        labels.append(y)
    return torch.cat(feats), torch.cat(labels)


def fit_logistic(x: torch.Tensor, y: torch.Tensor, num_classes: int, l2: float,
                 max_iter: int = 200) -> nn.Linear:
    """Softmax regression by full-batch L-BFGS.

    Args:
        x: standardised features ``[N, D]``.
        y: labels ``[N]`` in ``[0, num_classes)``.
        l2: weight of ``0.5 * ||W||^2`` added to the mean cross-entropy.
    """
    torch.manual_seed(0)  # only the (zero) init would vary; keep it explicit anyway
    clf = nn.Linear(x.shape[1], num_classes)
    nn.init.zeros_(clf.weight)
    nn.init.zeros_(clf.bias)
    opt = torch.optim.LBFGS(clf.parameters(), lr=1.0, max_iter=max_iter,
                            history_size=20, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = F.cross_entropy(clf(x), y) + 0.5 * l2 * clf.weight.pow(2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    return clf


def _accuracy(clf: nn.Linear, x: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        return float((clf(x).argmax(1) == y).float().mean()) * 100.0


def _holdout_split(y: torch.Tensor, fraction: float, seed: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """Stratified (fit, holdout) index split of ``y``."""
    g = torch.Generator().manual_seed(seed)
    fit, hold = [], []
    for c in torch.unique(y):
        idx = torch.nonzero(y == c).flatten()
        idx = idx[torch.randperm(idx.numel(), generator=g)]
        k = max(1, int(round(idx.numel() * fraction))) if idx.numel() > 1 else 0
        hold.append(idx[:k])
        fit.append(idx[k:])
    return torch.cat(fit), torch.cat(hold)


def probe_features(train_x: torch.Tensor, train_y: torch.Tensor, val_x: torch.Tensor,
                   val_y: torch.Tensor, l2_grid: Sequence[float] = DEFAULT_L2_GRID) -> Tuple[float, float]:
    """Choose L2 on a hold-out of the train features, refit on all of them, score on val.

    Returns:
        ``(val top-1 accuracy in %, chosen l2)``.
    """
    if not l2_grid:
        raise ValueError("l2_grid must hold at least one value")
    num_classes = int(max(train_y.max(), val_y.max())) + 1
    mean, std = train_x.mean(0), train_x.std(0).clamp_min(1e-6)
    tx, vx = (train_x - mean) / std, (val_x - mean) / std
    best_l2 = float(l2_grid[0])
    if len(l2_grid) > 1:
        fit_idx, hold_idx = _holdout_split(train_y, 0.2, seed=0)
        scores = []
        for l2 in l2_grid:
            clf = fit_logistic(tx[fit_idx], train_y[fit_idx], num_classes, float(l2))
            scores.append(_accuracy(clf, tx[hold_idx], train_y[hold_idx]))
        # Ties go to the stronger regulariser (later in an ascending grid).
        best = max(range(len(scores)), key=lambda i: (scores[i], l2_grid[i]))
        best_l2 = float(l2_grid[best])
    clf = fit_logistic(tx, train_y, num_classes, best_l2)
    return _accuracy(clf, vx, val_y), best_l2


def offline_health(features: torch.Tensor, max_samples: int = HEALTH_MAX_SAMPLES,
                   seed: int = 0) -> Dict[str, float]:
    """Uniformity (t = 2, on L2-normalised features) and effective rank of frozen features.

    Args:
        features: [N, D] backbone features, N >= 2.
        max_samples: at most this many rows are used (>= 2): all of them when N <= max_samples,
            else the first ``max_samples`` of ``torch.randperm(N)`` under ``seed``. Random, not the
            first rows, because image folders are read sorted by class.
        seed: seed of that subset.

    Returns:
        ``{"uniformity": float, "eff_rank": float}``.

    Raises:
        ValueError: ``max_samples`` < 2 or fewer than 2 rows.
    """
    if isinstance(max_samples, bool) or not isinstance(max_samples, int) or max_samples < 2:
        raise ValueError(f"max_samples must be an integer >= 2, got {max_samples!r}")
    x = features
    if x.shape[0] > max_samples:
        keep = torch.randperm(x.shape[0], generator=torch.Generator().manual_seed(seed))[:max_samples]
        x = x[keep]
    return {"uniformity": float(uniformity(x)), "eff_rank": float(effective_rank(x))}


def linear_probe(ckpt_path: Optional[Path], cfg: Any, train_dir: Path, val_dir: Path, image_size: int,
                 mean: Sequence[float], std: Sequence[float], batch_size: int = 256,
                 num_workers: int = 0, device: Optional[str] = None,
                 l2_grid: Sequence[float] = DEFAULT_L2_GRID) -> ProbeResult:
    """Offline linear probe of a solo-learn checkpoint (see the module docstring).

    Args:
        ckpt_path: the run's ``.ckpt``; None probes a randomly initialised backbone.
        cfg: the run's composed config (a DictConfig or a plain dict).
        train_dir / val_dir: image folders (ImageFolder layout), or torchvision's CIFAR/STL-10
            roots for those datasets (read with download=False).
        image_size: side the images are resized and centre-cropped to.
        mean / std: the pretraining normalisation.
        device: "cpu", "cuda", ...; default cuda when available.
    """
    start = time.perf_counter()
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    backbone = load_backbone(None if ckpt_path is None else Path(ckpt_path), cfg,
                             seed=int(cfg.get("seed", 0)))
    dataset = str(cfg["data"]["dataset"])
    tr_x, tr_y = extract_features(backbone, _loader(dataset, train_dir, True, image_size, mean, std,
                                                    batch_size, num_workers), dev)
    va_x, va_y = extract_features(backbone, _loader(dataset, val_dir, False, image_size, mean, std,
                                                    batch_size, num_workers), dev)
    acc, l2 = probe_features(tr_x, tr_y, va_x, va_y, l2_grid)
    health = offline_health(va_x)
    return ProbeResult(acc1=acc, l2=l2, num_train=int(tr_y.numel()), num_val=int(va_y.numel()),
                       seconds=time.perf_counter() - start, **health)


def probe_settings(cfg: Dict[str, Any]) -> Dict[str, Any]:
    """Image size and normalisation of a composed pretraining config, as the probe needs them."""
    from timm.data.constants import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD

    first = cfg["augmentations"][0]
    dataset_stats = {
        "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
        "cifar100": ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
        "stl10": ((0.4914, 0.4823, 0.4466), (0.247, 0.243, 0.261)),
    }
    # Same rule as solo's build_transform_pipeline: fixed stats for the named datasets, the
    # augmentation's own (or ImageNet's) otherwise.
    mean, std = dataset_stats.get(
        cfg["data"]["dataset"],
        (tuple(first.get("mean", IMAGENET_DEFAULT_MEAN)), tuple(first.get("std", IMAGENET_DEFAULT_STD))),
    )
    return {"image_size": int(first["crop_size"]), "mean": tuple(mean), "std": tuple(std)}
