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
    text = " ".join((ROOT / "docs" / "tutorial.md").read_text().split())
    stated = re.search(r"data/: (\d+) documents of this project's own text.*?\(corpus\.jsonl (\d+) KiB", text)
    assert stated, "docs/tutorial.md no longer quotes make demo-data's line"
    docs = _documents()
    size_kib = sum(len(json.dumps({"text": d}, ensure_ascii=False).encode()) + 1 for d in docs) / 1024
    for name, said, real in (("documents", int(stated.group(1)), len(docs)),
                             ("corpus KiB", int(stated.group(2)), size_kib)):
        assert abs(said - real) <= TOLERANCE * real, (
            f"docs/tutorial.md says {said} {name}, make demo-data makes {real:.0f}: update the page")
