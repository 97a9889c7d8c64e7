"""The settings tables of docs/solo-learn-usage.md and of the methods' docstrings are the ones
generated from attnce_plugin/methods/settings.py (one declaration, no copy to drift)."""

from __future__ import annotations

from attnce_plugin.solo_compat import require_solo

require_solo()

from helpers.scripts import REPO_ROOT  # noqa: E402

from attnce_plugin.methods import AttentionNCE, MoCoV3AttentionNCE  # noqa: E402
from attnce_plugin.methods.settings import settings_table  # noqa: E402

DOC = REPO_ROOT / "docs" / "solo-learn-usage.md"


def test_usage_doc_shows_the_declared_settings() -> None:
    text = DOC.read_text()
    for cls in (AttentionNCE, MoCoV3AttentionNCE):
        assert settings_table(cls.SETTINGS) in text, f"docs table of {cls.METHOD_NAME} is stale"


def test_docstrings_show_the_declared_settings() -> None:
    for cls in (AttentionNCE, MoCoV3AttentionNCE):
        for setting in cls.SETTINGS:
            assert f"| `{setting.name}` |" in cls.__doc__
