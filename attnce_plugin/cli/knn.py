"""``python -m attnce_plugin.cli.knn ARGS``: solo-learn's ``main_knn.py`` with our methods registered.

Takes exactly ``main_knn.py``'s arguments. Like that script it needs a CUDA GPU.
"""

from attnce_plugin.cli import run_solo_script


def main() -> None:
    """Run the checkout's ``main_knn.py`` on this process's arguments."""
    run_solo_script("main_knn.py")


if __name__ == "__main__":
    main()
