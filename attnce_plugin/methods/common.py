"""Config handling shared by the AttentionNCE solo-learn methods.

solo-learn checks method kwargs with bare ``assert``s and ignores unknown keys, so a misspelled
``d_neg`` would silently train with the default. The methods here refuse unknown keys, name the
allowed ones, and check the numeric ones, all inside ``add_and_assert_specific_cfg``, which runs
inside the Hydra task function before any training step (errors in Hydra callbacks would only be
logged).
"""

from __future__ import annotations

import difflib
import math
from numbers import Real
from typing import Any, Dict, Iterable, Mapping, Optional, Sequence

import omegaconf
import torch
from omegaconf import OmegaConf

from attnce_plugin.checks import check_positive_finite
from attnce_plugin.methods.crops import CropLayout, CropLayoutError, resolve_crop_layout


class MethodConfigError(ValueError):
    """A method_kwargs (or momentum) entry is unknown, missing or out of range."""


class NonFiniteLossError(FloatingPointError):
    """The self-supervised loss became NaN or infinite during training."""


#: Default of ``method_kwargs.finite_check_every``: batches between two host-side checks of the
#: loss guard (see :class:`FiniteLossGuard`); Lightning's default ``log_every_n_steps`` too.
DEFAULT_FINITE_CHECK_EVERY = 50

#: Default of ``method_kwargs.attention_log_every``: steps between two computations of the
#: attention diagnostics. Asking the loss for its attention weights builds the [n, N] validity
#: mask and the statistics, which cost up to +41 % of the loss's time when done every step
#: (docs/performance.md); Lightning's per-epoch means are then taken over the logged steps.
DEFAULT_ATTENTION_LOG_EVERY = 10

#: Keys solo-learn's ``BaseMomentumMethod`` reads under ``momentum:``.
MOMENTUM_KEYS = ("base_tau", "final_tau", "classifier")


def check_method_kwargs(
    cfg: omegaconf.DictConfig,
    method: str,
    allowed: Iterable[str],
    required: Iterable[str] = (),
    defaults: Optional[Mapping[str, Any]] = None,
) -> None:
    """Refuse unknown or missing ``method_kwargs`` keys and fill in defaults, in place.

    Args:
        cfg: the whole config; ``cfg.method_kwargs`` is read and updated.
        method: registered method name, shown in messages.
        allowed: every key the method understands.
        required: keys that must be present (``???`` counts as absent).
        defaults: values for absent optional keys.

    Raises:
        MethodConfigError: naming the bad key and the allowed ones.
    """
    allowed = sorted(set(allowed))
    kwargs = cfg.method_kwargs
    for key in list(kwargs.keys()):
        if key not in allowed:
            close = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise MethodConfigError(
                f"method_kwargs.{key} is not a setting of method '{method}'{hint}; "
                f"allowed keys: {', '.join(allowed)}"
            )
    for key in required:
        if key not in kwargs or OmegaConf.is_missing(kwargs, key):
            raise MethodConfigError(
                f"method_kwargs.{key} is required by method '{method}'; "
                f"allowed keys: {', '.join(allowed)}"
            )
    for key, value in (defaults or {}).items():
        if key not in kwargs or OmegaConf.is_missing(kwargs, key) or kwargs[key] is None:
            kwargs[key] = value


def check_positive_kwargs(cfg: omegaconf.DictConfig, keys: Iterable[str]) -> None:
    """Require ``cfg.method_kwargs[key]`` to be a finite number > 0 for each key.

    Raises:
        MethodConfigError: naming ``method_kwargs.<key>`` and the allowed range.
    """
    for key in keys:
        try:
            check_positive_finite(f"method_kwargs.{key}", cfg.method_kwargs[key])
        except ValueError as err:
            raise MethodConfigError(str(err)) from None


