"""`at_length` for generator tasks: zoology-mqar grows as zoology's `ar_extrapolate` (the same
pairs among more noise), a task that cannot grow says so in one line naming what would."""

import numpy as np
import pytest

from recall_lab.generators.errors import RecallLabError
from recall_lab.generators.tasks import GeneratorTask, growing_tasks


def test_zoology_mqar_grows_its_input_length_with_the_same_pairs():
    task = GeneratorTask(generator="zoology-mqar", kwargs={"num_kv_pairs": 4,
                                                           "input_seq_len": 32})
    long = task.at_length(4)
    assert long.kwargs == {"num_kv_pairs": 4, "input_seq_len": 128}
    assert long.max_len == 4 * task.max_len == 128
    assert long.vocab() == task.vocab()  # no new ids: a trained model reads it
    rows = long.rows(64, np.random.SeedSequence(0))
    assert rows.inputs.shape == (64, 128)
    assert ((rows.targets != -100).sum(axis=1) == 4).all()  # still 4 queries per row
    assert task.at_length(1) is task


def test_default_length_is_read_from_the_generator():
    assert GeneratorTask(generator="zoology-mqar").at_length(2).kwargs == {"input_seq_len": 128}


def test_a_task_that_cannot_grow_names_what_would():
    with pytest.raises(RecallLabError) as err:
        GeneratorTask(generator="mad-recall").at_length(2)
    msg = str(err.value)
    assert "mad-recall cannot be lengthened" in msg and "--task" in msg
    assert all(name in msg for name in growing_tasks())
    assert "zoology-mqar" in growing_tasks() and "mad-recall" not in growing_tasks()
