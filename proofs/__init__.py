"""The papers' theorems as executable checks."""
