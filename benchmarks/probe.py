"""The offline probe of frozen features, on every train and val image at the crop size (Resize +
CenterCrop, the pretraining normalisation, no augmentation): softmax regression (L-BFGS, its L2
picked on a stratified 20 % hold-out) and solo-learn's weighted kNN classifier. solo-learn's
``main_linear.py`` would upscale custom data to 224 px (~49x the compute of 32 px crops)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from omegaconf import OmegaConf
from torch import Tensor

L2_GRID: Tuple[float, ...] = (1e-5, 1e-4, 1e-3, 1e-2)  # per-sample loss: comparable across sizes


def backbone(args_path: Path, ckpt: Optional[Path] = None, seed: int = 0) -> nn.Module:
    """On the CPU, the backbone of ``args.json`` (the parsed config solo-learn's Checkpointer
    writes beside a checkpoint): the checkpoint's, or untrained (under ``seed``) without one."""
    from solo.methods import METHODS

    from attnce_plugin import register

    register()
    cfg = OmegaConf.create(json.loads(Path(args_path).read_text()))
    cls, load = METHODS[cfg.method], dict(strict=False, cfg=cfg, map_location="cpu")
    torch.manual_seed(seed)  # the untrained backbone's weights (and any a checkpoint lacks)
    model = cls(cfg) if ckpt is None else cls.load_from_checkpoint(str(ckpt), **load)
    return model.backbone.eval()


@torch.no_grad()
def extract_features(backbone: nn.Module, images: Any) -> Tuple[Tensor, Tensor]:
    """float32 features [N, D] and labels [N] of a labelled split, on the CPU (computed on the
    backbone's device)."""
    from torch.utils.data import DataLoader

    device = next(backbone.parameters(), torch.empty(0)).device
    batches = DataLoader(images, batch_size=256)
    feats = [(backbone(x.to(device)).float().flatten(1).cpu(), y) for x, y in batches]
    return torch.cat([f for f, _ in feats]), torch.cat([y for _, y in feats])


def fit_logistic(x: Tensor, y: Tensor, classes: int, l2: float) -> nn.Linear:
    """Softmax regression by full-batch L-BFGS from zero weights: mean cross-entropy plus
    ``0.5 * l2 * ||W||^2``."""
    clf = nn.Linear(x.shape[1], classes)
    nn.init.zeros_(clf.weight)
    nn.init.zeros_(clf.bias)
    opt = torch.optim.LBFGS(
        clf.parameters(), max_iter=200, history_size=20, line_search_fn="strong_wolfe"
    )

    def closure() -> Tensor:
        opt.zero_grad()
        loss = F.cross_entropy(clf(x), y) + 0.5 * l2 * clf.weight.pow(2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    return clf


def holdout_split(y: Tensor, fraction: float, seed: int) -> Tuple[Tensor, Tensor]:
    """Stratified (fit, holdout) indexes of ``y``."""
    g = torch.Generator().manual_seed(seed)
    fit, hold = [], []
    for c in torch.unique(y):
        idx = torch.nonzero(y == c).flatten()
        idx = idx[torch.randperm(idx.numel(), generator=g)]
        k = max(1, int(round(idx.numel() * fraction))) if idx.numel() > 1 else 0
        hold.append(idx[:k])
        fit.append(idx[k:])
    return torch.cat(fit), torch.cat(hold)


def linear_probe(x: Tensor, y: Tensor, val_x: Tensor, val_y: Tensor) -> Tuple[float, float]:
    """(val top-1 %, chosen L2): the L2 of ``L2_GRID`` best on a hold-out of the train features
    ``x`` (ties go to the stronger one), then refit on all of them; features standardised."""
    classes = int(max(y.max(), val_y.max())) + 1
    mean, std = x.mean(0), x.std(0).clamp_min(1e-6)
    tx, vx = (x - mean) / std, (val_x - mean) / std
    fit, hold = holdout_split(y, 0.2, seed=0)

    @torch.no_grad()
    def accuracy(clf: nn.Linear, features: Tensor, labels: Tensor) -> float:
        return float((clf(features).argmax(1) == labels).float().mean()) * 100.0

    def score(l2: float) -> Tuple[float, float]:
        clf = fit_logistic(tx[fit], y[fit], classes, l2)
        return accuracy(clf, tx[hold], y[hold]), l2

    best = max(L2_GRID, key=score)
    return accuracy(fit_logistic(tx, y, classes, best), vx, val_y), best


def knn_accuracy(train_x: Tensor, train_y: Tensor, val_x: Tensor, val_y: Tensor) -> float:
    """Top-1 % of solo-learn's online kNN classifier (k = 20, T = 0.07, cosine): the 20 most
    similar train features vote, each with weight exp(similarity / T). It counts the classes in
    ``val_y``, so every class must have a val image (ImageFolder refuses an empty class)."""
    from solo.utils.knn import WeightedKNNClassifier

    knn = WeightedKNNClassifier(k=20, T=0.07, distance_fx="cosine")
    knn.update(train_x, train_y, val_x, val_y)
    return float(knn.compute()[0])


def probe_backbone(backbone: nn.Module, train: Any, val: Any) -> Dict[str, float]:
    """The offline columns of a result: linear probe and kNN of frozen features of the labelled
    splits ``train`` and ``val`` (on the GPU where there is one)."""
    backbone = backbone.to("cuda" if torch.cuda.is_available() else "cpu")
    tr_x, tr_y = extract_features(backbone, train)
    va_x, va_y = extract_features(backbone, val)
    acc, l2 = linear_probe(tr_x, tr_y, va_x, va_y)
    knn = knn_accuracy(tr_x, tr_y, va_x, va_y)
    return {"offline_acc1": acc, "offline_knn_acc1": knn, "offline_l2": l2}
