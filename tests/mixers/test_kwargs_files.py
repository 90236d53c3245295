"""Kwargs files by name (`--kwargs-file zoology`, recall_lab/mixers/kwargs_files.py) and the hint
a missing constructor argument gives (issue 64: `check zoology.mixers.hyena:Hyena` said only
"Missing required argument")."""

import pytest
import torch

from recall_lab.generators.errors import RecallLabError
from recall_lab.mixers import build_mixer
from recall_lab.mixers.kwargs_files import kwargs_file, mixer_kwargs, shipped_names

LONGEST_PLACE_TABLE = 130  # 32 pairs: place's longest sequence (issue 62, finding 2)


def test_the_shipped_zoology_file_is_found_by_name_and_covers_place_s_tables():
    assert "zoology" in shipped_names() and kwargs_file("zoology").name == "zoology.toml"
    for path in ("zoology.mixers.hyena:Hyena", "zoology.mixers.base_conv:BaseConv",
                 "zoology.mixers.based:Based"):
        assert mixer_kwargs("zoology", path)["l_max"] >= LONGEST_PLACE_TABLE


@pytest.mark.parametrize("value, path, needle", [
    ("zoologyy", "x:Y", "no shipped kwargs file of that name (shipped: zoology"),
    ("zoology", "zoology.mixers.nope:Nope", "no [mixers.'zoology.mixers.nope:Nope'] table"),
    ("missing/file.toml", "x:Y", "no such file"),
])
def test_a_bad_kwargs_file_is_one_line(value, path, needle):
    with pytest.raises(RecallLabError, match=None) as exc:
        mixer_kwargs(value, path)
    assert needle in str(exc.value)


class NeedsLength(torch.nn.Module):
    def __init__(self, d_model: int, l_max: int, layer_idx: int = 0) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(d_model, d_model)


def test_a_missing_constructor_argument_suggests_kwargs():
    with pytest.raises(RecallLabError) as exc:
        build_mixer(f"{__name__}:NeedsLength", 8)
    assert "NeedsLength needs l_max (no default)" in str(exc.value)
    assert "--kwargs '{\"l_max\": ...}'" in str(exc.value)
    assert isinstance(build_mixer(f"{__name__}:NeedsLength", 8, 0, {"l_max": 4}), NeedsLength)
