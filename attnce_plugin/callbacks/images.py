"""Name the file when an image of the training or validation set cannot be read.

PIL's errors for a truncated or broken file ("image file is truncated", "broken data stream") do
not say which file, which on a dataset of a million images leaves the user nothing to act on. The
methods return :class:`NameUnreadableImages` from ``configure_callbacks()``: at the start of
training and of validation it makes the torchvision ``ImageFolder`` datasets of the run's own data
loaders re-raise decoding errors with the file's path. Only runs of the plugin's methods are
affected; solo-learn's code is not patched. DALI data is decoded by DALI and not covered.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

from lightning.pytorch.callbacks import Callback


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
    if (
        callable(loader)
        and not isinstance(loader, PathNamingLoader)
        and hasattr(dataset, "samples")
    ):
        dataset.loader = PathNamingLoader(loader)
    return dataset


def _loaders(value: Any) -> Iterable[Any]:
    """The data loaders inside what Lightning holds (a loader, a list, a dict or a combined one)."""
    if value is None:
        return []
    if isinstance(value, dict):
        return [x for v in value.values() for x in _loaders(v)]
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _loaders(v)]
    flattened = getattr(value, "flattened", None)  # Lightning's CombinedLoader
    if isinstance(flattened, list):
        return [x for v in flattened for x in _loaders(v)]
    return [value]


def name_unreadable_images_of(loaders: Any) -> int:
    """Apply :func:`name_unreadable_images` to the dataset of every loader; returns how many."""
    count = 0
    for loader in _loaders(loaders):
        dataset = getattr(loader, "dataset", None)
        if dataset is None:
            continue
        named = getattr(name_unreadable_images(dataset), "loader", None)
        count += isinstance(named, PathNamingLoader)
    return count


class NameUnreadableImages(Callback):
    """Lightning callback: the run's image-folder datasets name unreadable files (see module doc).

    Runs before each epoch's data loader iterator (and so its worker processes) is created.
    """

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        name_unreadable_images_of(trainer.train_dataloader)

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        name_unreadable_images_of(trainer.val_dataloaders)

    def on_sanity_check_start(self, trainer: Any, pl_module: Any) -> None:
        name_unreadable_images_of(trainer.val_dataloaders)
