"""The ``method_kwargs`` of each method, declared once: name, type, default, allowed values, doc.

Validation, defaults and the documentation tables all come from these declarations:
:func:`apply_settings` checks a config and fills in defaults (inside the methods'
``add_and_assert_specific_cfg``, which runs inside the Hydra task function, before any training
step), and :func:`settings_table` renders the table that the methods' docstrings and
docs/solo-learn-usage.md show.

solo-learn checks method kwargs with bare ``assert``s and ignores unknown keys, so a misspelled
``d_neg`` would silently train with the default; here an unknown key is refused with a did-you-mean
and the list of allowed keys, and every value is checked against its declared type.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass
from numbers import Real
from typing import Any, Dict, Mapping, Sequence, Tuple

import omegaconf
from omegaconf import OmegaConf

from attnce_plugin.checks import check_int_at_least, check_positive_finite


class MethodConfigError(ValueError):
    """A method_kwargs (or momentum) entry is unknown, missing or out of range."""


class _Required:
    def __repr__(self) -> str:
        return "required"


#: Default of a setting that has none: the user must give it.
REQUIRED: Any = _Required()

#: Setting kinds and the phrase their error messages use.
KINDS: Dict[str, str] = {
    "int>=1": "an integer >= 1",
    "float>0": "a finite number > 0",
    "bool": "true or false",
    "choice": "one of",
}


@dataclass(frozen=True)
class Setting:
    """One ``method_kwargs`` key of a method.

    Attributes:
        name: the key.
        kind: one of :data:`KINDS`.
        default: the value used when the key is absent, or :data:`REQUIRED`.
        doc: one line for the settings table.
        choices: the allowed values of a ``choice`` setting.
    """

    name: str
    kind: str
    default: Any
    doc: str
    choices: Tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"Setting {self.name}: kind {self.kind!r} is not one of {list(KINDS)}")
        if (self.kind == "choice") != bool(self.choices):
            raise ValueError(f"Setting {self.name}: choices go with kind 'choice' only")

    def check(self, method: str, value: Any) -> Any:
        """Return ``value`` (as the declared type), or raise :class:`MethodConfigError`.

        Args:
            method: the method's registered name, shown in messages.
            value: the user's value.
        """
        key = f"method_kwargs.{self.name}"
        got = f"got {value!r} of type {type(value).__name__}"
        if self.kind == "bool":
            # A string such as "false" would be truthy in Python: refused rather than read.
            if not isinstance(value, bool):
                raise MethodConfigError(f"{key} must be true or false, {got}")
            return value
        if self.kind == "int>=1":
            return check_int_at_least(key, value, 1, MethodConfigError)
        if self.kind == "float>0":
            return check_positive_finite(key, value, MethodConfigError)
        if value not in self.choices:
            raise MethodConfigError(
                f"{key} of method '{method}' must be one of {', '.join(self.choices)}, "
                f"got {value!r}"
            )
        return value

    @property
    def type_text(self) -> str:
        """The allowed values, as the settings table shows them."""
        if self.kind == "choice":
            return " \\| ".join(f"`{c}`" for c in self.choices)
        return {"int>=1": "int >= 1", "float>0": "float > 0", "bool": "bool"}[self.kind]

    @property
    def default_text(self) -> str:
        """The default, as the settings table shows it."""
        if self.default is REQUIRED:
            return "required"
        if isinstance(self.default, bool):
            return f"`{str(self.default).lower()}`"
        return f"`{self.default}`"


def apply_settings(cfg: omegaconf.DictConfig, method: str, settings: Sequence[Setting]) -> None:
    """Refuse unknown, missing or bad ``cfg.method_kwargs`` entries and fill in defaults, in place.

    Args:
        cfg: the whole config; ``cfg.method_kwargs`` is read and updated.
        method: the method's registered name, shown in messages.
        settings: every key the method understands.

    Raises:
        MethodConfigError: naming the bad key and the allowed keys or values.
    """
    by_name = {s.name: s for s in settings}
    allowed = sorted(by_name)
    if "method_kwargs" not in cfg or cfg.method_kwargs is None:
        cfg.method_kwargs = {}
    kwargs = cfg.method_kwargs
    for key in list(kwargs.keys()):
        if key not in by_name:
            close = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise MethodConfigError(
                f"method_kwargs.{key} is not a setting of method '{method}'{hint}; "
                f"allowed keys: {', '.join(allowed)}"
            )
    for setting in settings:
        absent = (
            setting.name not in kwargs
            or OmegaConf.is_missing(kwargs, setting.name)
            or kwargs[setting.name] is None
        )
        if absent:
            if setting.default is REQUIRED:
                raise MethodConfigError(
                    f"method_kwargs.{setting.name} is required by method '{method}'; "
                    f"allowed keys: {', '.join(allowed)}"
                )
            kwargs[setting.name] = setting.default
        kwargs[setting.name] = setting.check(method, kwargs[setting.name])


def settings_table(settings: Sequence[Setting]) -> str:
    """A markdown table of the settings: key, allowed values, default, what it does."""
    lines = ["| key | values | default | what |", "|---|---|---|---|"]
    for s in settings:
        lines.append(f"| `{s.name}` | {s.type_text} | {s.default_text} | {s.doc} |")
    return "\n".join(lines)


def document_settings(cls: type) -> type:
    """Class decorator: replace ``{settings}`` in the class docstring by its settings table."""
    if cls.__doc__ and "{settings}" in cls.__doc__:
        table = settings_table(cls.SETTINGS).replace("\n", "\n        ")
        cls.__doc__ = cls.__doc__.replace("{settings}", table)
    return cls


#: Keys solo-learn's ``BaseMomentumMethod`` reads under ``momentum:``.
MOMENTUM_KEYS = ("base_tau", "final_tau", "classifier")


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
            raise MethodConfigError(
                f"momentum.{key} is required by method '{method}'; set {allowed}"
            )
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


def check_compile_cfg(cfg: omegaconf.DictConfig, method: str) -> None:
    """Refuse ``method_kwargs.compile: true`` together with ``sync_batchnorm: True``.

    Lightning turns every BatchNorm into ``torch.nn.SyncBatchNorm`` under DDP when
    ``sync_batchnorm`` is set (all shipped GPU configs set it). ``torch.compile`` cannot trace
    SyncBatchNorm's cross-process statistics (an autograd Function taking a process group): it
    breaks the graph at each of them (a ResNet-18 has 20), so little is left to compile, and with
    DDP some torch releases fail to compile it at all (pytorch/pytorch#161302, #107372, #100239).
    Refused here, at configuration time, rather than at the first training step.

    Raises:
        MethodConfigError: naming both keys and the two ways out.
    """
    compile_on = OmegaConf.select(cfg, "method_kwargs.compile", default=False)
    sync_bn = OmegaConf.select(cfg, "sync_batchnorm", default=False)
    if compile_on is True and bool(sync_bn):
        raise MethodConfigError(
            f"method '{method}': method_kwargs.compile=true cannot be combined with "
            f"sync_batchnorm={sync_bn!r}: torch.compile breaks its graph at every SyncBatchNorm "
            "layer (cross-process statistics) and some torch releases fail to compile them under "
            "DDP. Allowed: method_kwargs.compile=false with sync_batchnorm=True, or "
            "method_kwargs.compile=true with sync_batchnorm=False (each process then normalises "
            "over its own batch; on one GPU nothing changes)"
        )


# --------------------------------------------------------------------------- the declarations

_NETWORK = (
    Setting("proj_hidden_dim", "int>=1", REQUIRED, "hidden width of the projector"),
    Setting(
        "proj_output_dim", "int>=1", REQUIRED, "dimension of the projections the loss compares"
    ),
)
_ATTENTION = (
    Setting("temperature", "float>0", REQUIRED, "softmax temperature tau"),
    Setting(
        "d_pos", "float>0", 1.0, "positive-attention scale (larger: more weight on hard positives)"
    ),
    Setting(
        "d_neg", "float>0", 1.0, "negative-attention scale (smaller: more focus on hard negatives)"
    ),
)
#: Settings of how the networks run, the same in both methods.
RUN_SETTINGS: Tuple[Setting, ...] = (
    Setting(
        "batch_positives",
        "bool",
        False,
        "forward the positive crops of one size as one batch (faster; BatchNorm then normalises "
        "them over M*b images)",
    ),
    Setting(
        "positives_update_bn",
        "bool",
        True,
        "let the positive crops update BatchNorm's running statistics (solo-learn's behaviour); "
        "set false with positives smaller than the anchors",
    ),
    Setting(
        "compile",
        "bool",
        False,
        "`torch.compile` the networks in place (checkpoint keys unchanged); refused with "
        "`sync_batchnorm: True`",
    ),
    Setting(
        "attention_log_every", "int>=1", 10, "batches between two logs of the `train_attn_*` values"
    ),
)

#: ``attentionnce`` (SimCLR form).
ATTENTIONNCE_SETTINGS: Tuple[Setting, ...] = (
    *_NETWORK,
    Setting(
        "projector",
        "choice",
        "mlp",
        "`mlp`: solo-learn's SimCLR projector (Linear-ReLU-Linear); `mlp_bn`: the authors' "
        "(Linear without bias-BatchNorm-ReLU-Linear)",
        choices=("mlp", "mlp_bn"),
    ),
    *_ATTENTION,
    Setting(
        "loss",
        "choice",
        "attentionnce",
        "`simclr`: solo-learn's SimCLR loss on the 2 anchors (positive crops unused), the baseline "
        "with the same network and recipe; `simclr_all_views`: solo-learn's SimCLR loss on all "
        "2 + M views (every other view of the image a positive), the baseline that sees the same "
        "views",
        choices=("attentionnce", "simclr", "simclr_all_views"),
    ),
    Setting(
        "anchor",
        "choice",
        "views",
        "`mean`: one anchor per image, the mean of its 2 anchor views (the rebuttal's "
        "AttentionNCE*)",
        choices=("views", "mean"),
    ),
    *RUN_SETTINGS,
)

#: ``mocov3_attentionnce`` (MoCo v3 form).
MOCOV3_ATTENTIONNCE_SETTINGS: Tuple[Setting, ...] = (
    *_NETWORK,
    Setting("pred_hidden_dim", "int>=1", REQUIRED, "hidden width of MoCo v3's predictor"),
    *_ATTENTION,
    Setting(
        "loss",
        "choice",
        "attentionnce",
        "`mocov3`: solo-learn's MoCo v3 loss, step for step (positive crops unused)",
        choices=("mocov3", "attentionnce"),
    ),
    Setting(
        "key_in_prototype",
        "bool",
        True,
        "whether the other anchor view's momentum key is one of the prototype's candidates "
        "(`false`: the M positives' keys alone)",
    ),
    *RUN_SETTINGS,
)
