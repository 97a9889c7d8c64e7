"""Making solo-learn's own, unmodified scripts train and evaluate the AttentionNCE methods.

Three pieces:

* :func:`register` adds ``attentionnce`` and ``mocov3_attentionnce`` to ``solo.methods.METHODS``
  in place (``main_pretrain.py``, ``main_knn.py`` and ``main_umap.py`` hold that same dict object,
  so rebinding it would not reach them). ``import attnce_plugin`` calls it.
* :func:`install_parse_cfg_hooks` wraps solo-learn's ``parse_cfg`` so that the plugin's methods
  get their crop roles (2 anchors, M positives at any size) before ``main_pretrain.py`` checks
  ``num_large_crops == 2``, and so that ``main_linear.py`` builds the MoCo v3 ViT for
  ``pretrain_method: mocov3_attentionnce``. The scripts imported ``parse_cfg`` by name, so the
  script's own global is replaced as well as the module attribute.
* :func:`install_dataset_hooks` wraps solo-learn's ``prepare_datasets`` functions so that an
  image file that cannot be decoded fails with an error naming the file (PIL's "image file is
  truncated" does not), for every script (pretrain train and validation sets, linear eval).
* :class:`SoloLearnCallback`, the Hydra callback the plugin's YAML configs declare under
  ``hydra.callbacks``. Hydra builds it before calling the script's task function, in every
  process (Lightning's DDP children re-run the same command line), and it does the two above.

Refusals (bad crop layouts, bad method kwargs) happen inside the wrapped ``parse_cfg`` and the
methods' ``add_and_assert_specific_cfg``, which run inside the task function: exceptions raised
in Hydra callback ``on_*`` hooks are only logged, they would not stop a run.
"""

from __future__ import annotations

import functools
import logging
import sys
from typing import Any, Callable, Dict, List, MutableMapping, Optional, Sequence

from omegaconf import DictConfig, OmegaConf

from attnce_plugin.solo_compat import require_solo

try:  # hydra is a dependency, but keep `import attnce_plugin` working on odd installs.
    from hydra.experimental.callback import Callback as _HydraCallback
except ImportError:  # pragma: no cover
    _HydraCallback = object  # type: ignore[misc,assignment]

log = logging.getLogger(__name__)

#: ``main_linear.py`` passes ``pretrain_method`` to solo-learn's backbone factories, which only
#: special-case solo-learn's own names; our MoCo method's backbones are built as ``mocov3``'s.
LINEAR_PRETRAIN_METHOD_ALIASES: Dict[str, str] = {"mocov3_attentionnce": "mocov3"}

# Marks a wrapper so that installing twice (callback hooks, DDP re-runs, tests) never nests.
_ORIGINAL_ATTR = "__attnce_original__"


def register() -> Dict[str, type]:
    """Add the plugin's methods to ``solo.methods.METHODS`` in place; idempotent.

    Returns:
        The name -> class mapping that was registered.

    Raises:
        SoloLearnMissingError: solo-learn >= 1.0.6 is not installed.
        RuntimeError: solo-learn already has a different method under one of our names.
    """
    require_solo()
    import solo.methods

    from attnce_plugin.methods import METHODS as OURS

    registry = solo.methods.METHODS
    for name, cls in OURS.items():
        existing = registry.get(name)
        if existing is not None and existing is not cls:
            # A re-imported copy of our own class is fine to replace; solo's or a third party's is not.
            if not getattr(existing, "__module__", "").startswith("attnce_plugin."):
                raise RuntimeError(
                    f"solo.methods.METHODS['{name}'] is already {existing.__module__}."
                    f"{existing.__qualname__}; attnce_plugin will not overwrite it"
                )
        registry[name] = cls
    return dict(OURS)


def _uses_mocov3_loss(cfg: DictConfig) -> bool:
    return cfg.get("method") == "mocov3_attentionnce" and (
        OmegaConf.select(cfg, "method_kwargs.loss", default="attentionnce") == "mocov3"
    )


