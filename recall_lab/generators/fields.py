"""The field types every config model uses (TaskSpec here; ModelConfig, TrainConfig and the rest in
`recall_lab/config.py`): one place that says what a number in a TOML file or a config.json may be.

Pydantic's lax mode would take `true` for an integer (as 1), "3" for 3 and `inf` or `nan` for a
float; a config that says `steps = true` is a mistake, not a 1. So an `Int` is an integer and
nothing else (no bool, string or float), at most 2^31 - 1 (every count, size and seed of the lab
fits a C int, as the command line's flags do); a `Float` is a finite number (an integer is
accepted, a bool or a string is not). Lists still become tuples (TOML and JSON have no tuples).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AllowInfNan, Field, Strict

MAX_INT = 2**31 - 1

Int = Annotated[int, Strict(), Field(le=MAX_INT)]
Float = Annotated[float, Strict(), AllowInfNan(False)]
