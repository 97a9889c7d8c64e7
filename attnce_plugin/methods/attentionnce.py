"""``attentionnce``: AttentionNCE in the SimCLR framework, as a solo-learn method."""

from __future__ import annotations

from typing import Any, Dict, List, Sequence

import omegaconf
import torch
import torch.nn as nn
from solo.methods.base import BaseMethod

from attnce_plugin.attention import attention_stats
from attnce_plugin.losses import attentionnce_loss_func
from attnce_plugin.methods.common import (
    DEFAULT_FINITE_CHECK_EVERY,
    FiniteLossGuard,
    apply_crop_layout,
    check_method_kwargs,
    check_positive_int_kwarg,
    check_positive_kwargs,
)


class AttentionNCE(FiniteLossGuard, BaseMethod):
    """AttentionNCE (SimCLR form): 2 anchor crops and M positive crops per image, one network.

    Extra cfg settings:
        method_kwargs:
            proj_hidden_dim (int): hidden width of the projector.
            proj_output_dim (int): dimension of the projections the loss compares.
            temperature (float): tau > 0 (the paper uses 0.5).
            d_pos (float): positive-attention scale > 0 (default 1.0).
            d_neg (float): negative-attention scale > 0 (default 1.0).
            finite_check_every (int): batches between host-side checks that the loss is finite
                (default 50; also checked at each epoch's last batch). A non-finite loss stops
                training with :class:`~attnce_plugin.methods.common.NonFiniteLossError`.
        augmentations: the first 2 crops are the anchors, all later crops the positives (see
            :mod:`attnce_plugin.methods.crops`).

    The anchors go through ``forward`` (online linear probe and kNN see them, as for SimCLR); the
    positives go through ``multicrop_forward`` (backbone + projector, no classifier).
    """

    METHOD_NAME = "attentionnce"
    ALLOWED_KWARGS = (
        "proj_hidden_dim",
        "proj_output_dim",
        "temperature",
        "d_pos",
        "d_neg",
        "finite_check_every",
    )

    def __init__(self, cfg: omegaconf.DictConfig):
        super().__init__(cfg)

        self.temperature: float = float(cfg.method_kwargs.temperature)
        self.d_pos: float = float(cfg.method_kwargs.d_pos)
        self.d_neg: float = float(cfg.method_kwargs.d_neg)
        self._init_finite_guard(cfg.method_kwargs.finite_check_every)

        proj_hidden_dim: int = cfg.method_kwargs.proj_hidden_dim
        proj_output_dim: int = cfg.method_kwargs.proj_output_dim
        # Same shape as solo-learn's SimCLR projector, so that results compare with SimCLR's.
        self.projector = nn.Sequential(
            nn.Linear(self.features_dim, proj_hidden_dim),
            nn.ReLU(),
            nn.Linear(proj_hidden_dim, proj_output_dim),
        )

    @staticmethod
    def add_and_assert_specific_cfg(cfg: omegaconf.DictConfig) -> omegaconf.DictConfig:
        """Fill defaults and refuse bad method_kwargs or crop layouts (see the class docstring).

        Raises:
            MethodConfigError: unknown/missing/out-of-range ``method_kwargs``.
            CropLayoutError: the augmentations are not 2 anchors followed by positives.
        """
        cfg = super(AttentionNCE, AttentionNCE).add_and_assert_specific_cfg(cfg)
        check_method_kwargs(
            cfg,
            AttentionNCE.METHOD_NAME,
            AttentionNCE.ALLOWED_KWARGS,
            required=("proj_hidden_dim", "proj_output_dim", "temperature"),
            defaults={
                "d_pos": 1.0,
                "d_neg": 1.0,
                "finite_check_every": DEFAULT_FINITE_CHECK_EVERY,
            },
        )
        check_positive_kwargs(cfg, ("temperature", "d_pos", "d_neg"))
        check_positive_int_kwarg(cfg, "finite_check_every")
        apply_crop_layout(cfg, require_positives=True)
        return cfg

    @property
    def learnable_params(self) -> List[Dict[str, Any]]:
        """The backbone and online classifier (from BaseMethod) plus the projector."""
        return super().learnable_params + [
            {"name": "projector", "params": self.projector.parameters()}
        ]

    def forward(self, X: torch.Tensor) -> Dict[str, Any]:
        """Backbone, online classifier and projector for an anchor crop.

        Args:
            X: [b, 3, H, W] images.

        Returns:
            The parent's outputs (``feats`` [b, F], ``logits``) plus ``z`` [b, proj_output_dim].
        """
        out = super().forward(X)
        out["z"] = self.projector(out["feats"])
        return out

    def multicrop_forward(self, X: torch.Tensor) -> Dict[str, Any]:
        """Backbone and projector for a positive crop (any size).

        Args:
            X: [b, 3, h, w] images.

        Returns:
            ``feats`` [b, F] and ``z`` [b, proj_output_dim].
        """
        out = super().multicrop_forward(X)
        out["z"] = self.projector(out["feats"])
        return out

    def training_step(self, batch: Sequence[Any], batch_idx: int) -> torch.Tensor:
        """AttentionNCE loss plus the online classifier's loss.

        Args:
            batch: ``[indexes [b], [crop_0 .. crop_{1+M}], targets [b]]``; crops 0-1 are anchors.
            batch_idx: index of the batch.

        Returns:
            Scalar total loss.
        """
        indexes = batch[0]
        out = super().training_step(batch, batch_idx)
        z = out["z"]
        anchors = torch.cat(z[: self.num_large_crops])  # [2b, d], view-major
        positives = torch.stack(z[self.num_large_crops :], dim=1)  # [b, M, d]

        nce_loss, weights = attentionnce_loss_func(
            anchors,
            positives,
            indexes,
            temperature=self.temperature,
            d_pos=self.d_pos,
            d_neg=self.d_neg,
            return_attention=True,
        )
        self._record_loss(nce_loss)
        # Same key as solo-learn's SimCLR, so both methods share dashboards.
        self.log("train_nce_loss", nce_loss, on_epoch=True, sync_dist=True)
        log_attention(self, attention_stats(weights))
        return nce_loss + out["loss"]


def log_attention(module: Any, stats: Dict[str, torch.Tensor]) -> None:
    """Log attention diagnostics as ``train_attn_<name>`` (``max_beta`` reduced with max)."""
    for name, value in stats.items():
        module.log(
            f"train_attn_{name}",
            value,
            on_epoch=True,
            sync_dist=True,
            reduce_fx="max" if name == "max_beta" else "mean",
        )
