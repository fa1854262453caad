"""The tutorial's figures for `make demo-data` (docs/tutorial.md) stay true: the corpus is the project's own text,
so its size moves with every README, guide or docstring change; the page's document count and corpus size must
stay within 15 % of what examples/make_demo_data.py makes from this checkout."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOLERANCE = 0.15


def _documents() -> list[str]:
    spec = importlib.util.spec_from_file_location("make_demo_data", ROOT / "examples" / "make_demo_data.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.documents()


def test_tutorial_states_the_demo_corpus_it_makes():
    """The corpus grows with every docstring, so the page quotes make demo-data's line with N and gives the figures
    as "about": an exact count there (254 where the script made 256) is untrue by the next commit."""
    text = " ".join((ROOT / "docs" / "tutorial.md").read_text().split())
    assert "data/: N documents of this project's own text" in text, "docs/tutorial.md no longer quotes the line"
    exact = re.findall(r"(?<!about )\b\d[\d,]* (?:documents|docs)\b", text)
    assert exact == [], f"an exact document count the next commit makes untrue: {exact}; say N, or about N"
    stated = re.search(r"about (\d+) documents and (\d+) KiB", text)
    assert stated, "docs/tutorial.md no longer says about how many documents and KiB"
    docs = _documents()
    size_kib = sum(len(json.dumps({"text": d}, ensure_ascii=False).encode()) + 1 for d in docs) / 1024
    for name, said, real in (("documents", int(stated.group(1)), len(docs)),
                             ("corpus KiB", int(stated.group(2)), size_kib)):
        assert abs(said - real) <= TOLERANCE * real, (
            f"docs/tutorial.md says {said} {name}, make demo-data makes {real:.0f}: update the page")
