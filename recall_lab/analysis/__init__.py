"""Analysis of trained models: hidden attention of SSM layers (DeciMamba Eq. 4-5), Mamba Mean
Distance (Eq. 6-8), the Delta-sum divergence (Eq. 9), the attention mean distance of a hybrid's
sparse branch, and their plots."""

from recall_lab.analysis.hidden_attention import (
    SSMKernel,
    apply_hidden_attention,
    hidden_attention,
    hidden_attention_loop,
    hidden_attention_row,
    iter_tiles,
    ssm_kernel,
)
from recall_lab.analysis.mean_distance import (
    LayerMeanDistance,
    attention_mean_distance,
    delta_sum,
    layer_mean_distance,
    mamba_mean_distance,
    mamba_mean_distance_last,
    mean_distance,
    mean_distance_loop,
    normalise_by_length,
    sparse_attention_weights,
)

__all__ = [
    "LayerMeanDistance",
    "SSMKernel",
    "apply_hidden_attention",
    "attention_mean_distance",
    "delta_sum",
    "hidden_attention",
    "hidden_attention_loop",
    "hidden_attention_row",
    "iter_tiles",
    "layer_mean_distance",
    "mamba_mean_distance",
    "mamba_mean_distance_last",
    "mean_distance",
    "mean_distance_loop",
    "normalise_by_length",
    "sparse_attention_weights",
    "ssm_kernel",
]
