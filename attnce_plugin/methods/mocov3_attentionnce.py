"""``mocov3_attentionnce``: solo-learn's MoCo v3 with a switch to the AttentionNCE loss."""

from __future__ import annotations

import functools
import logging
from typing import Any, Callable, Sequence

import omegaconf
import torch
from solo.methods.base import BaseMethod, BaseMomentumMethod
from solo.methods.mocov3 import MoCoV3

from attnce_plugin.attention import attention_stats
from attnce_plugin.distributed import world_size
from attnce_plugin.losses import attentionnce_mocov3_loss_func
from attnce_plugin.methods.attentionnce import log_attention
from attnce_plugin.methods.common import (
    DEFAULT_FINITE_CHECK_EVERY,
    RUN_KWARG_DEFAULTS,
    FiniteLossGuard,
    RepresentationHealth,
    apply_crop_layout,
    check_choice_kwarg,
    check_method_kwargs,
    check_momentum_cfg,
    check_num_crops,
    check_positive_int_kwarg,
    check_positive_kwargs,
    check_run_kwargs,
    log_train_health,
    take_positive_crops,
    mean_stats,
)
from attnce_plugin.methods.compiling import compile_submodules
from attnce_plugin.methods.positives import bn_running_stats_frozen, forward_crops

log = logging.getLogger(__name__)

#: Values of ``method_kwargs.loss``.
LOSSES = ("mocov3", "attentionnce")


def _mocov3_backbone(factory: Callable[..., torch.nn.Module]) -> Callable[..., torch.nn.Module]:
    """Wrap a solo-learn backbone factory so that it always builds the ``mocov3`` variant.

    solo-learn's ViT factories pick MoCo v3's ViT only when the method name is ``"mocov3"``;
    our method has another name, so without this a ViT would silently get the plain variant.
    ResNets ignore the name.
    """

    @functools.wraps(factory)
    def build(method: str, *args: Any, **kwargs: Any) -> torch.nn.Module:
        return factory("mocov3", *args, **kwargs)

    return build