def wrap_pretrain_parse_cfg(parse_cfg: Callable[[DictConfig], DictConfig]) -> Callable:
    """Wrap ``solo.args.pretrain.parse_cfg`` to set the crop roles of the plugin's methods.

    For ``method: attentionnce`` / ``mocov3_attentionnce`` the layout is checked before solo-learn's
    parsing (so a bad one stops the run with a message saying what to change) and afterwards
    ``data.num_large_crops = 2`` and ``data.num_small_crops = M``; other methods pass through
    untouched.
    """
    if getattr(parse_cfg, _ORIGINAL_ATTR, None) is not None:
        return parse_cfg

    @functools.wraps(parse_cfg)
    def attnce_parse_cfg(cfg: DictConfig) -> DictConfig:
        from attnce_plugin.methods import METHODS as OURS
        from attnce_plugin.methods.common import apply_crop_layout
        from attnce_plugin.methods.crops import resolve_crop_layout

        if cfg.get("method") not in OURS:
            return parse_cfg(cfg)
        require_positives = not _uses_mocov3_loss(cfg)
        resolve_crop_layout(cfg.get("augmentations"), require_positives=require_positives)
        cfg = parse_cfg(cfg)
        apply_crop_layout(cfg, require_positives=require_positives)
        return cfg

    setattr(attnce_parse_cfg, _ORIGINAL_ATTR, parse_cfg)
    return attnce_parse_cfg


def wrap_linear_parse_cfg(parse_cfg: Callable[[DictConfig], DictConfig]) -> Callable:
    """Wrap ``solo.args.linear.parse_cfg`` to map our method names to solo-learn's backbone
    variants (see :data:`LINEAR_PRETRAIN_METHOD_ALIASES`)."""
    if getattr(parse_cfg, _ORIGINAL_ATTR, None) is not None:
        return parse_cfg

    @functools.wraps(parse_cfg)
    def attnce_parse_cfg(cfg: DictConfig) -> DictConfig:
        cfg = parse_cfg(cfg)
        method = cfg.get("pretrain_method")
        if method in LINEAR_PRETRAIN_METHOD_ALIASES:
            cfg.pretrain_method = LINEAR_PRETRAIN_METHOD_ALIASES[method]
        return cfg

    setattr(attnce_parse_cfg, _ORIGINAL_ATTR, parse_cfg)
    return attnce_parse_cfg


def _original(fn: Callable) -> Callable:
    return getattr(fn, _ORIGINAL_ATTR, fn)


def _repoint_script_global(
    name: str,
    wrappers: Sequence[Callable],
    namespace: Optional[MutableMapping[str, Any]] = None,
) -> None:
    """Point a script's global ``name`` at the wrapper of the function it imported by name.

    solo-learn's scripts do ``from solo.<module> import <name>``, so patching the module attribute
    does not reach them; their own global (in ``namespace`` and in ``__main__``) is replaced when it
    is the original that one of ``wrappers`` wraps. Already-wrapped globals are left alone.
    """
    namespaces: List[MutableMapping[str, Any]] = [] if namespace is None else [namespace]
    main = sys.modules.get("__main__")
    if main is not None:
        namespaces.append(vars(main))
    by_original = {id(_original(w)): w for w in wrappers}
    for ns in namespaces:
        found = ns.get(name)
        if found is None or getattr(found, _ORIGINAL_ATTR, None) is not None:
            continue
        if id(found) in by_original:
            ns[name] = by_original[id(found)]


def install_parse_cfg_hooks(namespace: Optional[MutableMapping[str, Any]] = None) -> None:
    """Wrap solo-learn's ``parse_cfg`` functions where the scripts will look them up; idempotent.

    Patches ``solo.args.pretrain.parse_cfg`` and ``solo.args.linear.parse_cfg``, and the global
    ``parse_cfg`` of ``namespace`` (default: the ``__main__`` module, i.e. ``main_pretrain.py`` or
    ``main_linear.py``, which did ``from solo.args.<x> import parse_cfg``).

    Raises:
        SoloLearnMissingError: solo-learn >= 1.0.6 is not installed.
    """
    require_solo()
    import solo.args.linear as linear_args
    import solo.args.pretrain as pretrain_args

    pretrain_args.parse_cfg = wrap_pretrain_parse_cfg(pretrain_args.parse_cfg)
    linear_args.parse_cfg = wrap_linear_parse_cfg(linear_args.parse_cfg)
    _repoint_script_global("parse_cfg", (pretrain_args.parse_cfg, linear_args.parse_cfg), namespace)


class UnreadableImageError(OSError):
    """An image file of the data folder could not be read or decoded; the message names it."""


