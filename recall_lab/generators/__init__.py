"""Recall task generators (numpy only, never torch): vocabulary, task specs, dataset files."""

from recall_lab.generators.errors import RecallLabError
from recall_lab.generators.joint_recall import (
    GENERATOR_VERSION,
    IGNORE,
    Batch,
    generate,
    targets_for,
)
from recall_lab.generators.spec import PRESETS, Preset, TaskSpec, get_preset, get_preset_entry
from recall_lab.generators.vocab import Vocab

__all__ = [
    "GENERATOR_VERSION", "IGNORE", "PRESETS", "Batch", "Preset", "RecallLabError", "TaskSpec",
    "Vocab", "generate", "get_preset", "get_preset_entry", "targets_for",
]
