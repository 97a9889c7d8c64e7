"""Plain helpers shared by the tests, imported as ``helpers.*`` (tests/ is on the pythonpath)."""
