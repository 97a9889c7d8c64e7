"""The benchmark harness of attnce-plugin: not installed, run from a clone (``python3 -m benchmarks``).

Every run is one of the plugin's shipped configs plus visible overrides, trained by solo-learn's own
``main_pretrain.py`` (:mod:`benchmarks.runner`); :mod:`benchmarks.runs` is the run table.
"""
