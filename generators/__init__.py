"""Deprecated: `generators` is now `recall_lab.generators`; this name goes in the next release
(recall_lab/_moved.py)."""

from recall_lab._moved import alias

alias("generators")
