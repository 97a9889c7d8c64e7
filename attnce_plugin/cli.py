"""Commands: ``attnce-knn`` and ``attnce-umap`` run solo-learn's argparse scripts with the
plugin's methods registered (they look the checkpoint's method up in ``solo.methods.METHODS`` and
have no Hydra config through which the plugin could register); ``attnce-configs`` prints the
shipped configs' folder."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path
from typing import List, Optional, Sequence

#: solo-learn's own scripts/knn/imagenet-100/knn.sh values for the options its parser leaves at
#: None (solo/args/knn.py:19-22), which main_knn.py:161-165 iterates over after extracting every
#: feature: "TypeError: 'NoneType' object is not iterable" at the end of a long run.
KNN_DEFAULTS = {
    "k": ["1", "2", "5", "10", "20", "50", "100", "200"],
    "temperature": ["0.01", "0.02", "0.05", "0.07", "0.1", "0.2", "0.5", "1"],
    "feature_type": ["backbone", "projector"],
    "distance_function": ["euclidean", "cosine"],
}


def run_solo_script(script: str, argv: Sequence[str]) -> None:
    """Register the methods, then run ``<solo-learn checkout>/<script>`` as ``__main__``."""
    from attnce_plugin.seam import register, solo_checkout_dir

    register()
    path = solo_checkout_dir() / script
    sys.argv = [str(path), *argv]
    runpy.run_path(str(path), run_name="__main__")


def complete_knn_argv(argv: Sequence[str]) -> List[str]:
    """``argv`` plus :data:`KNN_DEFAULTS` for the options not given, as solo-learn parses them."""
    from attnce_plugin.seam import require_solo

    require_solo()
    from solo.args.knn import parse_args_knn

    saved, sys.argv = sys.argv, ["main_knn.py", *argv]
    try:
        args = parse_args_knn()
    finally:
        sys.argv = saved
    return list(argv) + [
        x for k, v in KNN_DEFAULTS.items() if getattr(args, k) is None for x in [f"--{k}", *v]
    ]


def knn(argv: Optional[Sequence[str]] = None) -> None:
    """``attnce-knn``: solo-learn's ``main_knn.py`` (needs a CUDA GPU, as that script does)."""
    run_solo_script("main_knn.py", complete_knn_argv(sys.argv[1:] if argv is None else argv))


def umap(argv: Optional[Sequence[str]] = None) -> None:
    """``attnce-umap``: solo-learn's ``main_umap.py`` (needs a CUDA GPU and umap-learn)."""
    run_solo_script("main_umap.py", sys.argv[1:] if argv is None else argv)


def configs(argv: Optional[Sequence[str]] = None) -> int:
    """``attnce-configs [SUBFOLDER]``: the shipped configs' folder, for ``--config-path`` (or use
    ``--config-path pkg://attnce_plugin.configs``)."""
    args = list(sys.argv[1:] if argv is None else argv)
    folder = Path(__file__).parent / "configs" / (args[0] if args else "")
    if not folder.is_dir():
        print(f"attnce-configs: no folder {args[0]!r} in {folder.parent}", file=sys.stderr)
        return 2
    print(folder)
    return 0
