"""Every change the plugin makes to solo-learn at run time, and every solo-learn line it relies on.

solo-learn's scripts (``main_pretrain.py``, ``main_linear.py``, ``main_knn.py``, ``main_umap.py``)
run unmodified. Three patches make them run the plugin's methods, all applied only through the
plugin's own entry points (the Hydra callback of the shipped configs, the CLI wrappers,
:func:`attnce_plugin.register`) and none changing anything for solo-learn's own methods or
backbones:

1. :func:`add_methods`: ``attentionnce`` and ``mocov3_attentionnce`` are added to the
   ``solo.methods.METHODS`` dict in place (new keys only; solo-learn's entries are untouched).
2. :func:`add_backbones`: ``cifar_resnet18`` and ``cifar_resnet50`` (the authors' 32 px ResNet,
   :mod:`attnce_plugin.backbones`, used by the paper configs) are added to solo-learn's
   ``BaseMethod._BACKBONES`` dict in place (new keys only).
3. :func:`patch_pretrain_parse_cfg`: the ``parse_cfg`` global of ``main_pretrain.py`` is wrapped so
   that a config of one of the plugin's methods gets its crop roles (2 anchors + M positives at any
   size) before ``main_pretrain.py`` refuses ``num_large_crops != 2``; any other method's config
   goes to solo-learn's ``parse_cfg`` untouched. (It also resolves the config's interpolations in
   place, so checkpoints' ``args.json`` hold plain values.) Nothing else is wrapped: not solo-learn's module
   attribute, not ``main_linear.py`` (which needs no hook).

The methods themselves also rely on two solo-learn internals (no patching): the MoCo form builds
its backbones through ``BaseMethod._BACKBONES`` under the name ``"mocov3"``, and calls
``BaseMomentumMethod.training_step`` directly instead of ``MoCoV3.training_step`` (which would add
MoCo v3's own loss). The ``attnce-knn`` wrapper (no patching either) relies on how ``main_knn.py``
reads its options and loads the checkpoint: it fills the options solo-learn's parser leaves at
None, and it sets the default ``map_location`` of the methods' own ``load_from_checkpoint``.

:data:`RELIANCES` lists each of these with the solo-learn line (at the pinned commit 9187ea3) it
depends on, and :func:`check_reliances` tells, by name, which no longer hold in the installed
solo-learn (a test runs it, so an upgrade that breaks one fails loudly).
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, MutableMapping, Optional

from omegaconf import OmegaConf

from attnce_plugin.solo_compat import require_solo, solo_checkout_dir

# Marks a wrapper so that installing twice (callback hooks, DDP re-runs, tests) never nests.
_ORIGINAL_ATTR = "__attnce_original__"


def add_methods(registry: MutableMapping[str, type], ours: Dict[str, type]) -> None:
    """Add ``ours`` to solo-learn's method registry in place; idempotent.

    In place because ``main_pretrain.py``, ``main_knn.py`` and ``main_umap.py`` imported that same
    dict object by name: rebinding ``solo.methods.METHODS`` would not reach them.

    Raises:
        RuntimeError: the registry already holds another class (solo-learn's or a third party's)
            under one of our names.
    """
    for name, cls in ours.items():
        existing = registry.get(name)
        if existing is not None and existing is not cls:
            # A re-imported copy of our own class is fine to replace; anybody else's is not.
            if not getattr(existing, "__module__", "").startswith("attnce_plugin."):
                raise RuntimeError(
                    f"solo.methods.METHODS['{name}'] is already {existing.__module__}."
                    f"{existing.__qualname__}; attnce_plugin will not overwrite it"
                )
        registry[name] = cls


def add_backbones(registry: MutableMapping[str, Any], ours: Dict[str, Any]) -> None:
    """Add ``ours`` to solo-learn's backbone registry (``BaseMethod._BACKBONES``) in place;
    idempotent. In place because ``BaseMethod.__init__`` and ``main_linear.py`` check names
    against that same dict.

    Raises:
        RuntimeError: the registry already holds another factory under one of our names.
    """
    for name, factory in ours.items():
        existing = registry.get(name)
        if existing is not None and existing is not factory:
            if not getattr(existing, "__module__", "").startswith("attnce_plugin."):
                raise RuntimeError(
                    f"solo-learn's BaseMethod._BACKBONES['{name}'] is already {existing!r}; "
                    "attnce_plugin will not overwrite it"
                )
        registry[name] = factory


def wrap_pretrain_parse_cfg(parse_cfg: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """Wrap ``solo.args.pretrain.parse_cfg`` to set the crop roles of the plugin's methods.

    For ``method: attentionnce`` / ``mocov3_attentionnce`` the layout is checked before solo-learn's
    parsing (a bad one stops the run with a message saying what to change) and afterwards
    ``data.num_large_crops = 2`` and ``data.num_small_crops = M``; every other method's config is
    passed to ``parse_cfg`` and returned untouched. Idempotent.
    """
    if getattr(parse_cfg, _ORIGINAL_ATTR, None) is not None:
        return parse_cfg

    @functools.wraps(parse_cfg)
    def attnce_parse_cfg(cfg: Any) -> Any:
        from attnce_plugin.methods import METHODS as OURS

        cls = OURS.get(cfg.get("method"))
        if cls is None:
            return parse_cfg(cfg)
        # The shipped configs interpolate crop sizes and probabilities from ``views.*``: resolve
        # them once, so that checkpoints' args.json and loggers see plain values.
        OmegaConf.resolve(cfg)
        require_positives = cls.requires_positives(cfg)
        from attnce_plugin.methods.crops import apply_crop_layout, resolve_crop_layout

        resolve_crop_layout(cfg.get("augmentations"), require_positives=require_positives)
        cfg = parse_cfg(cfg)
        apply_crop_layout(cfg, require_positives=require_positives)
        return cfg

    setattr(attnce_parse_cfg, _ORIGINAL_ATTR, parse_cfg)
    return attnce_parse_cfg


def patch_pretrain_parse_cfg(namespace: MutableMapping[str, Any]) -> bool:
    """Point ``namespace["parse_cfg"]`` at :func:`wrap_pretrain_parse_cfg` of it; idempotent.

    ``namespace`` is the global namespace of the script Hydra runs. Only solo-learn's pretraining
    ``parse_cfg`` is wrapped: ``main_linear.py`` (whose ``parse_cfg`` is ``solo.args.linear``'s) and
    any other script are left alone.

    Returns:
        Whether the namespace now holds the wrapper.
    """
    require_solo()
    import solo.args.pretrain as pretrain_args

    found = namespace.get("parse_cfg")
    if found is None:
        return False
    if getattr(found, _ORIGINAL_ATTR, None) is pretrain_args.parse_cfg:
        return True
    if found is not pretrain_args.parse_cfg:
        return False
    namespace["parse_cfg"] = wrap_pretrain_parse_cfg(found)
    return True


# --------------------------------------------------------------------------- what we rely on


@dataclass(frozen=True)
class Reliance:
    """One solo-learn fact a patch or a method depends on.

    Attributes:
        patch: the plugin's piece that depends on it (named in failure messages).
        where: the solo-learn file and lines at the pinned commit.
        what: the fact.
        check: returns ``None`` when the installed solo-learn still has it, else what is wrong.
    """

    patch: str
    where: str
    what: str
    check: Callable[[], Optional[str]]


def _script_source(name: str) -> str:
    return (solo_checkout_dir() / name).read_text()


def _needs(text: str, *snippets: str) -> Optional[str]:
    missing = [s for s in snippets if s not in text]
    return f"no longer contains {missing}" if missing else None


def _check_methods_dict() -> Optional[str]:
    import solo.methods

    if not isinstance(solo.methods.METHODS, dict):
        return f"solo.methods.METHODS is a {type(solo.methods.METHODS).__name__}, not a dict"
    return _needs(
        _script_source("main_pretrain.py"),
        "from solo.methods import METHODS",
        "model = METHODS[cfg.method](cfg)",
    )


def _check_scripts_look_up_methods() -> Optional[str]:
    for script in ("main_knn.py", "main_umap.py"):
        problem = _needs(_script_source(script), "from solo.methods import METHODS")
        if problem:
            return f"{script} {problem}"
    return None


def _check_backbone_registry() -> Optional[str]:
    from solo.methods.base import BaseMethod

    if not isinstance(BaseMethod._BACKBONES, dict):
        return "BaseMethod._BACKBONES is not a dict"
    problem = _needs(
        inspect.getsource(BaseMethod.__init__),
        "assert cfg.backbone.name in BaseMethod._BACKBONES",
        'if self.backbone_name.startswith("resnet"):',
        "self.features_dim: int = self.backbone.num_features",
    )
    if problem:
        return f"BaseMethod.__init__ {problem}"
    return _needs(
        _script_source("main_linear.py"),
        "backbone_model = BaseMethod._BACKBONES[cfg.backbone.name]",
        'if cfg.backbone.name.startswith("resnet"):',
    )


def _check_parse_cfg_global() -> Optional[str]:
    return _needs(
        _script_source("main_pretrain.py"),
        "from solo.args.pretrain import parse_cfg",
        "cfg = parse_cfg(cfg)",
        "if cfg.data.num_large_crops != 2:",
    )


def _check_large_crop_count() -> Optional[str]:
    import solo.args.pretrain as pretrain_args

    return _needs(
        inspect.getsource(pretrain_args.parse_cfg),
        "big_size = cfg.augmentations[0].crop_size",
        "cfg.data.num_large_crops = num_large_crops",
        "cfg.data.num_small_crops = num_small_crops",
    )


def _check_backbone_factories() -> Optional[str]:
    from collections.abc import Mapping

    from solo.methods.base import BaseMethod

    if not isinstance(BaseMethod._BACKBONES, Mapping):
        return "BaseMethod._BACKBONES is not a mapping"
    return _needs(
        inspect.getsource(BaseMethod.__init__),
        "self._BACKBONES[cfg.backbone.name]",
        "self.base_model(method, **kwargs)",
    )


def _check_mocov3_step() -> Optional[str]:
    from solo.methods.base import BaseMomentumMethod
    from solo.methods.mocov3 import MoCoV3

    if MoCoV3.__mro__[1] is not BaseMomentumMethod:
        return "MoCoV3's parent is no longer BaseMomentumMethod"
    return _needs(
        inspect.getsource(MoCoV3.training_step),
        "out = super().training_step(batch, batch_idx)",
        'Q = out["q"]',
        'K = out["momentum_k"]',
        "mocov3_loss_func(",
    )


def _check_knn_options() -> Optional[str]:
    from solo.args.knn import parse_args_knn

    parser = inspect.getsource(parse_args_knn)
    problem = _needs(
        parser,
        "args = parser.parse_args()",
        *(f'parser.add_argument("--{key}"' for key in ("k", "temperature", "distance_function")),
        'parser.add_argument("--feature_type"',
    )
    if problem:
        return f"parse_args_knn {problem}"
    return _needs(
        _script_source("main_knn.py"),
        "args = parse_args_knn()",
        "for feat_type in args.feature_type:",
        "for k in args.k:",
        "for distance_fx in args.distance_function:",
    )


def _check_knn_loading() -> Optional[str]:
    return _needs(
        _script_source("main_knn.py"),
        'model = METHODS[method_args["method"]].load_from_checkpoint(ckpt_path, strict=False, cfg=cfg)',
        "im = im.cuda(non_blocking=True)",
    )


#: Everything the plugin relies on in solo-learn (commit 9187ea3), with the piece that relies on it.
RELIANCES: List[Reliance] = [
    Reliance(
        "add_methods (registration)",
        "solo/methods/__init__.py:43; main_pretrain.py:39,74",
        "METHODS is one module-level dict that main_pretrain.py imports by name and indexes with "
        "cfg.method",
        _check_methods_dict,
    ),
    Reliance(
        "add_methods (registration)",
        "main_knn.py:37,133; main_umap.py:28,47",
        "main_knn.py / main_umap.py look the checkpoint's method up in the same METHODS dict",
        _check_scripts_look_up_methods,
    ),
    Reliance(
        "add_backbones (registration)",
        "solo/methods/base.py:74,186-204; main_linear.py:59-69",
        "BaseMethod and main_linear.py look backbones up in the BaseMethod._BACKBONES dict and "
        "only touch the stem of names starting with 'resnet' (others give num_features)",
        _check_backbone_registry,
    ),
    Reliance(
        "patch_pretrain_parse_cfg",
        "main_pretrain.py:30,65,71-72",
        "main_pretrain.py calls the parse_cfg it imported by name (a global looked up at call "
        "time), then refuses num_large_crops != 2 for all methods but wmse and mae",
        _check_parse_cfg_global,
    ),
    Reliance(
        "patch_pretrain_parse_cfg",
        "solo/args/pretrain.py:137-146",
        "parse_cfg counts a pipeline as large when its crop_size equals the first pipeline's",
        _check_large_crop_count,
    ),
    Reliance(
        "MoCoV3AttentionNCE._BACKBONES",
        "solo/methods/base.py:74,186-193",
        "BaseMethod builds its backbone as self._BACKBONES[name](method, **kwargs), so a class "
        "attribute can pass 'mocov3' as the method name (MoCo v3's ViT)",
        _check_backbone_factories,
    ),
    Reliance(
        "MoCoV3AttentionNCE.training_step",
        "solo/methods/mocov3.py:196-216",
        "MoCoV3.training_step is BaseMomentumMethod.training_step plus MoCo v3's loss on "
        "out['q'] and out['momentum_k']; the AttentionNCE loss replaces that loss",
        _check_mocov3_step,
    ),
    Reliance(
        "attnce-knn (cli/knn.py: complete_knn_argv)",
        "solo/args/knn.py:6-31; main_knn.py:120,161-165",
        "parse_args_knn() parses sys.argv, and main_knn.py iterates over --feature_type, --k, "
        "--distance_function (and --temperature), which the parser leaves at None when not given",
        _check_knn_options,
    ),
    Reliance(
        "attnce-knn map location (cli.run_solo_script, AttentionNCECore.load_from_checkpoint)",
        "main_knn.py:56,133",
        "main_knn.py loads the model with METHODS[...].load_from_checkpoint(...) without a "
        "map_location, then sends .cuda() batches to it",
        _check_knn_loading,
    ),
]


def check_reliances() -> List[str]:
    """Problems with the installed solo-learn, one line per broken reliance (empty: all hold)."""
    problems = []
    for rel in RELIANCES:
        try:
            problem = rel.check()
        except Exception as err:  # a missing module or script is a broken reliance too
            problem = f"{type(err).__name__}: {err}"
        if problem:
            problems.append(f"{rel.patch} relies on {rel.where} ({rel.what}): {problem}")
    return problems
