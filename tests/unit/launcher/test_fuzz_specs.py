"""Hostile job specs (wrong types, unicode and control characters, deep nesting, duplicate keys, bytes that are
not UTF-8, broken YAML, hostile --set overrides) through the real CLI entry point: every one ends in exit 0
(it was valid after all) or exit 2 with one named error — never a traceback, never an internal error.

CI runs a bounded number of examples; the nightly-sized run is one command:

    MTK_FUZZ_EXAMPLES=1000 .venv/bin/python -m pytest tests/unit/launcher/test_fuzz_specs.py -q
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
BASE = yaml.safe_load((EXAMPLES / "tiny.yaml").read_text())
N = int(os.environ.get("MTK_FUZZ_EXAMPLES", "60"))
FUZZ = settings(max_examples=N, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                       HealthCheck.data_too_large])

hostile_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40) | st.sampled_from(
    ["", " ", "\x00", "\x1b[31m", "\u202e", "\ufeff", "../../etc/passwd", "$(touch x)", "`id`", "a\nb", "\r",
     "\u2028", "💥" * 50, "x" * 5000, "~", "null", "true", "0x10", "1e999", "-0", "nan", ".inf"])
scalars = (st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
           | st.floats(allow_nan=True, allow_infinity=True) | hostile_text)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(hostile_text, inner, max_size=4), max_leaves=12)


def _paths(node, prefix=()):
    if isinstance(node, dict):
        for k, v in node.items():
            yield (*prefix, k)
            yield from _paths(v, (*prefix, k))


PATHS = [*_paths(BASE), ("cluster", "secrets"), ("cluster", "env", "HF_TOKEN"), ("data", "fetch"),
         ("cluster", "eks", "namespace"), ("parallel", "tp"), ("nonsense",)]


def _set(data: dict, path: tuple, value) -> None:
    node = data
    for key in path[:-1]:
        if not isinstance(node.get(key), dict):
            node[key] = {}
        node = node[key]
    node[path[-1]] = value


def run_cli(argv: list[str]) -> tuple[int, str]:
    from mtk.launcher.cli import main

    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        code = main(argv)
    return code, err.getvalue()


def assert_named_or_ok(code: int, err: str) -> None:
    assert "Traceback" not in err and "internal error" not in err, err
    assert code in (0, 2), (code, err)
    if code == 2:
        assert err.startswith("error: ") and err.count("\nerror: ") == 0, err  # one error report


def _validate_text(raw: bytes) -> tuple[int, str]:
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "spec.yaml"
        spec.write_bytes(raw)
        return run_cli(["validate", str(spec), "-q"])


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(PATHS), values), min_size=1, max_size=4))
def test_hostile_values_in_a_valid_spec(changes):
    data = yaml.safe_load(yaml.safe_dump(BASE))
    for path, value in changes:
        _set(data, path, value)
    try:
        raw = yaml.safe_dump(data, allow_unicode=True).encode()
    except (yaml.YAMLError, ValueError, OverflowError):
        return  # not representable as YAML: nothing a user could write
    assert_named_or_ok(*_validate_text(raw))


@FUZZ
@given(st.binary(max_size=300), st.integers(min_value=0, max_value=400))
def test_hostile_bytes_spliced_into_a_spec(blob, where):
    raw = (EXAMPLES / "tiny.yaml").read_bytes()
    where = min(where, len(raw))
    assert_named_or_ok(*_validate_text(raw[:where] + blob + raw[where:]))


@FUZZ
@given(st.sampled_from(["train", "model", "cluster", "name", "parallel", "data", "iterations", "preset"]),
       st.integers(min_value=1, max_value=200), st.sampled_from(["[", "{", "- "]))
def test_duplicates_and_deep_nesting(key, depth, opener):
    dup = f"name: tiny\nmodel: {{preset: tiny}}\n{key}: 1\n{key}: 2\n".encode()
    code, err = _validate_text(dup)
    assert_named_or_ok(code, err)
    assert code == 2 and "duplicate key" in err
    deep = ("name: tiny\nmodel: {preset: tiny}\ntrain: " + opener * depth + "1").encode()
    assert_named_or_ok(*_validate_text(deep))


@FUZZ
@given(st.lists(st.tuples(st.sampled_from([".".join(map(str, p)) for p in PATHS] + ["", ".", "a..b", "0.1",
                                                                                    "data.blend.7.weight"]),
                          hostile_text), min_size=1, max_size=3))
def test_hostile_set_overrides(overrides):
    argv = ["validate", str(EXAMPLES / "tiny.yaml"), "-q"]
    for key, value in overrides:
        if "\x00" in key + value:
            continue  # an argv cannot hold NUL
        argv += ["--set", f"{key}={value}"]
    code, err = run_cli(argv)
    assert_named_or_ok(code, err)
