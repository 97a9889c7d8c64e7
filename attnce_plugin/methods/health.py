"""Representation-health values the methods log (docs/attention-diagnostics.md).

* each training step: ``train_repr_alignment`` of the 2 anchor views' projections and the nominal
  mutual-information bound ``train_repr_mi_bound = log(K + 1) - loss`` (:func:`train_health`);
* each validation end: uniformity and effective rank of the backbone features and projections of
  a fixed random subset of the validation images (:class:`ValidationSample`,
  :func:`representation_health`), logged as ``val_repr_{feats,z}_{uniformity,eff_rank}``.
"""

from __future__ import annotations

import math
from typing import Dict, Iterable, Optional, Sequence

import torch

from attnce_plugin.representation import alignment, effective_rank, uniformity

#: Default cap on the validation images kept per process: uniformity is O(n^2) in pairs
#: (2048 images = 2.1M pairs, ~10 ms on a CPU core).
DEFAULT_HEALTH_MAX_SAMPLES = 2048


@torch.no_grad()
def train_health(
    anchor_views: Sequence[torch.Tensor], nce_loss: torch.Tensor, num_negatives: int
) -> Dict[str, torch.Tensor]:
    """``alignment`` and ``mi_bound`` of one training step.

    * alignment (Wang & Isola, 2020) of the projections of an image's 2 anchor views: the positive
      pairs the training augmentations make (validation batches have one un-augmented view only,
      so alignment cannot be measured there);
    * ``log(K + 1) - loss`` with K the negatives per anchor. For plain InfoNCE (AttentionNCE with
      d_neg -> inf and M = 1) this is the InfoNCE mutual-information lower bound; with beta
      re-weighting and a prototype positive it is the same expression on a different loss, a
      nominal bound to compare runs with, not a guaranteed bound.

    Args:
        anchor_views: >= 2 tensors [b, d], the projections of the anchor views (first two used).
        nce_loss: scalar contrastive loss in nats (MoCo form: its 2 * tau divided out first).
        num_negatives: K per anchor.

    Returns:
        ``{"alignment": [], "mi_bound": []}``, detached.
    """
    return {
        "alignment": alignment(anchor_views[0].detach(), anchor_views[1].detach()),
        "mi_bound": math.log(num_negatives + 1) - nce_loss.detach().float(),
    }


@torch.no_grad()
def representation_health(x: torch.Tensor) -> Dict[str, torch.Tensor]:
    """Uniformity (t = 2, after L2 normalisation) and effective rank of embeddings.

    Args:
        x: [n, d] embeddings, n >= 2.

    Returns:
        ``{"uniformity": [], "eff_rank": []}`` float32 scalars.
    """
    return {"uniformity": uniformity(x).float(), "eff_rank": effective_rank(x).float()}


def mean_stats(stats: Iterable[Dict[str, torch.Tensor]]) -> Dict[str, torch.Tensor]:
    """Combine the attention diagnostics of several loss calls: mean, but max for ``max_beta``."""
    stats = list(stats)
    out: Dict[str, torch.Tensor] = {}
    for key in stats[0]:
        values = torch.stack([s[key].float() for s in stats])
        out[key] = values.max() if key == "max_beta" else values.mean()
    return out


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
        if isinstance(max_samples, bool) or not isinstance(max_samples, int) or max_samples < 2:
            raise ValueError(f"max_samples must be an integer >= 2, got {max_samples!r}")
        self.max_samples = max_samples
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