class PathNamingLoader:
    """An image loader that re-raises any failure with the file's path in the message.

    torchvision's ``ImageFolder`` calls ``self.loader(path)``; PIL's errors for a truncated or
    broken file ("image file is truncated", "broken data stream") do not say which file, which on a
    dataset of a million images leaves the user nothing to act on. A class, not a closure, so that
    the dataset still pickles for DataLoader workers started with ``spawn``.

    Args:
        loader: the dataset's original ``loader`` (path -> image).
    """

    def __init__(self, loader: Callable[[str], Any]) -> None:
        self.loader = loader

    def __call__(self, path: str) -> Any:
        try:
            return self.loader(path)
        except Exception as err:  # any decoder error: re-raised with the path, never swallowed
            raise UnreadableImageError(
                f"cannot read image file '{path}': {type(err).__name__}: {err}. Remove or replace "
                "the file (or re-extract the dataset) and run again"
            ) from err


def name_unreadable_images(dataset: Any) -> Any:
    """Make ``dataset`` (a torchvision ``DatasetFolder``/``ImageFolder``, possibly wrapped by
    solo-learn's ``dataset_with_index``) name the file in its loading errors; idempotent.

    Datasets without a ``loader`` attribute (solo-learn's h5 format, torchvision's CIFAR/STL
    arrays) are returned unchanged.
    """
    loader = getattr(dataset, "loader", None)
    if callable(loader) and not isinstance(loader, PathNamingLoader) and hasattr(dataset, "samples"):
        dataset.loader = PathNamingLoader(loader)
    return dataset


def _wrap_prepare_datasets(prepare: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a solo-learn ``prepare_datasets`` (one dataset or a tuple of them) with
    :func:`name_unreadable_images`."""
    if getattr(prepare, _ORIGINAL_ATTR, None) is not None:
        return prepare

    @functools.wraps(prepare)
    def attnce_prepare_datasets(*args: Any, **kwargs: Any) -> Any:
        out = prepare(*args, **kwargs)
        if isinstance(out, tuple):
            return tuple(name_unreadable_images(d) for d in out)
        return name_unreadable_images(out)

    setattr(attnce_prepare_datasets, _ORIGINAL_ATTR, prepare)
    return attnce_prepare_datasets


def install_dataset_hooks(namespace: Optional[MutableMapping[str, Any]] = None) -> None:
    """Wrap solo-learn's ``prepare_datasets`` functions so unreadable images are named; idempotent.

    Patches ``solo.data.pretrain_dataloader.prepare_datasets`` (the pretraining set; also the
    ``prepare_datasets`` global that ``main_pretrain.py`` imported by name, in ``namespace`` and
    ``__main__``) and ``solo.data.classification_dataloader.prepare_datasets`` (looked up at call
    time by its ``prepare_data``: validation sets of ``main_pretrain.py`` and ``main_linear.py``).
    Applies to every method, not only the plugin's: the wrapper only changes error messages.
    DALI data (``data.format=dali``) is decoded by DALI and not covered.

    Raises:
        SoloLearnMissingError: solo-learn >= 1.0.6 is not installed.
    """
    require_solo()
    import solo.data.classification_dataloader as cls_data
    import solo.data.pretrain_dataloader as pre_data

    pre_data.prepare_datasets = _wrap_prepare_datasets(pre_data.prepare_datasets)
    cls_data.prepare_datasets = _wrap_prepare_datasets(cls_data.prepare_datasets)
    wrappers = (pre_data.prepare_datasets, cls_data.prepare_datasets)
    _repoint_script_global("prepare_datasets", wrappers, namespace)


class SoloLearnCallback(_HydraCallback):
    """Hydra callback that plugs AttentionNCE into solo-learn's scripts.

    Declared by the plugin's configs::

        hydra:
          callbacks:
            attnce:
              _target_: attnce_plugin.registration.SoloLearnCallback

    The constructor registers the methods and installs the ``parse_cfg`` and dataset hooks; an
    error there (solo-learn missing) aborts the run, which is what we want. The hooks are
    re-installed at the start of each job, on the task function's own globals, for launchers that
    run jobs elsewhere.
    """

    def __init__(self, **_: Any) -> None:
        register()
        install_parse_cfg_hooks()
        install_dataset_hooks()

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        install_parse_cfg_hooks()
        install_dataset_hooks()

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        install_parse_cfg_hooks()
        install_dataset_hooks()

    def on_job_start(self, config: DictConfig, *, task_function: Any = None, **kwargs: Any) -> None:
        register()
        namespace = getattr(task_function, "__globals__", None)
        install_parse_cfg_hooks(namespace)
        install_dataset_hooks(namespace)
