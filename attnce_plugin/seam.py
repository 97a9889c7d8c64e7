"""Every change the plugin makes to solo-learn, applied only through the plugin's entry points (the
shipped configs' Hydra callback, :func:`register`, the CLI wrappers); solo-learn's own methods run
exactly as without it. Each patch names the solo-learn lines (commit 9187ea3) it relies on;
tests/plugin/test_seam.py checks that the installed solo-learn still has them.

1. ``attentionnce`` and ``mocov3_attentionnce`` are added to ``solo.methods.METHODS``, and the
   authors' 32 px ResNets to ``BaseMethod._BACKBONES``: new keys only, in place.
2. ``main_pretrain.py``'s ``parse_cfg`` global is wrapped, for the plugin's methods only: solo-learn
   counts every crop at the first crop's size as "large" and ``main_pretrain.py`` refuses any count
   but 2, while AttentionNCE has 2 anchors plus M positives at any size. The wrapper resolves the
   crop roles once: 2 anchors, M positives counted as solo-learn's small crops (its loaders need
   the total); the methods forward the positives themselves.
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Dict

from hydra.experimental.callback import Callback as HydraCallback
from omegaconf import OmegaConf

from attnce_plugin.install import require_solo
from attnce_plugin.settings import num_positives


def register() -> Dict[str, type]:
    """Add the plugin's methods and backbones to solo-learn's registries; idempotent. Returns
    the methods, by name."""
    require_solo()
    import solo.methods
    from solo.methods.base import BaseMethod

    from attnce_plugin.backbones import BACKBONES
    from attnce_plugin.methods import METHODS

    # In place: main_pretrain.py:39 and main_knn.py:37 imported this dict object
    # (solo/methods/__init__.py:43); BaseMethod.__init__ checks names in _BACKBONES (base.py:186).
    for registry, ours in ((solo.methods.METHODS, METHODS), (BaseMethod._BACKBONES, BACKBONES)):
        for name, value in ours.items():
            old = registry.get(name, value)
            # Ours from an earlier import of the plugin may be replaced; anyone else's may not.
            if old is not value and not getattr(old, "__module__", "").startswith("attnce_plugin"):
                raise RuntimeError(f"{name!r} is already registered as {old!r}; not overwriting it")
            registry[name] = value
    return dict(METHODS)


def wrap_parse_cfg(parse_cfg: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``solo.args.pretrain.parse_cfg``, with the plugin's methods' crop roles set; idempotent."""
    if getattr(parse_cfg, "__attnce_wrapped__", False):
        return parse_cfg

    def attnce_parse_cfg(cfg: Any) -> Any:
        from attnce_plugin.methods import METHODS

        if cfg.get("method") not in METHODS:
            return parse_cfg(cfg)
        # The shipped configs interpolate from views.*: plain values in args.json and the loggers.
        OmegaConf.resolve(cfg)
        positives = num_positives(cfg.get("augmentations"))
        cfg = parse_cfg(cfg)
        # After solo/args/pretrain.py:138-146 counted the crops at the first crop's size as large.
        cfg.data.num_large_crops, cfg.data.num_small_crops = 2, positives
        return cfg

    attnce_parse_cfg.__attnce_wrapped__ = True  # type: ignore[attr-defined]
    attnce_parse_cfg.__wrapped__ = parse_cfg  # type: ignore[attr-defined]
    return attnce_parse_cfg


class SoloLearnCallback(HydraCallback):
    """The Hydra callback the shipped configs declare (``hydra.callbacks.attnce``). Hydra builds it
    before the task function runs, in every process (DDP children re-run the command line)."""

    def __init__(self, **_: Any) -> None:
        register()  # an error here aborts the run, unlike one in an on_* hook

    def on_job_start(self, config: Any, *, task_function: Any = None, **_: Any) -> None:
        import solo.args.pretrain

        # main_pretrain.py:30,65,71: the global parse_cfg, then num_large_crops != 2 refused.
        # Hydra < 1.3 passes no task function: the script is __main__.
        namespace = getattr(task_function, "__globals__", None) or vars(sys.modules["__main__"])
        found = namespace.get("parse_cfg")
        if found is solo.args.pretrain.parse_cfg:
            namespace["parse_cfg"] = wrap_parse_cfg(found)
