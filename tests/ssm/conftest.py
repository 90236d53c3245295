"""Lets the ssm tests import their helper modules (ssm_inputs, mamba_ssm_oracle) by name."""

import sys
from pathlib import Path

_here = str(Path(__file__).parent)
if _here not in sys.path:
    sys.path.insert(0, _here)
