"""Task generators of a test package, named by import path (`tests.data.toy_tasks:...`): one that
keeps the task contract and ones that break it."""

import numpy as np

from recall_lab.generators.tasks import IGNORE, task_generator


@task_generator(vocab_size=lambda vocab=8, **_: vocab, max_len=lambda length=6, **_: length)
def copy_first(n, seed, vocab=8, length=6):
    """Rows of random ids; the target at the last position is the row's first id (slice: the
    first id's parity)."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, vocab, size=(n, length))
    y = np.full((n, length), IGNORE)
    y[:, -1] = x[:, 0]
    return x, y, x[:, 0] % 2


def no_size(n, seed):
    return np.zeros((n, 4), np.int64), np.zeros((n, 4), np.int64)


@task_generator(vocab_size=4, max_len=4)
def wrong_shape(n, seed):
    return np.zeros((n, 4), np.int64), np.zeros((n, 3), np.int64)


@task_generator(vocab_size=4, max_len=4)
def floats(n, seed):
    return np.zeros((n, 4)), np.zeros((n, 4))


@task_generator(vocab_size=4, max_len=4)
def out_of_vocab(n, seed):
    return np.full((n, 4), 9, np.int64), np.full((n, 4), IGNORE, np.int64)
