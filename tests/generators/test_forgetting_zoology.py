"""`forgetting-mqar` against zoology's own `forgetting_mqar` where zoology imports (a checkout on
PYTHONPATH; zoology is not a dependency of the lab, so the test skips elsewhere, saying why). The
committed record of the same comparison is docs/results/forgetting-mqar/."""

import numpy as np
import pytest

from recall_lab.generators.forgetting import forgetting_mqar
from recall_lab.generators.forgetting_audit import CONFIGS, SAME, compare, label_rule
from recall_lab.generators.tasks import IGNORE

zoology = pytest.importorskip(
    "zoology.data.forgetting_mqar",
    reason="zoology is not importable: put a checkout of HazyResearch/zoology on PYTHONPATH "
           "to compare with its generator (python -m recall_lab.generators.forgetting_audit)")

ROWS = 1500


@pytest.mark.parametrize("config", [CONFIGS[0], CONFIGS[2]])
def test_marginals_and_label_rule_match_zoologys(config):
    res = compare(zoology.forgetting_mqar, config, n=ROWS, seed=0)
    lab, zoo = res["lab"], res["zoology"]
    for key in SAME:
        assert lab[key] == zoo[key], key
    assert lab["keys_in_lower_half"] and lab["values_in_upper_half"]
    assert lab["updates_per_row"] == [config["num_updates"]]
    assert lab["queries_per_row"] == [config["num_kv_pairs"]]
    # the label rule, example by example, on both generators' rows
    assert lab["label_rule_examples_equal"] == zoo["label_rule_examples_equal"] == ROWS
    # 1,500 rows x 8 gaps each: per-gap frequencies within sampling noise (sd about 0.018)
    assert res["gap_histogram_max_difference"] < 0.08
    assert res["mean_gap_by_key_place_max_difference"] < 1.0
    # the filler's rate of repeating a row key, within noise of each other
    a = lab["with_random_filler"]["filler_ids_that_are_row_keys"]
    b = zoo["with_random_filler"]["filler_ids_that_are_row_keys"]
    assert abs(a - b) < 0.02
    # the one rule that differs (README): the lab's update never rewrites a key's own value
    assert lab["update_equals_own_original"] == 0.0


def test_label_rule_reads_zoologys_own_example():
    seg = zoology.forgetting_mqar(vocab_size=100, num_examples=50, input_seq_len=32, seed=42,
                                  num_kv_pairs=4, num_updates=2, random_non_queries=False)
    x, y = np.asarray(seg.inputs), np.asarray(seg.labels)
    assert (label_rule(x, 4, 2) == y).all()
    ours_x, ours_y = forgetting_mqar(50, np.random.SeedSequence(42), vocab_size=100,
                                     input_seq_len=32, num_kv_pairs=4, num_updates=2,
                                     random_non_queries=False)
    assert (label_rule(ours_x, 4, 2) == ours_y).all()
    assert ((y != IGNORE).sum(1) == 4).all() and ((ours_y != IGNORE).sum(1) == 4).all()
