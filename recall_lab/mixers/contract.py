"""The mixer contract (version 2): how any sequence mixer enters the lab.

It is zoology's contract on purpose, so a mixer written for zoology runs here unchanged:

- built as ``Mixer(d_model=..., layer_idx=..., **kwargs)`` (a class whose signature has no
  ``layer_idx`` and no ``**kwargs`` is built without it). A class built with ``hidden_size``
  and no ``d_model`` (FLA's layers) is given ``hidden_size=d_model``, and the first element of a
  tuple its forward returns is its output (`HiddenSizeLayer`);
- ``forward(x)`` maps ``(B, L, D)`` to ``(B, L, D)`` and is strictly causal: output i depends on
  inputs 0..i only, never on the padded length of its batch;
- optional ``state_size(sequence_length=L)``: numbers of recurrent state for one sequence of
  length L, called by keyword exactly as zoology's ``_compute_state_size`` calls it (version 1
  also passed ``batch_size``, which most of zoology's mixers do not take; a mixer that accepts
  it keeps working). `mixers/state.py` holds the convention it is compared with;
- optional ``allocate_cache(batch_size, max_len)`` and ``step(x_t, cache)``: decoding, one token
  ``x_t (B, D) -> y_t (B, D)``, the cache updated in place (a ``(y_t, cache)`` pair is accepted
  too). Without them the lab decodes by recomputing the prefix, exactly.

A mixer is named by an import path, ``pkg.module:Class`` or ``pkg.module.Class``, or by a name a
package publishes in the ``recall_lab.mixers`` entry-point group (`registry.py`). A path that
does not import, a class that rejects its arguments or a module that is not a torch module ends
in one `RecallLabError` line that names the cause (a missing constructor argument by name).
"""

from __future__ import annotations

import importlib
import inspect
import os
import re
import sys
from typing import Any

import torch
from torch import nn

from recall_lab.generators.errors import RecallLabError

CONTRACT_VERSION = 2


def one_line(exc: BaseException) -> str:
    """An exception as one line: its type and every line of its message (pydantic's
    ValidationError names the field on its second line), without pydantic's help links."""
    # pydantic's "[type=..., input_value=..., input_type=...]" tails repeat the inputs
    lines = [re.sub(r"\s*\[type=.*$", "", ln).strip() for ln in str(exc).splitlines()
             if ln.strip() and "errors.pydantic.dev" not in ln]
    return f"{type(exc).__name__}: {'; '.join(lines)}" if lines else type(exc).__name__


def split_path(path: str) -> tuple[str, str]:
    """``pkg.mod:Class`` or ``pkg.mod.Class`` -> (module, attribute)."""
    if not isinstance(path, str) or not path.strip() or path.count(":") > 1:
        raise RecallLabError(f"mixer {path!r}: expected an import path pkg.module:Class or "
                             "pkg.module.Class, or a mixer name (see `recall-lab models`)")
    module, sep, attr = path.partition(":")
    if not sep:
        module, _, attr = path.rpartition(".")
    if not module or not attr:
        raise RecallLabError(f"mixer {path!r}: expected an import path pkg.module:Class or "
                             "pkg.module.Class, or a mixer name (see `recall-lab models`)")
    return module, attr


def _import(module: str, path: str):
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        # a module beside the user's working directory (`--mixer my_mixer:Mixer`) imports too;
        # the console script does not put the working directory on sys.path by itself
        if exc.name == module.split(".")[0] and os.getcwd() not in sys.path:
            sys.path.append(os.getcwd())
            return _import(module, path)
        raise RecallLabError(f"mixer {path!r}: module {module} does not import "
                             f"(ModuleNotFoundError: {exc})") from None
    except Exception as exc:  # the user's module raised while importing
        raise RecallLabError(f"mixer {path!r}: module {module} does not import "
                             f"({one_line(exc)})") from None


