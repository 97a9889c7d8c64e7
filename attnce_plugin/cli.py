"""Commands: ``attnce-knn`` and ``attnce-umap`` run solo-learn's argparse scripts with the
plugin's methods registered (they look the checkpoint's method up in ``solo.methods.METHODS`` and
have no Hydra config through which the plugin could register); ``attnce-configs`` prints the
shipped configs' folder. Each answers ``--help``."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import inspect
import runpy
import sys
from pathlib import Path
from typing import Any, Optional, Sequence

from attnce_plugin.configs import config_dir
from attnce_plugin.install import require_solo, solo_checkout_dir

#: solo-learn's own scripts/knn/imagenet-100/knn.sh values for the options its parser leaves at
#: None (solo/args/knn.py:19-22), which main_knn.py:161-165 iterates over after extracting every
#: feature: "TypeError: 'NoneType' object is not iterable" at the end of a long run.
KNN_DEFAULTS = {
    "k": ["1", "2", "5", "10", "20", "50", "100", "200"],
    "temperature": ["0.01", "0.02", "0.05", "0.07", "0.1", "0.2", "0.5", "1"],
    "feature_type": ["backbone", "projector"],
    "distance_function": ["euclidean", "cosine"],
}


def _solo_parse(module: str, argv: Sequence[str], doc: Optional[str]) -> Any:
    """solo-learn's argparse parser ``solo.args.<module>.parse_args_<module>`` (it reads
    ``sys.argv``) on ``argv``; on ``--help``, ``doc`` is printed first and argparse exits after
    listing solo-learn's options."""
    require_solo()
    parse = getattr(importlib.import_module(f"solo.args.{module}"), f"parse_args_{module}")
    if doc and {"-h", "--help"} & set(argv):
        print(inspect.cleandoc(doc) + "\n")
    saved, sys.argv = sys.argv, [Path(sys.argv[0]).name, *argv]
    try:
        return parse()
    finally:
        sys.argv = saved


def run_solo_script(script: str, argv: Sequence[str]) -> None:
    """Register the methods, then run ``<solo-learn checkout>/<script>`` as ``__main__``."""
    from attnce_plugin.seam import register

    register()
    path = solo_checkout_dir() / script
    sys.argv = [str(path), *argv]
    runpy.run_path(str(path), run_name="__main__")


def knn(argv: Optional[Sequence[str]] = None) -> None:
    """attnce-knn: solo-learn's main_knn.py (needs a CUDA GPU) with the plugin's methods
    registered, so that it reads their checkpoints. Of --k, --temperature, --feature_type and
    --distance_function, those not given get solo-learn's scripts/knn/imagenet-100/knn.sh values.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    args = _solo_parse("knn", argv, knn.__doc__)  # absent options as solo-learn parses them
    argv += [x for k, v in KNN_DEFAULTS.items() if getattr(args, k) is None for x in [f"--{k}", *v]]
    run_solo_script("main_knn.py", argv)


#: What solo-learn's main_umap.py imports beyond solo-learn's own requirements (its ``umap`` extra;
#: solo/utils/auto_umap.py:29-35): module -> pip package.
UMAP_PACKAGES = {"pandas": "pandas", "seaborn": "seaborn", "umap": "umap-learn"}


def umap(argv: Optional[Sequence[str]] = None) -> None:
    """attnce-umap: solo-learn's main_umap.py (needs a CUDA GPU, and umap-learn, seaborn and
    pandas: ``pip install 'attnce-plugin[umap]'``) with the plugin's methods registered, so that it
    reads their checkpoints."""
    argv = sys.argv[1:] if argv is None else argv
    _solo_parse("umap", argv, umap.__doc__)  # before main_umap.py imports umap: --help without it
    missing = [pip for mod, pip in UMAP_PACKAGES.items() if importlib.util.find_spec(mod) is None]
    if missing:
        sys.exit(
            f"attnce-umap: solo-learn's main_umap.py needs {', '.join(missing)}, not installed: "
            f"pip install {' '.join(missing)} (or pip install 'attnce-plugin[umap]')"
        )
    run_solo_script("main_umap.py", argv)


def configs(argv: Optional[Sequence[str]] = None) -> int:
    """``attnce-configs [SUBFOLDER]``: the shipped configs' folder, for ``--config-path`` (or use
    ``--config-path pkg://attnce_plugin.configs``)."""
    parser = argparse.ArgumentParser(
        prog="attnce-configs",
        description="Print the folder of the configs shipped with attnce-plugin, or of SUBFOLDER "
        "in it, for solo-learn's --config-path (pkg://attnce_plugin.configs works too).",
    )
    parser.add_argument("subfolder", nargs="?", default="", help="e.g. pretrain/cifar")
    subfolder = parser.parse_args(sys.argv[1:] if argv is None else argv).subfolder
    if not (config_dir() / subfolder).is_dir():
        parser.error(f"no folder {subfolder!r} in {config_dir()}")  # exits with status 2
    print(config_dir() / subfolder)
    return 0
