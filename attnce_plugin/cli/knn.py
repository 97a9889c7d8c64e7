"""``python -m attnce_plugin.cli.knn ARGS``: solo-learn's ``main_knn.py`` with our methods registered.

Takes exactly ``main_knn.py``'s arguments. Like that script it needs a CUDA GPU. Before anything is
loaded or extracted, the wrapper

* gives ``--k``, ``--temperature``, ``--feature_type`` and ``--distance_function`` solo-learn's own
  values (:data:`SOLO_KNN_DEFAULTS`) when they are not given: solo-learn's parser leaves them at
  None and ``main_knn.py`` iterates over them only after extracting every feature (``TypeError:
  'NoneType' object is not iterable``);
* refuses values ``main_knn.py`` would only reject after the extraction (an unknown feature type
  or distance function, k < 1, a temperature <= 0) and a checkpoint folder without ``args.json``
  or a ``.ckpt``;
* refuses a torchmetrics that breaks solo-learn's kNN (>= 1.0), naming the fix;
* loads the checkpoint onto the GPU when there is one (:func:`attnce_plugin.cli.run_solo_script`),
  since ``main_knn.py`` sends ``.cuda()`` batches to the model and would otherwise meet a
  CPU-trained checkpoint on the CPU.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from attnce_plugin.cli import run_solo_script

#: solo-learn's values for the options its parser leaves at None: its own
#: ``scripts/knn/imagenet-100/knn.sh`` (commit 9187ea3). 2 feature types x 8 k x (1 euclidean +
#: 8 cosine temperatures) = 144 kNN evaluations on one feature extraction.
SOLO_KNN_DEFAULTS: Dict[str, Tuple[str, ...]] = {
    "k": ("1", "2", "5", "10", "20", "50", "100", "200"),
    "temperature": ("0.01", "0.02", "0.05", "0.07", "0.1", "0.2", "0.5", "1"),
    "feature_type": ("backbone", "projector"),
    "distance_function": ("euclidean", "cosine"),
}
#: The keys of ``main_knn.py``'s feature dicts.
FEATURE_TYPES = ("backbone", "projector")
#: What ``solo.utils.knn.WeightedKNNClassifier.compute`` implements.
DISTANCE_FUNCTIONS = ("cosine", "euclidean")


class KnnArgumentError(ValueError):
    """A ``main_knn.py`` argument that would fail only after the feature extraction."""


def parse_knn_argv(argv: Sequence[str]) -> argparse.Namespace:
    """``argv`` parsed by solo-learn's own ``parse_args_knn`` (which reads ``sys.argv``), so that
    abbreviations and ``--opt=value`` forms are read exactly as ``main_knn.py`` reads them.

    Raises:
        SystemExit: argparse's usage error (or ``--help``), as ``main_knn.py`` would exit.
    """
    from solo.args.knn import parse_args_knn

    saved = sys.argv
    sys.argv = ["main_knn.py", *argv]
    try:
        return parse_args_knn()
    finally:
        sys.argv = saved


def missing_knn_options(argv: Sequence[str]) -> List[str]:
    """The keys of :data:`SOLO_KNN_DEFAULTS` that ``argv`` does not set, in that order."""
    args = parse_knn_argv(argv)
    return [key for key in SOLO_KNN_DEFAULTS if getattr(args, key) is None]


def _check_knn_args(args: argparse.Namespace) -> None:
    """Refuse what ``main_knn.py`` would only reject after extracting every feature.

    Raises:
        KnnArgumentError: naming the option and its allowed values.
    """
    ckpt_dir = args.pretrained_checkpoint_dir
    if not ckpt_dir:
        raise KnnArgumentError(
            "--pretrained_checkpoint_dir is required: the folder of a pretraining run, holding "
            "its .ckpt and args.json (e.g. trained_models/attentionnce/<run id>)"
        )
    folder = Path(ckpt_dir)
    if not (folder / "args.json").is_file() or not list(folder.glob("*.ckpt")):
        raise KnnArgumentError(
            f"--pretrained_checkpoint_dir {ckpt_dir}: must be a folder holding a .ckpt and its "
            "args.json (solo-learn writes both into checkpoint.dir/<method>/<run id>/)"
        )
    for key, allowed in (
        ("feature_type", FEATURE_TYPES),
        ("distance_function", DISTANCE_FUNCTIONS),
    ):
        bad = [v for v in getattr(args, key) if v not in allowed]
        if bad:
            raise KnnArgumentError(
                f"--{key} {' '.join(bad)}: allowed values are {', '.join(allowed)}"
            )
    bad_k = [k for k in args.k if k < 1]
    if bad_k:
        raise KnnArgumentError(f"--k {' '.join(map(str, bad_k))}: must be integers >= 1")
    bad_t = [t for t in args.temperature if not (math.isfinite(t) and t > 0)]
    if bad_t:
        raise KnnArgumentError(
            f"--temperature {' '.join(map(str, bad_t))}: must be finite numbers > 0"
        )


def complete_knn_argv(argv: Sequence[str]) -> List[str]:
    """``argv`` with solo-learn's defaults appended for the kNN options it does not set, checked.

    Args:
        argv: ``main_knn.py``'s arguments as the user gave them.

    Returns:
        The arguments to run ``main_knn.py`` with: ``argv`` followed by
        ``--<key> <solo-learn's values>`` for each missing key of :data:`SOLO_KNN_DEFAULTS`.

    Raises:
        KnnArgumentError: a value ``main_knn.py`` would reject only after the feature extraction.
        SystemExit: argparse's usage error (e.g. no ``--dataset``).
    """
    out = list(argv)
    for key in missing_knn_options(argv):
        out += [f"--{key}", *SOLO_KNN_DEFAULTS[key]]
    _check_knn_args(parse_knn_argv(out))
    return out


def main(argv: Optional[Sequence[str]] = None) -> None:
    """Check and complete the arguments, check torchmetrics, then run the checkout's
    ``main_knn.py``.

    Args:
        argv: ``main_knn.py``'s arguments (default: this process's ``sys.argv[1:]``).

    Raises:
        SystemExit: a refused argument or torchmetrics, with the message (exit status 1).
    """
    from attnce_plugin.solo_compat import IncompatibleTorchmetricsError, require_knn_torchmetrics

    given = list(sys.argv[1:] if argv is None else argv)
    try:
        missing = missing_knn_options(given)
        completed = complete_knn_argv(given)
        require_knn_torchmetrics("attnce-knn (solo-learn's main_knn.py)")
    except (KnnArgumentError, IncompatibleTorchmetricsError) as err:
        raise SystemExit(f"attnce-knn: error: {err}") from err
    if missing:
        shown = " ".join(f"--{k} {' '.join(SOLO_KNN_DEFAULTS[k])}" for k in missing)
        print(f"attnce-knn: not given, using solo-learn's values: {shown}", file=sys.stderr)
    run_solo_script("main_knn.py", completed)


if __name__ == "__main__":
    main()
