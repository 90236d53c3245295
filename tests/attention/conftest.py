"""Attention tests also run over the test-only pattern (tests/registry_extras.py)."""

from tests.registry_extras import register

register()
