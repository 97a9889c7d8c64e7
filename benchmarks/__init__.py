"""attnce-plugin's benchmark, run from a clone (``python3 -m benchmarks``), not installed."""
