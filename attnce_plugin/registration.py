"""When the plugin's patches of solo-learn are applied (what they are: :mod:`attnce_plugin.patches`).

* :func:`register`, public as :func:`attnce_plugin.register`: the methods into
  ``solo.methods.METHODS`` and the plugin's backbones into ``BaseMethod._BACKBONES``. The CLI
  wrappers (``attnce-knn``, ``attnce-umap``) call it.
* :class:`SoloLearnCallback`, the Hydra callback that the shipped method configs declare under
  ``hydra.callbacks``: Hydra builds it before calling ``main_pretrain.py``'s task function, in every
  process (Lightning's DDP children re-run the same command line); it registers the methods and
  wraps the ``parse_cfg`` global of the script it runs.

Refusals (bad crop layouts, bad method settings) happen inside the wrapped ``parse_cfg`` and the
methods' ``add_and_assert_specific_cfg``, which run inside the task function: exceptions raised in
Hydra callback ``on_*`` hooks are only logged, they would not stop a run.
"""

from __future__ import annotations

import sys
from typing import Any, Dict

from hydra.experimental.callback import Callback as _HydraCallback
from omegaconf import DictConfig

from attnce_plugin.patches import add_backbones, add_methods, patch_pretrain_parse_cfg
from attnce_plugin.solo_compat import require_solo


def register() -> Dict[str, type]:
    """Add the plugin's methods to ``solo.methods.METHODS`` and its backbones to
    ``BaseMethod._BACKBONES``, in place; idempotent.

    Returns:
        The name -> class mapping that was registered.

    Raises:
        SoloLearnMissingError: solo-learn >= 1.0.6 is not installed.
        RuntimeError: solo-learn already has a different method under one of our names.
    """
    require_solo()
    import solo.methods
    from solo.methods.base import BaseMethod

    from attnce_plugin.backbones import BACKBONES
    from attnce_plugin.methods import METHODS as OURS

    add_methods(solo.methods.METHODS, OURS)
    add_backbones(BaseMethod._BACKBONES, BACKBONES)
    return dict(OURS)


class SoloLearnCallback(_HydraCallback):
    """Hydra callback that plugs the AttentionNCE methods into solo-learn's ``main_pretrain.py``
    (and the plugin's backbones into ``main_linear.py``).

    Declared by the shipped method configs (``attnce_plugin/configs/method/*.yaml``)::

        hydra:
          callbacks:
            attnce:
              _target_: attnce_plugin.registration.SoloLearnCallback

    The constructor registers the methods (an error there, solo-learn missing, aborts the run,
    which is what we want); at the start of the job the task function's ``parse_cfg`` global is
    wrapped (:func:`attnce_plugin.patches.patch_pretrain_parse_cfg`).
    """

    def __init__(self, **_: Any) -> None:
        register()

    def on_job_start(self, config: DictConfig, *, task_function: Any = None, **kwargs: Any) -> None:
        # Hydra >= 1.3 passes the task function; older ones run it from the script, __main__.
        # Only main_pretrain.py's parse_cfg is wrapped (main_linear.py's is left alone).
        namespace = getattr(task_function, "__globals__", None)
        if namespace is None:
            namespace = vars(sys.modules["__main__"])
        patch_pretrain_parse_cfg(namespace)
