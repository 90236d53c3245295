"""Models: hybrid SSM + sparse-attention blocks, Samba, Transformer, and the 2-layer LM.

`build_model(name, vocab_size, **overrides)` builds any row of seed 004 Table 1 by name; see
`registry.py` for the names and `lm.py` / `hybrid.py` for the architecture.
"""

from recall_lab.models.lm import LMOutput, RecallLM
from recall_lab.models.registry import (
    ATTAMBA_MODELS,
    DECI_MODELS,
    MODEL_ROWS,
    PAPER_MODELS,
    SEATTN_MODELS,
    build_model,
    model_config,
)

__all__ = ["ATTAMBA_MODELS", "DECI_MODELS", "LMOutput", "MODEL_ROWS", "PAPER_MODELS", "RecallLM",
           "SEATTN_MODELS", "build_model", "model_config"]