class MoCoV3AttentionNCE(FiniteLossGuard, RepresentationHealth, MoCoV3):
    """MoCo v3 whose loss is chosen by ``method_kwargs.loss``.

    Extra cfg settings (on top of MoCo v3's proj_hidden_dim, proj_output_dim, pred_hidden_dim,
    temperature):
        method_kwargs:
            loss (str): ``attentionnce`` (default) or ``mocov3``.
            d_pos (float): positive-attention scale > 0 (default 1.0).
            d_neg (float): negative-attention scale > 0 (default 1.0).
            finite_check_every (int): batches between host-side checks that the loss is finite
                (default 50; also at each epoch's last batch); see
                :class:`~attnce_plugin.methods.common.FiniteLossGuard`.
            batch_positives (bool): send the positive crops of one size through the momentum
                network as one batch of M*b images instead of M batches of b (default false).
                Faster; the momentum BatchNorm then normalises the positives over M*b images.
            positives_update_bn (bool): whether the positive crops' forward passes update
                BatchNorm's running statistics (default true, solo-learn's behaviour). Set false
                with positives smaller than the anchors, so that evaluation statistics come from
                anchor-size crops only; see :func:`~attnce_plugin.methods.positives.bn_running_stats_frozen`.
            attention_log_every (int): batches between two computations of the ``train_attn_*``
                diagnostics (default 10; every epoch's first batch is logged).
            compile (bool): ``torch.compile`` the online and momentum networks in place (default
                false; checkpoints keep their keys); see :mod:`attnce_plugin.methods.compiling`.
        momentum:
            base_tau, final_tau (float): required, 0 <= base_tau <= final_tau <= 1 (solo-learn
                would silently default them).

    With ``loss: mocov3`` this is solo-learn's MoCo v3 step for step; positive crops, if the
    augmentations have any, are dropped before any forward pass. With ``loss: attentionnce`` the
    query of each anchor view is pulled towards the attention prototype of the momentum keys of
    the other anchor view and of the M positive crops (which only go through the momentum network),
    and pushed from the other images' keys with beta re-weighting; the loss keeps MoCo v3's
    ``2 * temperature`` scale so its learning-rate recipes still apply.
    """

    METHOD_NAME = "mocov3_attentionnce"
    ALLOWED_KWARGS = (
        "proj_hidden_dim",
        "proj_output_dim",
        "pred_hidden_dim",
        "temperature",
        "loss",
        "d_pos",
        "d_neg",
        "finite_check_every",
        *RUN_KWARG_DEFAULTS,
    )
    # Build every backbone as solo-learn builds it for method "mocov3" (the MoCo v3 ViT).
    _BACKBONES = {name: _mocov3_backbone(f) for name, f in BaseMethod._BACKBONES.items()}

    def __init__(self, cfg: omegaconf.DictConfig):
        super().__init__(cfg)
        self.loss_name: str = cfg.method_kwargs.loss
        self.d_pos: float = float(cfg.method_kwargs.d_pos)
        self.d_neg: float = float(cfg.method_kwargs.d_neg)
        self.batch_positives: bool = bool(cfg.method_kwargs.batch_positives)
        self.positives_update_bn: bool = bool(cfg.method_kwargs.positives_update_bn)
        self.attention_log_every: int = int(cfg.method_kwargs.attention_log_every)
        self._init_finite_guard(cfg.method_kwargs.finite_check_every)
        self._init_repr_health()

        # The positive crops never go through the online network: MoCo's positives are momentum
        # keys. Hiding them from BaseMethod.training_step saves their online forward pass (and
        # keeps the online BatchNorm statistics exactly MoCo v3's).
        self.num_positive_crops: int = take_positive_crops(self)
        if self.loss_name == "mocov3" and self.num_positive_crops:
            log.warning(
                "method_kwargs.loss=mocov3 ignores the %d positive crop(s) of the augmentations; "
                "remove them to save data-loading time",
                self.num_positive_crops,
            )
        if cfg.method_kwargs.compile:
            compile_submodules(
                self,
                ("backbone", "projector", "predictor", "momentum_backbone", "momentum_projector"),
            )

    @staticmethod
    def add_and_assert_specific_cfg(cfg: omegaconf.DictConfig) -> omegaconf.DictConfig:
        """Fill defaults and refuse bad method_kwargs or crop layouts (see the class docstring).

        Raises:
            MethodConfigError: unknown/missing/out-of-range ``method_kwargs``, unknown ``loss``,
                or ``momentum`` settings missing, unknown or outside 0 <= base <= final <= 1.
            CropLayoutError: the augmentations are not 2 anchors followed by positives
                (positives are optional with ``loss: mocov3``).
        """
        name = MoCoV3AttentionNCE.METHOD_NAME
        # Before solo-learn's BaseMomentumMethod fills momentum defaults over a missing block.
        check_momentum_cfg(cfg, name)
        cfg = super(MoCoV3AttentionNCE, MoCoV3AttentionNCE).add_and_assert_specific_cfg(cfg)
        check_method_kwargs(
            cfg,
            name,
            MoCoV3AttentionNCE.ALLOWED_KWARGS,
            required=("proj_hidden_dim", "proj_output_dim", "pred_hidden_dim", "temperature"),
            defaults={
                "loss": "attentionnce",
                "d_pos": 1.0,
                "d_neg": 1.0,
                "finite_check_every": DEFAULT_FINITE_CHECK_EVERY,
                **RUN_KWARG_DEFAULTS,
            },
        )
        check_choice_kwarg(cfg, name, "loss", LOSSES)
        check_positive_kwargs(cfg, ("temperature", "d_pos", "d_neg"))
        check_positive_int_kwarg(cfg, "finite_check_every")
        check_run_kwargs(cfg)
        apply_crop_layout(cfg, require_positives=cfg.method_kwargs.loss == "attentionnce")
        return cfg

    def training_step(self, batch: Sequence[Any], batch_idx: int) -> torch.Tensor:
        """MoCo v3's or AttentionNCE's contrastive loss plus the online classifier's loss.

        Args:
            batch: ``[indexes [b], [crop_0 .. crop_{1+M}], targets [b]]``; crops 0-1 are anchors.
            batch_idx: index of the batch.

        Returns:
            Scalar total loss.
        """
        indexes, crops, targets = batch
        crops = [crops] if isinstance(crops, torch.Tensor) else list(crops)
        check_num_crops(crops, self.num_large_crops, self.num_positive_crops)
        anchors_batch = [indexes, crops[: self.num_large_crops], targets]
        if self.loss_name == "mocov3":
            total = super().training_step(anchors_batch, batch_idx)
            # MoCo v3's contrastive loss is not returned apart; a NaN in it makes the total NaN.
            self._record_loss(total)
            return total

        # Skip MoCoV3.training_step (its loss) but keep everything its parents do.
        out = BaseMomentumMethod.training_step(self, anchors_batch, batch_idx)
        queries, keys = out["q"], out["momentum_k"]
        # momentum_forward is no_grad: the positives' keys are targets, like MoCo's keys.
        with bn_running_stats_frozen(self, not self.positives_update_bn):
            positive_outs = forward_crops(
                self.momentum_forward, crops[self.num_large_crops :], self.batch_positives
            )
        positive_keys = torch.stack([o["k"] for o in positive_outs], dim=1)  # [b, M, d]

        log_attention_now = batch_idx % self.attention_log_every == 0
        results = [
            attentionnce_mocov3_loss_func(
                queries[q], keys[k], positive_keys, self.temperature, self.d_pos, self.d_neg,
                return_attention=log_attention_now,
            )
            for q, k in ((0, 1), (1, 0))
        ]
        losses = [r[0] for r in results] if log_attention_now else results
        contrastive_loss = losses[0] + losses[1]
        self._record_loss(contrastive_loss)
        # Same key as solo-learn's MoCo v3, so both losses share dashboards.
        self.log("train_contrastive_loss", contrastive_loss, on_epoch=True, sync_dist=True)
        if log_attention_now:
            log_attention(self, mean_stats([attention_stats(r[1]) for r in results]))
        # In nats per query (the 2 * tau scale divided out, mean of the two symmetric terms);
        # each query's negatives are the other images' keys.
        nce_nats = contrastive_loss.detach() / (2 * self.temperature) / 2
        log_train_health(self, out["z"], nce_nats, world_size() * queries[0].shape[0] - 1)
        return contrastive_loss + out["loss"]
