"""Offline evaluation of frozen features: a linear probe and a weighted kNN, plus health values.

solo-learn's ``main_linear.py`` trains its probe with solo's ``custom`` transforms, which
upscale every image to 224 px (RandomResizedCrop(224) for training, Resize(256)+CenterCrop(224)
for validation): on 32 px data that is ~49x the compute of the pretraining crops and would not
fit the CPU budget. The benchmark therefore evaluates frozen features itself:

1. the features: the backbone of a run's last checkpoint, rebuilt from its saved ``args.json``
   and loaded as solo-learn's ``main_knn.py`` loads it (:func:`load_pretrained_backbone`); or,
   for the reference rows, the untrained backbone (:func:`random_backbone`) or the raw pixels
   (:class:`Pixels`). Every train and val image is embedded once at the pretraining crop size
   (Resize + CenterCrop, the pretraining normalisation, no augmentation);
2. linear probe: standardise with train statistics and fit a softmax classifier with L-BFGS,
   choosing the L2 strength from a small grid on a stratified 20 % hold-out of the train
   features, then refitting on all of them; top-1 accuracy on the val images;
3. kNN: solo-learn's weighted kNN (k = 20, cosine similarity, weights exp(s / 0.07)), the
   classifier of its online kNN, on the same frozen features (:func:`knn_accuracy`);
4. representation health of the val features (:func:`offline_health`): uniformity (Wang & Isola,
   2020) and effective rank of the covariance (Roy & Vetterli, 2007), on a seeded random subset of
   at most 2048 val images.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Optional, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from omegaconf import OmegaConf

from attnce_plugin.callbacks.health import effective_rank, uniformity

#: L2 strengths tried on the hold-out split (per-sample loss, so comparable across sizes).
DEFAULT_L2_GRID: Tuple[float, ...] = (1e-5, 1e-4, 1e-3, 1e-2)

#: Val images the health metrics use at most (uniformity is O(n^2): 2048 images = 2.1M pairs).
HEALTH_MAX_SAMPLES = 2048


#: solo-learn's online kNN defaults (``solo.utils.knn.WeightedKNNClassifier``).
KNN_K = 20
KNN_T = 0.07


@dataclass
class ProbeResult:
    """Outcome of :func:`probe_backbone`: linear probe and kNN top-1 % on the val images."""

    acc1: float
    knn_acc1: float
    l2: float
    num_train: int
    num_val: int
    seconds: float
    #: Health of the val backbone features (see :func:`offline_health`); None if not computed.
    uniformity: Optional[float] = None
    eff_rank: Optional[float] = None


def load_pretrained_backbone(ckpt_path: Path) -> nn.Module:
    """The backbone of a solo-learn checkpoint, rebuilt from the run's own saved config.

    solo-learn's ``Checkpointer`` writes ``args.json`` (the parsed config) beside each checkpoint;
    the method is rebuilt from it and loaded exactly as solo-learn's ``main_knn.py`` does
    (``METHODS[method].load_from_checkpoint(path, strict=False, cfg=cfg)``), on the CPU.

    Raises:
        FileNotFoundError: no ``args.json`` beside the checkpoint.
    """
    from solo.methods import METHODS

    import attnce_plugin

    args_path = Path(ckpt_path).parent / "args.json"
    if not args_path.is_file():
        raise FileNotFoundError(
            f"{args_path}: solo-learn's args.json is missing beside {ckpt_path}"
        )
    attnce_plugin.register()
    cfg = OmegaConf.create(json.loads(args_path.read_text()))
    model = METHODS[cfg.method].load_from_checkpoint(
        str(ckpt_path), strict=False, cfg=cfg, map_location="cpu"
    )
    return model.backbone.eval()


def random_backbone(args_path: Path, seed: int) -> nn.Module:
    """The untrained backbone of a run's config (its ``args.json``), initialised under ``seed``:
    the "no pretraining" reference, which says what random features already reach."""
    from solo.methods import METHODS

    import attnce_plugin

    attnce_plugin.register()
    cfg = OmegaConf.create(json.loads(Path(args_path).read_text()))
    torch.manual_seed(seed)
    return METHODS[cfg.method](cfg).backbone.eval()


class Pixels(nn.Module):
    """The "raw pixels" reference: the normalised image itself, flattened, as the feature."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """[b, C, H, W] -> [b, C*H*W]."""
        return x.flatten(1)


def _dataset(dataset: str, folder: Path, train: bool, transform: Any) -> Any:
    """The images solo-learn pretrained/validated on, without augmentation."""
    from torchvision import datasets

    if dataset in ("cifar10", "cifar100"):
        cls = datasets.CIFAR10 if dataset == "cifar10" else datasets.CIFAR100
        return cls(str(folder), train=train, download=False, transform=transform)
    if dataset == "stl10":
        return datasets.STL10(
            str(folder), split="train" if train else "test", download=False, transform=transform
        )
    return datasets.ImageFolder(str(folder), transform)


def _loader(
    dataset: str,
    folder: Path,
    train: bool,
    size: int,
    mean: Sequence[float],
    std: Sequence[float],
    batch_size: int,
    num_workers: int,
) -> Any:
    from torch.utils.data import DataLoader
    from torchvision import transforms

    t = transforms.Compose(
        [
            transforms.Resize(size, interpolation=transforms.InterpolationMode.BICUBIC),
            transforms.CenterCrop(size),
            transforms.ToTensor(),
            transforms.Normalize(mean=mean, std=std),
        ]
    )
    return DataLoader(
        _dataset(dataset, folder, train, t),
        batch_size=batch_size,
        shuffle=False,
        num_workers=num_workers,
    )


@torch.no_grad()
def extract_features(
    backbone: nn.Module, loader: Any, device: torch.device
) -> Tuple[torch.Tensor, torch.Tensor]:
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


def fit_logistic(
    x: torch.Tensor, y: torch.Tensor, num_classes: int, l2: float, max_iter: int = 200
) -> nn.Linear:
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
    opt = torch.optim.LBFGS(
        clf.parameters(), lr=1.0, max_iter=max_iter, history_size=20, line_search_fn="strong_wolfe"
    )

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


def _holdout_split(
    y: torch.Tensor, fraction: float, seed: int
) -> Tuple[torch.Tensor, torch.Tensor]:
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


def probe_features(
    train_x: torch.Tensor,
    train_y: torch.Tensor,
    val_x: torch.Tensor,
    val_y: torch.Tensor,
    l2_grid: Sequence[float] = DEFAULT_L2_GRID,
) -> Tuple[float, float]:
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


def offline_health(
    features: torch.Tensor, max_samples: int = HEALTH_MAX_SAMPLES, seed: int = 0
) -> Dict[str, float]:
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
        keep = torch.randperm(x.shape[0], generator=torch.Generator().manual_seed(seed))[
            :max_samples
        ]
        x = x[keep]
    return {"uniformity": float(uniformity(x)), "eff_rank": float(effective_rank(x))}


@torch.no_grad()
def knn_accuracy(
    train_x: torch.Tensor,
    train_y: torch.Tensor,
    val_x: torch.Tensor,
    val_y: torch.Tensor,
    k: int = KNN_K,
    temperature: float = KNN_T,
    chunk: int = 1024,
) -> float:
    """Top-1 % of solo-learn's weighted kNN classifier with cosine similarity.

    Each val feature votes with its k most similar train features (cosine), each vote weighted by
    ``exp(similarity / temperature)``; the class with the largest summed weight wins. The same
    rule as ``solo.utils.knn.WeightedKNNClassifier`` (its online kNN), written here because that
    class is a torchmetrics metric that breaks with torchmetrics >= 1.0.

    Args:
        train_x: [N, D] train features; train_y: [N] labels.
        val_x: [n, D] val features; val_y: [n] labels.
        k: neighbours (at most N are used).
        temperature: weight temperature.
        chunk: val rows per similarity block (memory bound).
    """
    train = F.normalize(train_x.float(), dim=1)
    val = F.normalize(val_x.float(), dim=1)
    num_classes = int(max(train_y.max(), val_y.max())) + 1
    k = min(k, train.shape[0])
    correct = 0
    for start in range(0, val.shape[0], chunk):
        sims, idx = (val[start : start + chunk] @ train.T).topk(k, dim=1)
        votes = torch.zeros(sims.shape[0], num_classes)
        votes.scatter_add_(1, train_y[idx], (sims / temperature).exp())
        correct += int((votes.argmax(dim=1) == val_y[start : start + chunk]).sum())
    return 100.0 * correct / val.shape[0]


def probe_backbone(
    backbone: nn.Module,
    dataset: str,
    train_dir: Path,
    val_dir: Path,
    image_size: int,
    mean: Sequence[float],
    std: Sequence[float],
    batch_size: int = 256,
    num_workers: int = 0,
    device: Optional[str] = None,
    l2_grid: Sequence[float] = DEFAULT_L2_GRID,
) -> ProbeResult:
    """Linear probe, kNN and health of a frozen feature extractor (see the module docstring).

    Args:
        backbone: [b, 3, H, W] -> [b, D] (a network, or :class:`Pixels`).
        dataset: solo-learn's ``data.dataset`` (how the folders are read).
        train_dir / val_dir: image folders (ImageFolder layout), or torchvision's CIFAR/STL-10
            roots for those datasets (read with download=False).
        image_size: side the images are resized and centre-cropped to.
        mean / std: the pretraining normalisation.
        device: "cpu", "cuda", ...; default cuda when available.
    """
    start = time.perf_counter()
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    loaders = [
        _loader(dataset, folder, train, image_size, mean, std, batch_size, num_workers)
        for folder, train in ((train_dir, True), (val_dir, False))
    ]
    (tr_x, tr_y), (va_x, va_y) = (extract_features(backbone, loader, dev) for loader in loaders)
    acc, l2 = probe_features(tr_x, tr_y, va_x, va_y, l2_grid)
    knn = knn_accuracy(tr_x, tr_y, va_x, va_y)
    health = offline_health(va_x)
    return ProbeResult(
        acc1=acc,
        knn_acc1=knn,
        l2=l2,
        num_train=int(tr_y.numel()),
        num_val=int(va_y.numel()),
        seconds=time.perf_counter() - start,
        **health,
    )


def probe_settings(cfg: Dict[str, Any]) -> Dict[str, Any]:
    """Image size and normalisation of a run's config, as the probe needs them.

    The normalisation is read off solo-learn's own ``build_transform_pipeline`` for the first
    (anchor) pipeline, so the probe sees the pretraining statistics whatever the dataset.
    """
    from solo.data.pretrain_dataloader import build_transform_pipeline
    from torchvision import transforms

    first = OmegaConf.create(cfg["augmentations"][0])
    pipeline = build_transform_pipeline(cfg["data"]["dataset"], first)
    norm = next(t for t in pipeline.transforms if isinstance(t, transforms.Normalize))
    return {"image_size": int(first["crop_size"]), "mean": tuple(norm.mean), "std": tuple(norm.std)}
