"""``python run_with_csv_logger.py SCRIPT ARGS...``: run a solo-learn script with a CSV logger.

solo-learn's ``main_pretrain.py`` and ``main_linear.py`` build their ``Trainer`` with
``logger=None`` unless wandb is enabled, and their configs have no logger key. Lightning then picks
TensorBoard when ``tensorboard`` (or ``tensorboardX``) is installed, as on most GPU images, and
writes no ``metrics.csv``; without it, a ``CSVLogger``. The tests that read the logged metrics run
the scripts through this file, which gives every ``Trainer`` built with ``logger=None`` the same
``CSVLogger`` Lightning would pick without TensorBoard (``<default_root_dir or cwd>/lightning_logs``),
so they see the same files whatever is installed. Test harness only: the plugin changes nothing.
"""

from __future__ import annotations

import functools
import os
import runpy
import sys
from typing import Any


def _use_csv_logger() -> None:
    from lightning.pytorch import Trainer
    from lightning.pytorch.loggers import CSVLogger

    original = Trainer.__init__

    @functools.wraps(original)
    def init(self: Trainer, *args: Any, **kwargs: Any) -> None:
        # Only the "let Lightning choose" case; an explicit logger (wandb, False) is kept.
        if kwargs.get("logger", None) is None:
            kwargs["logger"] = CSVLogger(save_dir=kwargs.get("default_root_dir") or os.getcwd())
        original(self, *args, **kwargs)

    Trainer.__init__ = init  # type: ignore[method-assign]


def main() -> None:
    if len(sys.argv) < 2:
        raise SystemExit("usage: run_with_csv_logger.py SCRIPT [ARGS...]")
    _use_csv_logger()
    script = os.path.abspath(sys.argv[1])
    # The script (and Hydra) parse sys.argv: make it look as if the script had been started.
    sys.argv = [script, *sys.argv[2:]]
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
