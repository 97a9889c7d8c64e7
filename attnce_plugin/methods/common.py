"""What both AttentionNCE methods add to their solo-learn base class, written once."""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import fields
from typing import Any, Callable, ClassVar, Dict, Iterator, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from attnce_plugin.diagnostics import AttentionDiagnostics, alignment
from attnce_plugin.losses import AttentionWeights, attention_stats, gather, same_class_counts
from attnce_plugin.settings import MethodConfigError, read_settings


@contextmanager
def bn_running_stats_frozen(module: nn.Module, frozen: bool) -> Iterator[None]:
    """BatchNorm layers normalise with the batch's statistics as usual, but their running
    statistics (what evaluation and checkpoints use) are restored on exit."""
    saved = [
        (m, [m.running_mean.clone(), m.running_var.clone(), m.num_batches_tracked.clone()])
        for m in module.modules()
        if frozen and isinstance(m, nn.modules.batchnorm._BatchNorm) and m.running_mean is not None
    ]
    try:
        yield
    finally:
        for m, values in saved:
            # .data: the same buffers (DDP holds them) without bumping the autograd versions that
            # this step's graph checks in backward.
            for buf, value in zip((m.running_mean, m.running_var, m.num_batches_tracked), values):
                buf.data.copy_(value)


class AttentionNCECommon:
    """Mixin, listed first in the bases. Subclasses set :attr:`KWARGS` (the settings schema) and
    :attr:`BASE_LOSS` (solo-learn's own loss, which needs no positives)."""

    KWARGS: ClassVar[Any]
    BASE_LOSS: ClassVar[str]

    @classmethod
    def add_and_assert_specific_cfg(cls, cfg: DictConfig) -> DictConfig:
        """solo-learn's hook for a method's settings, as SimCLR's (solo/methods/simclr.py:54-71),
        called by BaseMethod.__init__ (solo/methods/base.py:179) before main_pretrain.py builds a
        loader: ``method_kwargs`` read and checked once, left in ``cfg`` typed by :attr:`KWARGS`.
        Ours first: solo-learn's MoCo v3 hook asserts keys without a message (mocov3.py:131-134)."""
        read_settings(cfg, cls.KWARGS, cls.BASE_LOSS)
        return super().add_and_assert_specific_cfg(cfg)  # type: ignore[misc]

    def __init__(self, cfg: DictConfig) -> None:
        super().__init__(cfg)  # type: ignore[call-arg]
        self.kwargs = kw = self.cfg.method_kwargs  # type: ignore[attr-defined]
        # By name; the loss checks each setting once, on its first call.
        self.loss_kwargs = dict(
            temperature=kw.temperature,
            d_pos=kw.d_pos,
            d_neg=kw.d_neg,
            neg_weighting=kw.neg_weighting.value,
            neg_temperature=kw.neg_temperature,
        )
        self._labels_checked = False
        self.diagnose = bool(OmegaConf.select(cfg, "diagnostics.enabled"))
        # The positives are solo-learn's small crops for its loaders (DALI's output map,
        # solo/data/dali_dataloader.py:797-800); solo-learn's step gets the anchors alone
        # (base.py:247-251,510-516) and the method forwards the positives itself.
        self.num_positive_crops = int(cfg.data.num_small_crops)
        self.num_small_crops, self.num_crops, self.multicrop = 0, 2, False

    @classmethod
    def load_from_checkpoint(cls, checkpoint_path: Any, map_location: Any = None, **kw: Any) -> Any:
        """Onto the current device unless ``map_location`` says otherwise: solo-learn's
        main_knn.py moves every batch there (``.cuda()``, main_knn.py:56-57), and Lightning would
        restore the weights onto the device they were saved from (a CPU run, ``cuda:1``)."""
        here = (
            torch.device("cuda", torch.cuda.current_device())
            if torch.cuda.is_available()
            else "cpu"
        )
        load = super().load_from_checkpoint  # type: ignore[misc]
        return load(checkpoint_path, map_location=map_location or here, **kw)

    def configure_callbacks(self) -> List[Any]:
        """The diagnostics callback when ``diagnostics.enabled``, and every ``_target_`` under
        ``diagnostics.callbacks`` (e.g. the benchmark's run recorder)."""
        extra = OmegaConf.select(self.cfg, "diagnostics.callbacks")  # type: ignore[attr-defined]
        callbacks = [instantiate(spec) for spec in (extra or {}).values()]
        return callbacks + ([AttentionDiagnostics()] if self.diagnose else [])

    def split_batch(self, batch: Sequence[Any]) -> Tuple[List[Any], List[torch.Tensor]]:
        """``(batch of the 2 anchors for solo-learn's step, the M positive crops)``."""
        indexes, crops, targets = batch
        if len(crops) != 2 + self.num_positive_crops:
            raise ValueError(
                f"the batch holds {len(crops)} crops, the config 2 anchors + "
                f"{self.num_positive_crops} positives: data and model use different augmentations"
            )
        return [indexes, list(crops[:2]), targets], list(crops[2:])

    def forward_positives(
        self, forward: Callable[[torch.Tensor], Dict[str, Any]], crops: List[torch.Tensor], key: str
    ) -> torch.Tensor:
        """``forward(crop)[key]`` of the M positive crops, stacked [b, M, d]."""
        kw = self.kwargs
        with bn_running_stats_frozen(self, not kw.positives_update_bn):  # type: ignore[arg-type]
            if not kw.batch_positives:
                return torch.stack([forward(c)[key] for c in crops], dim=1)
            by_size: Dict[Tuple[int, ...], List[int]] = {}
            for i, crop in enumerate(crops):
                by_size.setdefault(tuple(crop.shape), []).append(i)
            outs: Dict[int, torch.Tensor] = {}
            for group in by_size.values():
                joined = forward(torch.cat([crops[i] for i in group]))[key]
                outs.update(zip(group, joined.chunk(len(group))))
            return torch.stack([outs[i] for i in range(len(crops))], dim=1)

    def logs_attention(self, batch_idx: int) -> bool:
        """Whether this step logs ``train_attn_*`` (the loss then returns its attention)."""
        return batch_idx % self.kwargs.attention_log_every == 0

    def oracle_labels(self, labels: torch.Tensor) -> Optional[torch.Tensor]:
        """The batch's class labels for the loss with ``exclude_same_class``, else None. The
        settings refuse the data solo-learn leaves unlabeled; the first batch is checked too."""
        if not self.kwargs.exclude_same_class:
            return None
        if not self._labels_checked:
            if bool((labels < 0).any()):
                raise MethodConfigError(
                    "method_kwargs.exclude_same_class=True needs every image's class label, and "
                    "the first batch holds unlabeled images (label -1); allowed here: false"
                )
            self._labels_checked = True
        return labels

    def log_attention(
        self, calls: Sequence[AttentionWeights], labels: torch.Tensor, candidates: torch.Tensor
    ) -> None:
        """``train_attn_*`` of the loss calls over the same candidates, their anchors as one call's
        (the anchors' and candidates' class labels feed ``argmax_same_class`` only), whatever the
        diagnostics say: they belong beside every result."""
        weights = AttentionWeights(
            *(torch.cat([getattr(c, f.name) for c in calls]) for f in fields(AttentionWeights))
        )
        log = self.log  # type: ignore[attr-defined]
        for name, value in attention_stats(weights).items():
            reduce = "max" if name == "max_beta" else "mean"
            log(f"train_attn_{name}", value, on_epoch=True, sync_dist=True, reduce_fx=reduce)
        # Counts summed over the processes: all of them log this key, or none (a process whose
        # images are all unlabeled included), so they issue the same collectives.
        counts = same_class_counts(weights.beta, labels, candidates)
        same, known = gather(counts.unsqueeze(0), False).sum(dim=0).tolist()
        if known:
            log("train_attn_argmax_same_class", same / known, on_epoch=True)

    def log_representation(
        self, views: Sequence[torch.Tensor], nats: torch.Tensor, negatives: int
    ) -> None:
        """With ``diagnostics.enabled``, the ``train_repr_*`` of this step: the alignment of the 2
        anchor views, and ``log(K + 1)`` minus the contrastive loss in nats (K negatives)."""
        if not self.diagnose:
            return
        with torch.no_grad():
            values = {
                "alignment": alignment(views[0], views[1]),
                "mi_bound": math.log(negatives + 1) - nats.float(),
            }
        log = self.log  # type: ignore[attr-defined]
        for name, value in values.items():
            log(f"train_repr_{name}", value, on_step=True, on_epoch=True, sync_dist=True)
