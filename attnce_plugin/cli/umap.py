"""``python -m attnce_plugin.cli.umap ARGS``: solo-learn's ``main_umap.py`` with our methods registered.

Takes exactly ``main_umap.py``'s arguments. Like that script it needs a CUDA GPU and ``umap-learn``.
"""

from attnce_plugin.cli import run_solo_script


def main() -> None:
    """Run the checkout's ``main_umap.py`` on this process's arguments."""
    run_solo_script("main_umap.py")


if __name__ == "__main__":
    main()
