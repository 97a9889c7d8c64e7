"""``attnce-configs [SUBFOLDER]``: print the folder of the shipped Hydra configs.

For solo-learn's ``--config-path``, wherever the package is installed (a wheel puts the configs in
site-packages)::

    python main_pretrain.py --config-path "$(attnce-configs pretrain/cifar)" \\
        --config-name attentionnce.yaml

``--list`` prints every shipped primary config instead.
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from attnce_plugin.configs import config_dir


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Print the config folder (or a subfolder of it, or the list of primary configs)."""
    parser = argparse.ArgumentParser(prog="attnce-configs", description=__doc__.split("\n\n")[0])
    parser.add_argument("subfolder", nargs="?", default="", help="e.g. pretrain/cifar")
    parser.add_argument("--list", action="store_true", help="list the primary configs")
    args = parser.parse_args(argv)
    root = config_dir()
    if args.list:
        for kind in ("pretrain", "linear"):
            for path in sorted((root / kind).glob("*/*.yaml")):
                print(path.relative_to(root))
        return 0
    folder = root / args.subfolder
    if not folder.is_dir():
        print(f"attnce-configs: no folder {args.subfolder!r} in {root}", file=sys.stderr)
        return 2
    print(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
