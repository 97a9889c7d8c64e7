"""attnce_plugin/solo_compat.py: a torchmetrics that breaks solo-learn's kNN (>= 1.0) is named with
the fix; the ones that work pass. Needs solo-learn >= 1.0.6; FAILS (not skips) without it.
"""

from __future__ import annotations

import pytest

from attnce_plugin.solo_compat import require_solo

require_solo()


import attnce_plugin.solo_compat as solo_compat  # noqa: E402


@pytest.mark.parametrize("version", ["1.0.0", "1.9.0", "2.0.0rc1"])
def test_torchmetrics_that_breaks_solo_knn_is_named(version, monkeypatch):
    import torchmetrics

    monkeypatch.setattr(torchmetrics, "__version__", version)
    problem = solo_compat.knn_torchmetrics_problem()
    assert problem is not None and f"torchmetrics {version} is installed" in problem
    assert "pip install torchmetrics==0.11.4" in problem and "compute_on_step" in problem
    # A solo-learn that no longer passes compute_on_step would run: nothing to refuse.
    monkeypatch.setattr(solo_compat, "_solo_knn_passes_compute_on_step", lambda: False)
    assert solo_compat.knn_torchmetrics_problem() is None


@pytest.mark.parametrize("version", ["0.6.2", "0.10.3", "0.11.4"])
def test_torchmetrics_that_works_passes(version, monkeypatch):
    import torchmetrics

    monkeypatch.setattr(torchmetrics, "__version__", version)
    assert solo_compat.knn_torchmetrics_problem() is None
