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

Each patch names, in a one-line comment, the solo-learn lines (commit 9187ea3) it relies on;
tests/plugin/test_solo_reliances.py checks that the installed solo-learn still has them, with the
other solo-learn internals the methods and the CLI wrappers rely on.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Dict, MutableMapping

from omegaconf import OmegaConf

from attnce_plugin.solo_compat import require_solo

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
    # Relies on solo/methods/__init__.py:43 (one dict), main_pretrain.py:39,74, main_knn.py:37,133.
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
    # Relies on solo/methods/base.py:74,186-205 and main_linear.py:59-69 (non-"resnet" names).
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
        from attnce_plugin.methods.crops import NUM_ANCHORS, resolve_crop_layout

        cls = OURS.get(cfg.get("method"))
        if cls is None:
            return parse_cfg(cfg)
        # The shipped configs interpolate crop sizes and probabilities from ``views.*``: resolve
        # them once, so that checkpoints' args.json and loggers see plain values.
        OmegaConf.resolve(cfg)
        # Checked before solo-learn's parsing, so a bad layout stops with what to change.
        layout = resolve_crop_layout(
            cfg.get("augmentations"), require_positives=cls.requires_positives(cfg)
        )
        cfg = parse_cfg(cfg)
        # Relies on solo/args/pretrain.py:138-146 (large = the first pipeline's crop_size).
        cfg.data.num_large_crops = NUM_ANCHORS
        cfg.data.num_small_crops = layout.num_positives
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

    # Relies on main_pretrain.py:30,65,71 (the global parse_cfg, then num_large_crops != 2 refused).
    found = namespace.get("parse_cfg")
    if found is None:
        return False
    if getattr(found, _ORIGINAL_ATTR, None) is pretrain_args.parse_cfg:
        return True
    if found is not pretrain_args.parse_cfg:
        return False
    namespace["parse_cfg"] = wrap_pretrain_parse_cfg(found)
    return True
