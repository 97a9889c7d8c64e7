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

import importlib.util
import os
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Callable, Dict

from hydra.experimental.callback import Callback as HydraCallback

SOLO_PINNED_COMMIT = "9187ea3"
INSTALL_HINT = (
    "attnce-plugin needs solo-learn >= 1.0.6, published only as source (PyPI's solo-learn is the "
    "2021 release 1.0.2):\n"
    "    git clone https://github.com/vturrisi/solo-learn && git -C solo-learn checkout "
    f"{SOLO_PINNED_COMMIT}\n"
    "    pip install 'setuptools<82' 'torchmetrics==0.11.4'\n"
    "    pip install --no-build-isolation --use-pep517 -e ./solo-learn 'torchmetrics==0.11.4'\n"
    "(scripts/setup_env.sh does exactly this)"
)


class SoloLearnMissingError(ImportError):
    """solo-learn >= 1.0.6 is not importable."""


def require_solo() -> None:
    """Stop with install instructions unless solo-learn >= 1.0.6 is importable."""
    if importlib.util.find_spec("solo") is None:
        raise SoloLearnMissingError("solo-learn is not installed.\n" + INSTALL_HINT)
    try:
        found = tuple(int(x) for x in version("solo-learn").split(".")[:3])
    except (PackageNotFoundError, ValueError):
        # A checkout on PYTHONPATH without metadata: 1.0.2 has no MoCo v3.
        found = (1, 0, 6) if importlib.util.find_spec("solo.methods.mocov3") else (1, 0, 2)
    if found < (1, 0, 6):
        raise SoloLearnMissingError(f"solo-learn {found} is too old.\n" + INSTALL_HINT)


def solo_checkout_dir() -> Path:
    """The checkout with ``main_pretrain.py``: ``$SOLO_LEARN_DIR``, else the parent of the
    installed ``solo`` package (an editable install's checkout)."""
    require_solo()
    spec = importlib.util.find_spec("solo")
    candidates = [Path(os.environ["SOLO_LEARN_DIR"])] if os.environ.get("SOLO_LEARN_DIR") else []
    if spec is not None and spec.origin:
        candidates.append(Path(spec.origin).resolve().parent.parent)
    for path in candidates:
        if (path / "main_pretrain.py").is_file():
            return path
    raise SoloLearnMissingError(
        f"no solo-learn checkout with main_pretrain.py in {[str(c) for c in candidates]}; set "
        "SOLO_LEARN_DIR to it.\n" + INSTALL_HINT
    )


def _add(registry: Dict[str, Any], ours: Dict[str, Any], what: str) -> None:
    for name, value in ours.items():
        old = registry.get(name)
        if old is not None and old is not value:
            if not getattr(old, "__module__", "").startswith("attnce_plugin"):
                raise RuntimeError(f"{what}[{name!r}] is already {old!r}; not overwriting it")
        registry[name] = value


def register() -> Dict[str, type]:
    """Add the plugin's methods and backbones to solo-learn's registries; idempotent.

    Returns:
        The methods registered, by name.
    """
    require_solo()
    import solo.methods
    from solo.methods.base import BaseMethod

    from attnce_plugin.backbones import BACKBONES
    from attnce_plugin.methods import METHODS

    # In place: main_pretrain.py:39 and main_knn.py:37 imported this dict object
    # (solo/methods/__init__.py:43); BaseMethod.__init__ checks names in _BACKBONES (base.py:186).
    _add(solo.methods.METHODS, METHODS, "solo.methods.METHODS")
    _add(BaseMethod._BACKBONES, BACKBONES, "BaseMethod._BACKBONES")
    return dict(METHODS)


def wrap_parse_cfg(parse_cfg: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``solo.args.pretrain.parse_cfg``, with the plugin's methods' crop roles set; idempotent."""
    if getattr(parse_cfg, "__attnce_wrapped__", False):
        return parse_cfg

    def attnce_parse_cfg(cfg: Any) -> Any:
        from attnce_plugin.methods import METHODS

        cls = METHODS.get(cfg.get("method"))
        if cls is None:
            return parse_cfg(cfg)
        # The shipped configs interpolate from views.*: plain values in args.json and the loggers.
        from omegaconf import OmegaConf

        OmegaConf.resolve(cfg)
        num_positives = cls.check_config(cfg)
        cfg = parse_cfg(cfg)
        # After solo/args/pretrain.py:138-146 counted the crops at the first crop's size as large.
        cfg.data.num_large_crops, cfg.data.num_small_crops = 2, num_positives
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
