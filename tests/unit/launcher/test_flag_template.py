"""The flag renderer is Jinja's output, byte for byte, for the subset it accepts, and refuses the rest."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import mtk.slurm.render as slurm_render
import pytest

from mtk.flag_template import TemplateError, render_flags
from mtk.templating import render_template

STEP_FLAGS = ("train", "pyxis", "singleton", "preflight", "spare", "sqsh")


def _case(folder: Path, text: str) -> str:
    """``text`` as ``templates/case.j2`` beside ``folder/owner.py``, the layout both renderers read."""
    (folder / "templates").mkdir(exist_ok=True)
    (folder / "templates" / "case.j2").write_text(text)
    return str(folder / "owner.py")


def jinja(folder: Path, text: str, **flags: bool) -> str:
    """The reference: ``text`` rendered by mtk's own Jinja2 path (``templating.render_template``, its settings)."""
    return render_template(_case(folder, text), "case.j2", **flags)


def ours(folder: Path, text: str, **flags: bool) -> str:
    """``text`` rendered by the flag renderer, as the sbatch renderer calls it (``render_flags``)."""
    return render_flags(_case(folder, text), "case.j2", **flags)


@pytest.mark.parametrize("combo", list(itertools.product([False, True], repeat=len(STEP_FLAGS))),
                         ids=lambda c: "".join("1" if v else "0" for v in c))
def test_sbatch_step_logic_equals_jinjas_render_for_every_flag_combination(combo: tuple[bool, ...]) -> None:
    flags = dict(zip(STEP_FLAGS, combo, strict=True))
    ours = render_flags(slurm_render.__file__, "step.sh.j2", **flags)
    assert ours == render_template(slurm_render.__file__, "step.sh.j2", **flags)


CASES = {
    "nested, indented tags stripped, newline after each tag trimmed":
        "a\n  {% if x %}\n  b\n    {% if y %}\n    c\n    {% endif %}\n  {% endif %}\nd\n",
    "inline tags keep the blanks before them": "run {% if x %}--x {% endif %}{% if not y %}--no-y {% endif %}end\n",
    "elif and else": "{% if x %}\nX\n{% elif y %}\nY\n{% else %}\nN\n{% endif %}\ntail",
    "and/or/not precedence": "{% if x and not y or z %}\nhit\n{% endif %}\n",
    "tag that ends the file without a newline": "a\n{% if x %}b{% endif %}",
    "blank lines and tabs around tags": "\t{% if x %}\n\n\tb\n\t{% else %}\t\nc\n{% endif %}\n\n",
}


@pytest.mark.parametrize("text", list(CASES.values()), ids=list(CASES))
def test_synthetic_templates_equal_jinjas_render(text: str, tmp_path: Path) -> None:
    for x, y, z in itertools.product([False, True], repeat=3):
        assert ours(tmp_path, text, x=x, y=y, z=z) == jinja(tmp_path, text, x=x, y=y, z=z), (x, y, z)


@pytest.mark.parametrize(("text", "says"), [
    ("a {{ value }} b", "'{{' is not supported"),
    ("{# note #}", "'{#' is not supported"),
    ("{%- if x %}a{% endif %}", "'{%-' is not supported"),
    ("{% for i in x %}a{% endfor %}", "'{% for i in x %}' is not supported"),
    ("line\n{% if x %}a", "the 'if' of line 2 has no 'endif'"),
    ("a\n{% endif %}", "2: 'endif' without an open 'if'"),
    ("{% if x %}a{% else %}b{% elif y %}c{% endif %}", "'elif' after 'else'"),
    ("{% if x == 1 %}a{% endif %}", "is not flags joined by and/or/not"),
    ("{% if x and %}a{% endif %}", "ends without a flag"),
    ("{% if %}a{% endif %}", "a condition is missing"),
])
def test_anything_outside_the_subset_is_refused_with_its_line(text: str, says: str, tmp_path: Path) -> None:
    with pytest.raises(TemplateError, match=re.escape(says)):
        ours(tmp_path, text, x=True, y=True)


def test_a_flag_the_template_tests_must_be_given_even_in_a_branch_not_taken(tmp_path: Path) -> None:
    with pytest.raises(TemplateError, match="not given: tarin"):
        ours(tmp_path, "{% if x %}a{% elif tarin %}b{% endif %}", x=True)
