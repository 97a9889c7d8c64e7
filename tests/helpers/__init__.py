"""Helpers shared by the tests (plain functions; the fixtures built on them are in conftest.py).

``tests/`` is on pytest's ``pythonpath`` (pyproject.toml), so tests import them as ``helpers.*``.
"""