def check_choice_kwarg(
    cfg: omegaconf.DictConfig, method_name: str, key: str, allowed: Sequence[str]
) -> None:
    """Refuse ``method_kwargs.<key>`` unless it is one of ``allowed``.

    Raises:
        MethodConfigError: naming the key, the method and the allowed values.
    """
    value = cfg.method_kwargs[key]
    if value not in allowed:
        raise MethodConfigError(
            f"method_kwargs.{key} of method '{method_name}' must be one of "
            f"{', '.join(allowed)}, got {value!r}"
        )


def check_positive_int_kwarg(cfg: omegaconf.DictConfig, key: str) -> int:
    """Require ``cfg.method_kwargs[key]`` to be an integer >= 1 and return it.

    Raises:
        MethodConfigError: naming ``method_kwargs.<key>`` and the allowed values.
    """
    value = cfg.method_kwargs[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise MethodConfigError(
            f"method_kwargs.{key} must be an integer >= 1, got {value!r} of type "
            f"{type(value).__name__}"
        )
    return value


def check_bool_kwarg(cfg: omegaconf.DictConfig, key: str) -> bool:
    """Require ``cfg.method_kwargs[key]`` to be ``true`` or ``false`` and return it.

    A string such as ``"false"`` would be truthy in Python; it is refused rather than read.

    Raises:
        MethodConfigError: naming ``method_kwargs.<key>`` and the allowed values.
    """
    value = cfg.method_kwargs[key]
    if not isinstance(value, bool):
        raise MethodConfigError(
            f"method_kwargs.{key} must be true or false, got {value!r} of type "
            f"{type(value).__name__}"
        )
    return value


#: ``method_kwargs`` of both methods that say how the networks run (not what the loss is), with
#: their defaults: see the methods' docstrings.
RUN_KWARG_DEFAULTS: Dict[str, Any] = {
    "batch_positives": False,
    "positives_update_bn": True,
    "compile": False,
    "attention_log_every": DEFAULT_ATTENTION_LOG_EVERY,
}


def check_run_kwargs(cfg: omegaconf.DictConfig) -> None:
    """Refuse bad values of the :data:`RUN_KWARG_DEFAULTS` keys (filled in already).

    Raises:
        MethodConfigError: naming the key and the allowed values.
    """
    check_positive_int_kwarg(cfg, "attention_log_every")
    for key in ("batch_positives", "positives_update_bn", "compile"):
        check_bool_kwarg(cfg, key)


def take_positive_crops(method: Any) -> int:
    """Hide the positive crops from solo-learn's ``BaseMethod.training_step`` and return M.

    The methods forward the positives themselves (per crop or batched, see
    :mod:`attnce_plugin.methods.positives`; MoCo's only through the momentum network), so solo-learn
    must see the 2 anchors alone: no small crops, no ``multicrop_forward`` loop.
    """
    num_positives = int(method.num_small_crops)
    method.num_small_crops = 0
    method.num_crops = method.num_large_crops
    method.multicrop = False
    return num_positives


def check_momentum_cfg(cfg: omegaconf.DictConfig, method: str) -> None:
    """Refuse a MoCo-form config whose ``momentum:`` settings are absent, unknown or out of range.

    solo-learn's ``BaseMomentumMethod`` silently fills ``base_tau = 0.99`` and ``final_tau = 1.0``
    when they are missing and ignores unknown keys, and its ``MomentumUpdater`` only has bare
    ``assert``s. A MoCo run without momentum settings is almost always a config that lost its
    ``momentum:`` block (or misspelled it), so it is refused here; must run before solo-learn's
    ``add_and_assert_specific_cfg`` fills the defaults.

    Allowed: ``momentum.base_tau`` and ``momentum.final_tau`` numbers with
    ``0 <= base_tau <= final_tau <= 1`` (both required); ``momentum.classifier`` a bool (optional).

    Raises:
        MethodConfigError: naming the ``momentum.<key>`` and the allowed values.
    """
    allowed = (
        "momentum.base_tau and momentum.final_tau, numbers with 0 <= base_tau <= final_tau <= 1 "
        "(MoCo v3 uses base_tau: 0.99, final_tau: 1.0)"
    )
    momentum = cfg.get("momentum") if "momentum" in cfg else None
    if momentum is None or not isinstance(momentum, (Mapping, omegaconf.DictConfig)):
        raise MethodConfigError(
            f"method '{method}' needs momentum settings, got momentum={momentum!r}; set {allowed}"
        )
    for key in list(momentum.keys()):
        if key not in MOMENTUM_KEYS:
            close = difflib.get_close_matches(str(key), MOMENTUM_KEYS, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise MethodConfigError(
                f"momentum.{key} is not a momentum setting{hint}; allowed keys: "
                f"{', '.join(MOMENTUM_KEYS)}"
            )
    values = {}
    for key in ("base_tau", "final_tau"):
        if key not in momentum or OmegaConf.is_missing(momentum, key) or momentum[key] is None:
            raise MethodConfigError(f"momentum.{key} is required by method '{method}'; set {allowed}")
        value = momentum[key]
        if (
            isinstance(value, bool)
            or not isinstance(value, Real)
            or not math.isfinite(float(value))
            or not 0.0 <= float(value) <= 1.0
        ):
            raise MethodConfigError(
                f"momentum.{key} must be a number in [0, 1], got {value!r} of type "
                f"{type(value).__name__}; set {allowed}"
            )
        values[key] = float(value)
    if values["base_tau"] > values["final_tau"]:
        raise MethodConfigError(
            f"momentum.base_tau ({values['base_tau']}) must be <= momentum.final_tau "
            f"({values['final_tau']}): the momentum rises from base_tau to final_tau; set {allowed}"
        )
    if "classifier" in momentum and momentum.classifier is not None:
        if not isinstance(momentum.classifier, bool):
            raise MethodConfigError(
                f"momentum.classifier must be True or False, got {momentum.classifier!r}"
            )


def check_num_crops(crops: Sequence[torch.Tensor], num_anchors: int, num_positives: int) -> None:
    """Refuse a batch whose crop count is not the configured anchors + positives.

    solo-learn asserts the count itself; the methods here forward the positives on their own, so
    they repeat the check with a message that says where the count comes from.

    Raises:
        ValueError: the batch holds a different number of crops.
    """
    if len(crops) != num_anchors + num_positives:
        raise ValueError(
            f"the batch holds {len(crops)} crops, but the augmentations configure "
            f"{num_anchors} anchors + {num_positives} positives; the data pipeline and the model "
            "were built from different augmentations lists"
        )


class FiniteLossGuard:
    """Mixin for the plugin's solo-learn methods: stop training when the loss is NaN or inf.

    Why not a plain ``if not torch.isfinite(loss)`` each step: on a GPU that ``bool()`` waits for
    the whole step to finish, so Lightning's per-step host work could no longer overlap the GPU.
    Instead each step records, with tensor ops on the loss's device and no host sync, the FIRST
    step whose loss was non-finite and that loss value; the host reads that record every
    ``method_kwargs.finite_check_every`` batches and at the last batch of every epoch, i.e.
    before solo-learn's ``Checkpointer`` (an ``on_train_epoch_end`` callback) can save a NaN model
    over the last good checkpoint. Under DDP the flag is all-reduced (max) at the check, so every
    process raises at the same batch and none is left waiting in a collective.

    Use: call :meth:`_init_finite_guard` in ``__init__`` and :meth:`_record_loss` in
    ``training_step``; list this class before the solo-learn base class, so that its
    ``on_train_batch_end`` runs and then chains to the base's (MoCo's momentum update).
    """

    METHOD_NAME: str
    cfg: omegaconf.DictConfig

    def _init_finite_guard(self, check_every: int) -> None:
        """Set the check interval (batches >= 1); state is created lazily on the loss's device."""
        self.finite_check_every: int = int(check_every)
        # Plain attributes, not buffers: DDP broadcasts buffers from rank 0 at every forward,
        # which would erase another rank's record.
        self._nonfinite_step: Optional[torch.Tensor] = None  # [] int64, -1 = none yet
        self._nonfinite_loss: Optional[torch.Tensor] = None  # [] float32
        self._batches_since_check: int = 0

    def _guard_state(self, device: torch.device) -> None:
        if self._nonfinite_step is None or self._nonfinite_step.device != device:
            self._nonfinite_step = torch.full((), -1, dtype=torch.long, device=device)
            self._nonfinite_loss = torch.zeros((), dtype=torch.float32, device=device)

    def _current_step(self) -> int:
        trainer = getattr(self, "_trainer", None)
        return int(trainer.global_step) if trainer is not None else 0

    @torch.no_grad()
    def _record_loss(self, loss: torch.Tensor) -> None:
        """Remember the first non-finite value of the scalar ``loss`` [] without a host sync."""
        value = loss.detach().float().reshape(())
        self._guard_state(value.device)
        first = ~torch.isfinite(value) & (self._nonfinite_step < 0)
        step = torch.full_like(self._nonfinite_step, self._current_step())
        self._nonfinite_step = torch.where(first, step, self._nonfinite_step)
        self._nonfinite_loss = torch.where(first, value, self._nonfinite_loss)

    def _guard_settings(self) -> str:
        cfg = self.cfg
        keys = ("temperature", "d_pos", "d_neg", "loss")
        kwargs = ", ".join(
            f"{k}={cfg.method_kwargs[k]}" for k in keys if k in cfg.method_kwargs
        )
        opt = OmegaConf.select(cfg, "optimizer", default={}) or {}
        return (
            f"method={self.METHOD_NAME}, method_kwargs: {kwargs}; optimizer={opt.get('name')}, "
            f"lr={opt.get('lr')}, batch_size={opt.get('batch_size')}, "
            f"precision={OmegaConf.select(cfg, 'precision', default=None)}"
        )

    def check_finite_loss(self, batch_idx: Optional[int] = None) -> None:
        """Raise :class:`NonFiniteLossError` if any process recorded a non-finite loss (syncs).

        Args:
            batch_idx: the batch just trained, shown in the message.

        Must be called by every process at the same batch under DDP (it all-reduces).
        """
        device = self._nonfinite_step.device if self._nonfinite_step is not None else self.device
        self._guard_state(device)
        flag = (self._nonfinite_step >= 0).to(torch.float32)
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
        if flag.item() == 0:
            return
        local_step = int(self._nonfinite_step.item())
        where = (
            f"first at global step {local_step} (loss = {self._nonfinite_loss.item()})"
            if local_step >= 0
            else "on another process (its message names the step)"
        )
        at = f"batch {batch_idx} of epoch {getattr(self, 'current_epoch', '?')}"
        raise NonFiniteLossError(
            f"the {self.METHOD_NAME} self-supervised loss became NaN/inf, {where}; detected after "
            f"{at} (the guard checks every method_kwargs.finite_check_every="
            f"{self.finite_check_every} batches and at each epoch's last batch). Training stopped "
            f"before a NaN model could be checkpointed. Settings: {self._guard_settings()}. Usual "
            "causes: a learning rate too high for the batch size, fp16 overflow (try "
            "precision=bf16-mixed or 32), or a corrupt input batch"
        )

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        """Chain to the base class (momentum update for MoCo), then run the periodic check."""
        super().on_train_batch_end(outputs, batch, batch_idx)  # type: ignore[misc]
        self._batches_since_check += 1
        trainer = getattr(self, "_trainer", None)
        num_batches = getattr(trainer, "num_training_batches", math.inf) if trainer else math.inf
        last_of_epoch = math.isfinite(num_batches) and batch_idx + 1 >= num_batches
        if self._batches_since_check >= self.finite_check_every or last_of_epoch:
            self._batches_since_check = 0
            self.check_finite_loss(batch_idx)


def apply_crop_layout(cfg: omegaconf.DictConfig, *, require_positives: bool = True) -> CropLayout:
    """Resolve anchor/positive roles from ``cfg.augmentations`` and tell solo-learn, in place.

    Sets ``cfg.data.num_large_crops = 2`` (the anchors: forward + online classifier + kNN) and
    ``cfg.data.num_small_crops = M`` (the positives: ``multicrop_forward``), whatever their sizes.
    Idempotent, so it is safe both in the ``parse_cfg`` hook and in the methods (which also run when
    a checkpoint's ``args.json`` is reloaded by ``main_knn.py``).

    Raises:
        CropLayoutError: the layout is not 2 anchors followed by positives; the message says what
            to change.
    """
    if "augmentations" not in cfg or cfg.augmentations is None:
        raise CropLayoutError(
            "the config has no augmentations list; AttentionNCE needs a pipeline with num_crops: 2 "
            "(the anchors) followed by positive crops"
        )
    layout = resolve_crop_layout(cfg.augmentations, require_positives=require_positives)
    cfg.data.num_large_crops = layout.num_anchors
    cfg.data.num_small_crops = layout.num_positives
    return layout


def mean_stats(stats: Iterable[Dict[str, torch.Tensor]]) -> Dict[str, torch.Tensor]:
    """Combine the attention diagnostics of several loss calls: mean, but max for ``max_beta``."""
    stats = list(stats)
    out: Dict[str, torch.Tensor] = {}
    for key in stats[0]:
        values = torch.stack([s[key].float() for s in stats])
        out[key] = values.max() if key == "max_beta" else values.mean()
    return out


#: Default cap on the validation images whose features :class:`RepresentationHealth` keeps per
#: process: uniformity is O(n^2) in pairs (2048 images = 2.1M pairs, ~10 ms on a CPU core).
DEFAULT_HEALTH_MAX_SAMPLES = 2048


def log_train_health(
    module: Any,
    anchor_views: Sequence[torch.Tensor],
    nce_loss: torch.Tensor,
    num_negatives: int,
) -> Dict[str, torch.Tensor]:
    """Log ``train_repr_alignment`` and ``train_repr_mi_bound`` for one training step.

    * alignment (Wang & Isola, 2020) of the projections of an image's 2 anchor views: the positive
      pairs the training augmentations make (validation batches have one un-augmented view only,
      so alignment cannot be measured there);
    * ``log(K + 1) - loss`` with K the negatives per anchor. For plain InfoNCE (AttentionNCE with
      d_neg -> inf and M = 1) this is the InfoNCE mutual-information lower bound; with beta
      re-weighting and a prototype positive it is the same expression on a different loss, a
      nominal bound to compare runs with, not a guaranteed bound.

    Args:
        module: the LightningModule that logs.
        anchor_views: >= 2 tensors [b, d], the projections of the anchor views (first two used).
        nce_loss: scalar contrastive loss in nats (MoCo form: divide its 2 * tau out first).
        num_negatives: K per anchor.

    Returns:
        The two logged scalars (detached), keyed ``alignment`` and ``mi_bound``.
    """
    from attnce_plugin.representation import alignment

    with torch.no_grad():
        values = {
            "alignment": alignment(anchor_views[0].detach(), anchor_views[1].detach()),
            "mi_bound": math.log(num_negatives + 1) - nce_loss.detach().float(),
        }
    for name, value in values.items():
        module.log(f"train_repr_{name}", value, on_epoch=True, sync_dist=True)
    return values


@torch.no_grad()
def representation_health(x: torch.Tensor) -> Dict[str, torch.Tensor]:
    """Uniformity (t = 2, after L2 normalisation) and effective rank of embeddings.

    Args:
        x: [n, d] embeddings, n >= 2.

    Returns:
        ``{"uniformity": [], "eff_rank": []}`` float32 scalars.
    """
    from attnce_plugin.representation import effective_rank, uniformity

    return {
        "uniformity": uniformity(x).float(),
        "eff_rank": effective_rank(x).float(),
    }


class RepresentationHealth:
    """Mixin: log representation-health metrics of the validation images at each validation end.

    Keeps the backbone features (``feats``, what the linear probe and kNN read) and, when the
    method has a ``projector``, the projections (``z``, what the loss compares; for the MoCo form
    the projector's output, before the predictor) of at most ``max_samples`` validation images of
    each process, then logs ``val_repr_{feats,z}_{uniformity,eff_rank}``.

    Which images: a uniform random subset without replacement, the same one every epoch (each
    image gets a key from a generator seeded with 0 at the epoch's first batch; the ``max_samples``
    smallest keys are kept, merged batch by batch in O(max_samples) memory). Not simply the first
    images: solo-learn's validation loader is not shuffled, and image folders are sorted by class.

    Under DDP each process measures its own shard and Lightning averages the values
    (``sync_dist``); a shard's effective rank and uniformity estimate the whole set's, they are not
    equal to them. Sanity-check batches are not kept.

    Use: list before the solo-learn base class and call :meth:`_init_repr_health` in ``__init__``.
    """

    def _init_repr_health(self, max_samples: int = DEFAULT_HEALTH_MAX_SAMPLES) -> None:
        """Set the per-process cap (an integer >= 2 images) and empty the store."""
        if isinstance(max_samples, bool) or not isinstance(max_samples, int) or max_samples < 2:
            raise ValueError(f"max_samples must be an integer >= 2, got {max_samples!r}")
        self.health_max_samples: int = max_samples
        self._reset_health_store()

    def _reset_health_store(self) -> None:
        self._health_keys: Optional[torch.Tensor] = None  # [n] float64 random keys, n <= cap
        self._health_store: Dict[str, torch.Tensor] = {}  # "feats" [n, F], "z" [n, d], on CPU
        self._health_gen: Optional[torch.Generator] = None

    def _sanity_checking(self) -> bool:
        trainer = getattr(self, "_trainer", None)
        return bool(trainer is not None and trainer.sanity_checking)

    @torch.no_grad()
    def _keep_for_health(self, embeddings: Dict[str, torch.Tensor]) -> None:
        """Merge one batch's embeddings (each [b, *]) into the kept random subset."""
        if self._health_gen is None:
            self._health_gen = torch.Generator().manual_seed(0)
        some = next(iter(embeddings.values()))
        keys = torch.rand(some.shape[0], generator=self._health_gen, dtype=torch.float64)
        if self._health_keys is not None:
            keys = torch.cat([self._health_keys, keys])
            embeddings = {k: torch.cat([self._health_store[k], v]) for k, v in embeddings.items()}
        keep = torch.argsort(keys)[: self.health_max_samples]
        self._health_keys = keys[keep]
        self._health_store = {k: v[keep] for k, v in embeddings.items()}

    def base_validation_step(self, X: torch.Tensor, targets: torch.Tensor) -> Dict[str, Any]:
        """The base class's step, plus keeping this batch's feats and z for the health metrics."""
        out = super().base_validation_step(X, targets)  # type: ignore[misc]
        if not self._sanity_checking():
            with torch.no_grad():
                feats = out["feats"].detach()
                kept = {"feats": feats.float().cpu()}
                projector = getattr(self, "projector", None)
                if projector is not None:
                    kept["z"] = projector(feats).float().cpu()
            self._keep_for_health(kept)
        return out

    def on_validation_epoch_end(self) -> None:
        """Log ``val_repr_*`` from the kept embeddings, empty the store, then the base's end."""
        if self._health_keys is not None and self._health_keys.numel() >= 2:
            for kind, x in self._health_store.items():
                for name, value in representation_health(x).items():
                    self.log(  # type: ignore[attr-defined]
                        f"val_repr_{kind}_{name}",
                        value.to(self.device),  # type: ignore[attr-defined]
                        sync_dist=True,
                    )
        self._reset_health_store()
        super().on_validation_epoch_end()  # type: ignore[misc]