def load_mixer_class(path: str) -> Any:
    """The class (or factory) an import path names."""
    module, attr = split_path(path)
    obj = _import(module, path)
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise RecallLabError(f"mixer {path!r}: module {module} has no {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise RecallLabError(f"mixer {path!r}: {attr} is not a class")
    return obj


def _params(cls: Any) -> list[inspect.Parameter] | None:
    try:
        return list(inspect.signature(cls).parameters.values())
    except (TypeError, ValueError):  # a builtin without a signature
        return None


def _takes(cls: Any, name: str) -> bool:
    params = _params(cls)
    if params is None:  # pass everything
        return True
    return any(p.name == name or p.kind is p.VAR_KEYWORD for p in params)


def _hidden_size_class(cls: Any) -> bool:
    """Built with ``hidden_size`` and no ``d_model`` (FLA's layers)."""
    params = _params(cls)
    names = {p.name for p in params or ()}
    return "hidden_size" in names and "d_model" not in names


def required_kwargs(cls: Any) -> list[str]:
    """Constructor arguments without a default that the lab does not give (beyond d_model /
    hidden_size and layer_idx): what a plug-in needs from ``--mixer-kwargs`` (zoology's Hyena
    and BaseConv need ``l_max``)."""
    given = {"self", "d_model", "hidden_size", "layer_idx"}
    return [p.name for p in _params(cls) or ()
            if p.default is p.empty and p.name not in given
            and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


class HiddenSizeLayer(nn.Module):
    """A layer built with ``hidden_size`` whose forward may return a tuple (FLA's layers return
    ``(o, attentions, past_key_values)``): the first element is the mixer's output. Its
    ``state_size``, where the layer has one, is the layer's."""

    def __init__(self, layer: nn.Module) -> None:
        super().__init__()
        self.layer = layer
        if callable(getattr(layer, "state_size", None)):
            self.state_size = layer.state_size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.layer(x)
        return out[0] if isinstance(out, tuple) else out


def _needs_gpu(cls: Any) -> bool:
    return (getattr(cls, "__module__", "") or "").split(".")[0] == "fla" and \
        not torch.cuda.is_available()


def build_mixer(path: str, d_model: int, layer_idx: int = 0,
                kwargs: dict[str, Any] | None = None) -> nn.Module:
    """An instance of the mixer at `path` for one layer, with its kwargs."""
    cls = load_mixer_class(path)
    kwargs = dict(kwargs or {})
    if _takes(cls, "layer_idx"):
        kwargs["layer_idx"] = layer_idx
    name = getattr(cls, "__name__", path)
    if _needs_gpu(cls):
        raise RecallLabError(f"mixer {path!r}: FLA's layers run their Triton kernels on a GPU "
                             "only, and this machine has none (the lab's zoo mixers run here: "
                             "see `recall-lab models`)")
    size = "hidden_size" if _hidden_size_class(cls) else "d_model"
    # (a class that takes no d_model is refused below, by the call itself)
    missing = [k for k in required_kwargs(cls) if k not in kwargs] if _takes(cls, size) else []
    if missing:  # said before the call: zoology's pydantic-checked classes say it less clearly
        raise RecallLabError(f"mixer {path!r}: {name} needs {', '.join(missing)} (no default); "
                             f"give it: --kwargs '{{\"{missing[0]}\": ...}}' (a run config: "
                             "[model] mixer_kwargs; zoology's mixers: --kwargs-file zoology)")
    try:
        mixer = cls(**{size: d_model}, **kwargs)
    except RecallLabError:
        raise
    except Exception as exc:  # wrong signature, rejected kwargs, the user's own checks
        raise RecallLabError(f"mixer {path!r}: {name}({size}={d_model}, "
                             f"{', '.join(f'{k}={v!r}' for k, v in kwargs.items())}) failed: "
                             f"{one_line(exc)}") from None
    if not isinstance(mixer, nn.Module):
        raise RecallLabError(f"mixer {path!r}: {name}(...) returned a "
                             f"{type(mixer).__name__}, not a torch.nn.Module")
    return HiddenSizeLayer(mixer) if size == "hidden_size" else mixer


def mixer_label(path: str) -> str:
    """A run's model name when only an import path is given: the class name."""
    return split_path(path)[1].rpartition(".")[2]


def has_step(mixer: nn.Module) -> bool:
    return callable(getattr(mixer, "allocate_cache", None)) and callable(
        getattr(mixer, "step", None))


def probe_mixer(mixer: nn.Module, path: str, d_model: int) -> None:
    """One forward on a small fixed input: the output must be a finite (B, L, D) tensor. Run
    once when a mixer is built, so a broken mixer ends in one line before anything trains."""
    x = torch.randn(2, 5, d_model, generator=torch.Generator().manual_seed(0))
    p = next(mixer.parameters(), None)
    if p is not None:
        x = x.to(device=p.device, dtype=p.dtype)
    was = mixer.training
    mixer.eval()  # no dropout: the probe draws nothing from torch's global generator
    try:
        with torch.no_grad():
            y = mixer(x)
        mixer.train(was)
    except Exception as exc:
        raise RecallLabError(f"mixer {path!r}: forward on a (2, 5, {d_model}) input failed: "
                             f"{one_line(exc)}") from None
    if not isinstance(y, torch.Tensor) or y.shape != x.shape:
        got = tuple(y.shape) if isinstance(y, torch.Tensor) else type(y).__name__
        raise RecallLabError(f"mixer {path!r}: forward returned {got} for a (2, 5, {d_model}) "
                             "input; the contract maps (B, L, D) to (B, L, D)")
    if not torch.isfinite(y).all():
        raise RecallLabError(f"mixer {path!r}: forward returned NaN or inf on a (2, 5, "
                             f"{d_model}) normal input")
