"""Locating solo-learn and checking that it, and the torchmetrics under it, can run.

solo-learn >= 1.0.6 exists only as source on GitHub (PyPI's ``solo-learn`` is the 2021 release
1.0.2), so it cannot be a pip requirement of this package. Everything that needs it calls
:func:`require_solo` first, which stops with instructions instead of an ``ImportError`` deep inside
a training run. Likewise everything that runs solo-learn's kNN (``knn_eval.enabled=True``,
``attnce-knn``) calls :func:`require_knn_torchmetrics` first.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Optional, Tuple

#: Oldest solo-learn release the plugin is written against.
MIN_SOLO_VERSION: Tuple[int, ...] = (1, 0, 6)
#: Upstream commit that scripts/setup_env.sh installs and that CI was run against.
SOLO_REPO_URL = "https://github.com/vturrisi/solo-learn"
SOLO_PINNED_COMMIT = "9187ea3"

INSTALL_HINT = (
    "attnce-plugin needs solo-learn >= 1.0.6, which is published only as source on GitHub "
    "(PyPI's 'solo-learn' is the unusable 2021 release 1.0.2). Install it from a checkout:\n"
    f"    git clone {SOLO_REPO_URL} solo-learn && git -C solo-learn checkout {SOLO_PINNED_COMMIT}\n"
    "    pip install 'setuptools<82' 'torchmetrics==0.11.4'\n"
    "    pip install --no-build-isolation --use-pep517 -e ./solo-learn 'torchmetrics==0.11.4'\n"
    "or run scripts/setup_env.sh from the attnce-plugin checkout, which does exactly this."
)


class SoloLearnMissingError(ImportError):
    """solo-learn is not installed, or is older than :data:`MIN_SOLO_VERSION`."""


def _parse_version(text: str) -> Tuple[int, ...]:
    parts = []
    for piece in text.split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def installed_solo_version() -> Optional[Tuple[int, ...]]:
    """The installed solo-learn version as a tuple, or ``None`` when it is not installed."""
    if importlib.util.find_spec("solo") is None:
        return None
    try:
        from importlib.metadata import PackageNotFoundError, version

        return _parse_version(version("solo-learn"))
    except PackageNotFoundError:
        # A checkout on PYTHONPATH without pip metadata: 1.0.2 has no solo.methods.mocov3.
        has_mocov3 = importlib.util.find_spec("solo.methods.mocov3") is not None
        return MIN_SOLO_VERSION if has_mocov3 else (1, 0, 2)


def solo_available() -> bool:
    """Whether a compatible solo-learn (>= 1.0.6) can be imported."""
    found = installed_solo_version()
    return found is not None and found >= MIN_SOLO_VERSION


def require_solo() -> None:
    """Raise :class:`SoloLearnMissingError` with install instructions unless solo-learn >= 1.0.6
    is importable."""
    found = installed_solo_version()
    if found is None:
        raise SoloLearnMissingError("solo-learn is not installed.\n" + INSTALL_HINT)
    if found < MIN_SOLO_VERSION:
        shown = ".".join(map(str, found))
        raise SoloLearnMissingError(f"solo-learn {shown} is installed, too old.\n" + INSTALL_HINT)


def solo_checkout_dir() -> Path:
    """The solo-learn checkout that holds ``main_pretrain.py`` and friends.

    ``$SOLO_LEARN_DIR`` wins; otherwise the parent of the installed ``solo`` package, which is the
    checkout for an editable install.

    Raises:
        SoloLearnMissingError: solo-learn is missing, or no checkout with ``main_pretrain.py`` is found.
    """
    require_solo()
    env = os.environ.get("SOLO_LEARN_DIR")
    candidates = [Path(env)] if env else []
    spec = importlib.util.find_spec("solo")
    if spec is not None and spec.origin is not None:
        candidates.append(Path(spec.origin).resolve().parent.parent)
    for cand in candidates:
        if (cand / "main_pretrain.py").is_file():
            return cand
    raise SoloLearnMissingError(
        "solo-learn is importable but no checkout with main_pretrain.py was found (looked in: "
        + ", ".join(str(c) for c in candidates)
        + "). Install solo-learn editable from its checkout, or set SOLO_LEARN_DIR to it.\n"
        + INSTALL_HINT
    )


#: The torchmetrics that solo-learn's pinned setup installs, named in the fix.
KNN_TORCHMETRICS_FIX = "pip install torchmetrics==0.11.4"
#: First torchmetrics release whose ``Metric`` refuses ``compute_on_step`` (0.11.4 is followed by
#: 1.0.0; checked with solo-learn's WeightedKNNClassifier: 0.6.2, 0.7.3, 0.8.2, 0.9.3, 0.10.3, 0.11.0
#: and 0.11.4 work; 1.0.0, 1.0.3, 1.4.3 and 1.9.0 raise at construction).
KNN_TORCHMETRICS_BREAKS_AT: Tuple[int, ...] = (1, 0)


class IncompatibleTorchmetricsError(ImportError):
    """The installed torchmetrics cannot run solo-learn's kNN classifier."""


def _solo_knn_passes_compute_on_step() -> bool:
    """Whether solo-learn's ``WeightedKNNClassifier`` passes ``compute_on_step`` to torchmetrics
    (it does at the pinned commit, ``solo/utils/knn.py:53``; a later solo-learn may not)."""
    import inspect

    from solo.utils.knn import WeightedKNNClassifier

    try:
        return "compute_on_step" in inspect.getsource(WeightedKNNClassifier.__init__)
    except (OSError, TypeError):
        # No source (a compiled or zipped install): assume the pinned commit's code.
        return True


def knn_torchmetrics_problem() -> Optional[str]:
    """Why solo-learn's kNN cannot run with the installed torchmetrics, or ``None`` if it can.

    solo-learn's ``WeightedKNNClassifier.__init__`` passes ``compute_on_step=False`` to
    ``torchmetrics.Metric``, which torchmetrics 1.0 removed: from 1.0 on, building it raises
    ``ValueError: Unexpected keyword arguments: `compute_on_step```. ``main_knn.py`` builds it only
    after extracting every feature, so the failure would come after the whole extraction.
    """
    require_solo()
    import torchmetrics

    found = str(getattr(torchmetrics, "__version__", "0"))
    if _parse_version(found) < KNN_TORCHMETRICS_BREAKS_AT or not _solo_knn_passes_compute_on_step():
        return None
    return (
        f"torchmetrics {found} is installed, but solo-learn's kNN classifier "
        "(solo.utils.knn.WeightedKNNClassifier) passes compute_on_step, which torchmetrics 1.0 "
        'removed (it would fail with "Unexpected keyword arguments: `compute_on_step`"). '
        f"Fix: {KNN_TORCHMETRICS_FIX} (solo-learn's kNN works with torchmetrics 0.6.2 to 0.11.4)"
    )


def require_knn_torchmetrics(what: str, alternative: str = "") -> None:
    """Raise :class:`IncompatibleTorchmetricsError` unless solo-learn's kNN can run.

    Args:
        what: what needs the kNN, for the message, e.g. ``"knn_eval.enabled=True"``.
        alternative: another way out, appended to the fix, e.g. ``"set knn_eval.enabled=False"``.
    """
    problem = knn_torchmetrics_problem()
    if problem is not None:
        tail = f"; or {alternative}" if alternative else ""
        raise IncompatibleTorchmetricsError(f"{what} runs solo-learn's kNN: {problem}{tail}")
