"""The test suite: one package per package under test (see conftest.py for how tests run)."""
