"""Representation health (docs/attention-diagnostics.md), switched on by
``diagnostics.representation_health: true``.

* each training step: ``train_repr_alignment`` of the 2 anchor views' projections and the nominal
  mutual-information bound ``train_repr_mi_bound = log(K + 1) - loss``, from what the method keeps
  of its step (``pl_module.last_contrastive``, set by ``AttentionNCECore.log_contrastive``);
* each validation end: uniformity and effective rank of the backbone features and projections of
  a fixed random subset of the validation images (:class:`ValidationSample`), logged as
  ``val_repr_{feats,z}_{uniformity,eff_rank}``. The features are the backbone outputs of
  solo-learn's own validation forward, taken with a forward hook (no extra forward pass).

The metrics: alignment and uniformity of normalised embeddings (Wang & Isola, 2020; low alignment =
positive pairs close together, low uniformity = embeddings spread over the sphere) and the
effective rank of the embedding covariance (Roy & Vetterli, 2007), which falls when the
representation collapses onto a few dimensions.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional

import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import Callback

from attnce_plugin.checks import check_int_at_least

#: Default cap on the validation images kept per process: uniformity is O(n^2) in pairs
#: (2048 images = 2.1M pairs, ~10 ms on a CPU core).
DEFAULT_HEALTH_MAX_SAMPLES = 2048


def alignment(x: torch.Tensor, y: torch.Tensor, alpha: float = 2.0) -> torch.Tensor:
    """Mean ``||f(x) - f(y)||^alpha`` over positive pairs of L2-normalised embeddings.

    Args:
        x: [n, d] embeddings of one view.
        y: [n, d] embeddings of the other view of the same n images.
        alpha: exponent (2 in the paper).

    Returns:
        Scalar in [0, 2^alpha]; lower is better aligned.
    """
    if x.shape != y.shape or x.dim() != 2:
        raise ValueError(f"x and y must both be [n, d], got {list(x.shape)} and {list(y.shape)}")
    x, y = F.normalize(x.float(), dim=1), F.normalize(y.float(), dim=1)
    return (x - y).norm(dim=1).pow(alpha).mean()


def uniformity(x: torch.Tensor, t: float = 2.0) -> torch.Tensor:
    """``log mean_{i<j} exp(-t ||f(x_i) - f(x_j)||^2)`` of L2-normalised embeddings.

    Args:
        x: [n, d] embeddings, n >= 2.
        t: kernel scale (2 in the paper).

    Returns:
        Scalar <= 0; lower (more negative) is more uniform.
    """
    if x.dim() != 2 or x.shape[0] < 2:
        raise ValueError(f"x must be [n, d] with n >= 2, got {list(x.shape)}")
    x = F.normalize(x.float(), dim=1)
    sq_dists = torch.pdist(x, p=2).pow(2)
    # log-mean-exp, stable for large t.
    return torch.logsumexp(-t * sq_dists, dim=0) - math.log(sq_dists.numel())


def covariance_spectrum(x: torch.Tensor) -> torch.Tensor:
    """Eigenvalues of the embedding covariance, largest first.

    Args:
        x: [n, d] embeddings (not normalised: collapse shows in the raw scale too).

    Returns:
        [d] non-negative eigenvalues, descending.
    """
    if x.dim() != 2 or x.shape[0] < 2:
        raise ValueError(f"x must be [n, d] with n >= 2, got {list(x.shape)}")
    x = x.double()
    centred = x - x.mean(dim=0, keepdim=True)
    cov = centred.T @ centred / (x.shape[0] - 1)
    return torch.linalg.eigvalsh(cov).clamp_min(0).flip(0)


def effective_rank(x: torch.Tensor) -> torch.Tensor:
    """``exp(entropy(p))`` with ``p`` the normalised covariance eigenvalues (Roy & Vetterli, 2007).

    Args:
        x: [n, d] embeddings.

    Returns:
        Scalar in [1, min(n - 1, d)]: d for isotropic embeddings, 1 for a collapse onto a line.
    """
    eig = covariance_spectrum(x)
    total = eig.sum()
    if total <= 0:
        return torch.ones((), dtype=torch.float64)
    p = eig / total
    p = p[p > 0]
    return torch.exp(-(p * p.log()).sum())


@torch.no_grad()
def representation_health(x: torch.Tensor) -> Dict[str, torch.Tensor]:
    """Uniformity (t = 2, after L2 normalisation) and effective rank of embeddings.

    Args:
        x: [n, d] embeddings, n >= 2.

    Returns:
        ``{"uniformity": [], "eff_rank": []}`` float32 scalars.
    """
    return {"uniformity": uniformity(x).float(), "eff_rank": effective_rank(x).float()}


class ValidationSample:
    """A uniform random subset of at most ``max_samples`` validation images' embeddings.

    The same subset every epoch: each image gets a key from a generator seeded with 0 at the
    epoch's first batch, and the ``max_samples`` smallest keys are kept, merged batch by batch in
    O(max_samples) memory. Not simply the first images: solo-learn's validation loader is not
    shuffled, and image folders are sorted by class. Under DDP each process keeps its own shard.

    Args:
        max_samples: the cap, an integer >= 2.
    """

    def __init__(self, max_samples: int = DEFAULT_HEALTH_MAX_SAMPLES) -> None:
        self.max_samples = check_int_at_least("max_samples", max_samples, 2)
        self.reset()

    def reset(self) -> None:
        """Forget everything kept (call at each validation end)."""
        self._keys: Optional[torch.Tensor] = None  # [n] float64 random keys, n <= cap
        self.kept: Dict[str, torch.Tensor] = {}  # e.g. "feats" [n, F], "z" [n, d], on CPU
        self._gen: Optional[torch.Generator] = None

    @property
    def size(self) -> int:
        """How many images are kept."""
        return 0 if self._keys is None else int(self._keys.numel())

    @torch.no_grad()
    def add(self, embeddings: Dict[str, torch.Tensor]) -> None:
        """Merge one batch's embeddings (each [b, *], same b) into the kept subset."""
        if self._gen is None:
            self._gen = torch.Generator().manual_seed(0)
        some = next(iter(embeddings.values()))
        keys = torch.rand(some.shape[0], generator=self._gen, dtype=torch.float64)
        if self._keys is not None:
            keys = torch.cat([self._keys, keys])
            embeddings = {k: torch.cat([self.kept[k], v]) for k, v in embeddings.items()}
        keep = torch.argsort(keys)[: self.max_samples]
        self._keys = keys[keep]
        self.kept = {k: v[keep] for k, v in embeddings.items()}


