"""recall-lab: long-context recall in hybrid state-space models."""

__version__ = "0.1.0"
