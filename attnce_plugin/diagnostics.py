"""The health of the representation (docs/design.md, "Diagnostics"), when ``diagnostics.enabled``:
the methods log ``train_repr_alignment`` of the 2 anchor views (Wang & Isola, 2020) and the nominal
mutual information bound ``train_repr_mi_bound = log(K + 1) - loss`` every batch, and
:class:`AttentionDiagnostics` logs ``val_repr_{feats,z}_{uniformity,eff_rank}`` at each validation
end: uniformity (Wang & Isola) and the effective rank of the covariance (Roy & Vetterli, 2007) of
the backbone features and projections of a fixed random subset of the validation images (the same
subset every epoch: solo-learn's validation loader is not shuffled, and image folders are sorted by
class). The attention's activity (``train_attn_*``) the methods log whatever the diagnostics say.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List

import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import Callback


def alignment(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean ``||x_i - y_i||^2`` of L2-normalised [n, d] pairs: 0 aligned, 4 opposite."""
    return (F.normalize(x.float(), dim=1) - F.normalize(y.float(), dim=1)).pow(2).sum(1).mean()


def uniformity(x: torch.Tensor, t: float = 2.0) -> torch.Tensor:
    """``log mean_{i<j} exp(-t ||x_i - x_j||^2)`` of L2-normalised [n, d], n >= 2: lower is more
    uniform."""
    sq = torch.pdist(F.normalize(x.float(), dim=1)).pow(2)
    return torch.logsumexp(-t * sq, dim=0) - math.log(sq.numel())


def effective_rank(x: torch.Tensor) -> torch.Tensor:
    """``exp(entropy)`` of the normalised covariance eigenvalues of [n, d]: d isotropic, 1 for a
    collapse onto a line."""
    x = x.double() - x.double().mean(dim=0)
    eig = torch.linalg.eigvalsh(x.T @ x / (len(x) - 1)).clamp_min(0)
    # entr(0) = 0: a constant (no variance) has rank 1
    return torch.exp(torch.special.entr(eig / eig.sum().clamp_min(1e-300)).sum())


class AttentionDiagnostics(Callback):
    """Logs the validation values above, from a hook on solo-learn's own validation forward."""

    def __init__(self, max_samples: int = 2048) -> None:
        # uniformity is O(n^2) in pairs: 2048 images are 2.1M pairs, ~10 ms on a CPU core.
        self.max_samples = max_samples
        self._features: List[torch.Tensor] = []
        self._hook: Any = None

    def on_validation_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self._keys = torch.empty(0, dtype=torch.float64)
        self._kept: Dict[str, torch.Tensor] = {}
        self._gen = torch.Generator().manual_seed(0)  # the same subset every epoch
        if self._hook is None and not trainer.sanity_checking:
            # solo-learn's validation forward calls the backbone once: no extra forward pass.
            self._hook = pl_module.backbone.register_forward_hook(
                lambda module, inputs, output: self._features.append(output.detach())
            )

    @torch.no_grad()
    def on_validation_batch_end(self, trainer: Any, pl_module: Any, *args: Any, **kw: Any) -> None:
        if not self._features:
            return
        feats, self._features = self._features[0], []
        batch = {"feats": feats.float().cpu()}
        projector = getattr(pl_module, "projector", None)
        if projector is not None:
            # Outside autocast here: mixed-precision features meet the projector's fp32 weights.
            weight = next(projector.parameters())
            batch["z"] = projector(feats.to(weight.dtype)).float().cpu()
        # A uniform random subset in O(max_samples) memory: the smallest random keys.
        keys = torch.cat(
            [self._keys, torch.rand(len(feats), generator=self._gen, dtype=torch.float64)]
        )
        keep = torch.argsort(keys)[: self.max_samples]
        self._keys = keys[keep]
        self._kept = {
            k: torch.cat([self._kept[k], v])[keep] if self._kept else v[keep]
            for k, v in batch.items()
        }

    def on_validation_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        if len(self._keys) >= 2:
            for kind, x in self._kept.items():
                for name, fn in (("uniformity", uniformity), ("eff_rank", effective_rank)):
                    value = fn(x).float().to(pl_module.device)
                    pl_module.log(f"val_repr_{kind}_{name}", value, sync_dist=True)
        self._kept = {}  # the memory back until the next validation
