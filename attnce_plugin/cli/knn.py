"""``python -m attnce_plugin.cli.knn ARGS``: solo-learn's ``main_knn.py`` with our methods registered.

Takes exactly ``main_knn.py``'s arguments and, like that script, needs a CUDA GPU. solo-learn's
parser (``solo/args/knn.py:19-22``) leaves ``--k``, ``--temperature``, ``--feature_type`` and
``--distance_function`` at None, and ``main_knn.py:161-165`` iterates over them only after
extracting every feature (``TypeError: 'NoneType' object is not iterable``); the wrapper fills in
the ones not given from :data:`KNN_DEFAULTS`, refuses a torchmetrics that breaks solo-learn's kNN,
and loads the checkpoint onto the GPU (:func:`attnce_plugin.cli.run_solo_script`). The bug in a
form to report upstream: docs/solo-learn-usage.md.
"""

from __future__ import annotations

import sys
from typing import Dict, List, Optional, Sequence, Tuple

from attnce_plugin.cli import run_solo_script

#: The values of solo-learn's own ``scripts/knn/imagenet-100/knn.sh`` (commit 9187ea3) for the
#: options its parser leaves at None: 2 feature types x 8 k x (1 euclidean + 8 cosine
#: temperatures) = 144 kNN evaluations on one feature extraction.
KNN_DEFAULTS: Dict[str, Tuple[str, ...]] = {
    "k": ("1", "2", "5", "10", "20", "50", "100", "200"),
    "temperature": ("0.01", "0.02", "0.05", "0.07", "0.1", "0.2", "0.5", "1"),
    "feature_type": ("backbone", "projector"),
    "distance_function": ("euclidean", "cosine"),
}


def complete_knn_argv(argv: Sequence[str]) -> List[str]:
    """``argv`` followed by ``--<key> <values>`` of :data:`KNN_DEFAULTS` for each key not given.

    Parsed by solo-learn's own ``parse_args_knn`` (which reads ``sys.argv``), so abbreviations and
    ``--opt=value`` forms count as given exactly as ``main_knn.py`` reads them.

    Raises:
        SystemExit: argparse's usage error (or ``--help``), as ``main_knn.py`` would exit.
    """
    from solo.args.knn import parse_args_knn

    saved, sys.argv = sys.argv, ["main_knn.py", *argv]
    try:
        args = parse_args_knn()
    finally:
        sys.argv = saved
    out = list(argv)
    for key, values in KNN_DEFAULTS.items():
        if getattr(args, key) is None:
            out += [f"--{key}", *values]
    return out


def main(argv: Optional[Sequence[str]] = None) -> None:
    """Complete the arguments, check torchmetrics, then run the checkout's ``main_knn.py``.

    Raises:
        SystemExit: a torchmetrics that breaks solo-learn's kNN, with the fix (exit status 1).
    """
    from attnce_plugin.solo_compat import IncompatibleTorchmetricsError, require_knn_torchmetrics

    given = list(sys.argv[1:] if argv is None else argv)
    completed = complete_knn_argv(given)
    try:
        require_knn_torchmetrics("attnce-knn (solo-learn's main_knn.py)")
    except IncompatibleTorchmetricsError as err:
        raise SystemExit(f"attnce-knn: error: {err}") from err
    if completed != given:
        added = " ".join(completed[len(given) :])
        print(f"attnce-knn: not given, using solo-learn's values: {added}", file=sys.stderr)
    run_solo_script("main_knn.py", completed)


if __name__ == "__main__":
    main()
