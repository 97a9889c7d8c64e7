"""Thin wrappers that run solo-learn's argparse scripts with the AttentionNCE methods registered.

``main_knn.py`` and ``main_umap.py`` look the checkpoint's method up in ``solo.methods.METHODS``
(from its ``args.json``) and have no Hydra config through which the plugin could register itself,
so these wrappers register first and then run the checkout's own script unchanged::

    python -m attnce_plugin.cli.knn  --pretrained_checkpoint_dir trained_models/attentionnce/<id> ...
    python -m attnce_plugin.cli.umap --pretrained_checkpoint_dir trained_models/attentionnce/<id> ...

``main_pretrain.py`` and ``main_linear.py`` need no wrapper: the plugin's YAML configs declare the
Hydra callback that registers.
"""

from __future__ import annotations

import contextlib
import runpy
import sys
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence


def checkpoint_map_location() -> str:
    """Where the wrappers load checkpoints: ``"cuda"`` (the current GPU) when CUDA is available,
    else ``"cpu"``.

    ``main_knn.py`` and ``main_umap.py`` call ``load_from_checkpoint`` without a map location,
    which leaves the model on the device the checkpoint was saved from, and then send ``.cuda()``
    batches to it: a CPU-trained checkpoint would meet CUDA images. On a machine without CUDA,
    ``"cpu"`` lets a GPU-trained checkpoint load (the scripts then stop at their own ``.cuda()``,
    saying that CUDA is missing).
    """
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


@contextlib.contextmanager
def checkpoints_loaded_to(location: Any) -> Iterator[None]:
    """Within the block, the plugin's methods' ``load_from_checkpoint`` calls that pass no
    ``map_location`` use ``location`` (anything ``torch.load`` takes); outside it, Lightning's.

    Only the plugin's own classes are touched, only in the wrapper's process, for the script's run.
    """
    from attnce_plugin.methods import METHODS

    saved = {cls: cls.__dict__.get("load_from_checkpoint") for cls in METHODS.values()}
    for cls in METHODS.values():
        load = cls.load_from_checkpoint  # Lightning's, bound to cls

        def load_to(path: Any, map_location: Any = None, *args: Any, _load: Any = load, **kw: Any):
            return _load(path, location if map_location is None else map_location, *args, **kw)

        cls.load_from_checkpoint = staticmethod(load_to)  # type: ignore[method-assign]
    try:
        yield
    finally:
        for cls, own in saved.items():
            if own is None:
                del cls.load_from_checkpoint  # the inherited (Lightning's) classmethod again
            else:
                cls.load_from_checkpoint = own


def run_solo_script(script: str, argv: Optional[Sequence[str]] = None) -> None:
    """Register the plugin's methods, then run ``<solo checkout>/<script>`` as ``__main__``, with
    the methods' checkpoints loaded to :func:`checkpoint_map_location`.

    Args:
        script: file name inside the solo-learn checkout, e.g. ``"main_knn.py"``.
        argv: the script's arguments (default: this process's ``sys.argv[1:]``).

    Raises:
        SoloLearnMissingError: solo-learn or its checkout is missing.
        FileNotFoundError: the checkout has no such script.
    """
    from attnce_plugin.registration import register
    from attnce_plugin.solo_compat import solo_checkout_dir

    register()
    path = Path(solo_checkout_dir()) / script
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist; is SOLO_LEARN_DIR a solo-learn checkout?")
    args = list(sys.argv[1:] if argv is None else argv)
    # The script parses sys.argv itself; make it look as if it had been started directly.
    sys.argv = [str(path), *args]
    with checkpoints_loaded_to(checkpoint_map_location()):
        runpy.run_path(str(path), run_name="__main__")
