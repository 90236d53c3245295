"""recall-lab: long-context recall in hybrid state-space models.

The Python API (recall_lab/api.py), importable from the package's top:

    import recall_lab as rl
    run = rl.train({"model": {"name": "mamba"}, "task": {"preset": "mini-mqar"},
                    "train": {"steps": 300}})

`generate`, `train`, `load_run`, `evaluate`, `sweep`, `report`, `check`, `place`, `lr_window`,
`runs_frame` and the result types `Run` and `Report`. Every bad input (a config that does not
validate, a file that is not there) raises `recall_lab.RecallLabError`, with the one line the
command line prints: `except rl.RecallLabError` catches the lab's errors and nothing else. They
load on first use, so `import recall_lab` (and the command line's start) stays free of torch.

`recall_lab.train` and `recall_lab.evaluate` are the API's functions, although modules of the
same names exist (the training loop, evaluation): the package keeps the functions under those
names, and the modules stay importable by their full names (`from recall_lab.train import
train_run`, `importlib.import_module("recall_lab.train")`).
"""

import sys
import types

from recall_lab.generators.errors import RecallLabError
from recall_lab.version import __version__

# tracebacks and reprs name it where a user imports it from
RecallLabError.__module__ = "recall_lab"

API = ("Report", "Run", "check", "evaluate", "generate", "load_run", "lr_window", "place",
       "report", "run_config", "runs_frame", "sweep", "train")


class _Package(types.ModuleType):
    """The package module: importing a submodule named like an API function (recall_lab.train,
    recall_lab.evaluate) would set the package's attribute to that module; it keeps the
    function instead."""

    def __setattr__(self, name: str, value) -> None:
        if name in API and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str):
    if name in API:
        from recall_lab import api

        for fn in API:  # once: the names now resolve without this hook
            setattr(sys.modules[__name__], fn, getattr(api, fn))
        return getattr(api, name)
    raise AttributeError(f"module 'recall_lab' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *API])


__all__ = ["RecallLabError", "__version__", *API]
