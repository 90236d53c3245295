"""The package version, in a module of its own so that the library reads it without importing
the package top (which exposes the API)."""

__version__ = "0.1.0"
