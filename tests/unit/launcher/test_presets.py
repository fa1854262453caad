"""Every model preset is a valid model section: its keys are ModelSpec fields (a typo would otherwise reach a user
as an unknown key they never wrote), its values pass the field checks, and a spec naming it validates whole."""

from __future__ import annotations

import pytest

from mtk.spec import validate
from mtk.spec.presets import PRESETS


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_each_preset_validates_and_is_applied_as_written(name):
    job = validate({"name": "preset-check", "model": {"preset": name},
                    "cluster": {"nodes": 1, "procs_per_node": 8}})
    model = job.model.model_dump()
    assert {key: model[key] for key in PRESETS[name]} == PRESETS[name]


def test_a_spec_field_wins_over_its_preset():
    job = validate({"name": "preset-check", "model": {"preset": "tiny", "num_layers": 3},
                    "cluster": {"device": "cpu", "procs_per_node": 1}})
    assert job.model.num_layers == 3 != PRESETS["tiny"].get("num_layers")