class RepresentationHealth(Callback):
    """Log the ``train_repr_*`` and ``val_repr_*`` values (see the module docstring).

    Args:
        max_samples: validation images kept per process (:class:`ValidationSample`).
    """

    def __init__(self, max_samples: int = DEFAULT_HEALTH_MAX_SAMPLES) -> None:
        self.sample = ValidationSample(max_samples)
        self._features: List[torch.Tensor] = []
        self._hook: Any = None

    # ------------------------------------------------------------------ training steps

    @torch.no_grad()
    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        step = getattr(pl_module, "last_contrastive", None)
        if step is None:  # e.g. MoCo v3's own loss, which the method does not return apart
            return
        pl_module.last_contrastive = None
        views = step["anchor_views"]
        values = {
            "alignment": alignment(views[0], views[1]),
            "mi_bound": math.log(step["num_negatives"] + 1) - step["nce_nats"].float(),
        }
        for name, value in values.items():
            pl_module.log(f"train_repr_{name}", value, on_step=True, on_epoch=True, sync_dist=True)

    # ------------------------------------------------------------------ validation

    def on_validation_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self.sample.reset()
        if self._hook is None and not trainer.sanity_checking:
            self._hook = pl_module.backbone.register_forward_hook(self._keep_features)

    def _keep_features(self, module: Any, inputs: Any, output: torch.Tensor) -> None:
        self._features.append(output.detach())

    def on_validation_batch_start(self, *args: Any, **kwargs: Any) -> None:
        self._features = []

    @torch.no_grad()
    def on_validation_batch_end(self, trainer: Any, pl_module: Any, *args: Any, **kw: Any) -> None:
        if self._hook is None or not self._features:
            return
        feats = self._features[0]  # solo-learn's validation forward calls the backbone once
        self._features = []
        kept = {"feats": feats.float().cpu()}
        projector = getattr(pl_module, "projector", None)
        if projector is not None:
            kept["z"] = projector(feats).float().cpu()
        self.sample.add(kept)

    def on_validation_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        """Log ``val_repr_{feats,z}_{uniformity,eff_rank}``; under DDP each process measures its
        own shard and Lightning averages the values."""
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        if self.sample.size >= 2:
            for kind, x in self.sample.kept.items():
                for name, value in representation_health(x).items():
                    pl_module.log(
                        f"val_repr_{kind}_{name}", value.to(pl_module.device), sync_dist=True
                    )
        self.sample.reset()
