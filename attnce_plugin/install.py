"""Whether solo-learn >= 1.0.6 is installed, and where its checkout is; imports none of it, so that
every entry point can stop with install instructions instead of "No module named 'solo'"."""

from __future__ import annotations

import importlib.util
import os
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

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
