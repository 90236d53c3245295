"""Models: hybrid SSM + sparse-attention blocks, Samba, Transformer, and the 2-layer LM.

`build_model(name, vocab_size, **overrides)` builds any row of the joint-recall paper's Table 1
by name; see `registry.py` for the names, `archs.py` for the architecture table and `lm.py` /
`blocks.py` / `hybrid.py` for the modules.
"""

from recall_lab.models.lm import LMOutput, RecallLM
from recall_lab.models.registry import (
    ATTAMBA_MODELS,
    CONTROL_MODELS,
    DECI_MODELS,
    MODEL_ROWS,
    PAPER_MODELS,
    SEATTN_MODELS,
    build_model,
    listed_models,
    model_config,
    register_model,
    registered_models,
)

__all__ = ["ATTAMBA_MODELS", "CONTROL_MODELS", "DECI_MODELS", "LMOutput", "MODEL_ROWS",
           "PAPER_MODELS", "RecallLM", "SEATTN_MODELS", "build_model", "listed_models",
           "model_config", "register_model", "registered_models"]
