"""attnce-bench: AttentionNCE against solo-learn's SimCLR and MoCo v3, side by side.

Run ``python3 -m attnce_bench --help``. Modules: :mod:`.data` (Fashion-MNIST image
folders), :mod:`.plan` (presets and the list of runs), :mod:`.runner` (config composition and
main_pretrain.py subprocesses), :mod:`.hooks` (Hydra callback used inside those runs),
:mod:`.probe` (offline linear probe), :mod:`.report` (tables and chart).
"""
