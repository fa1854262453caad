"""Fetches pin what they download: a moving revision (…/resolve/main/…, latest) without sha256 is refused at
validate unless the item says it trusts its first download; every example passes validate and pins its fetches."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest
import yaml

from mtk.spec.fetch_pins import moving_ref

EXAMPLES = sorted((Path(__file__).resolve().parents[3] / "examples").glob("*.yaml"))
TINY = str(Path(__file__).resolve().parents[3] / "examples" / "tiny.yaml")
HF_REVISION = re.compile(r"/resolve/([^/]+)/")


def backend_of(example: Path) -> str:
    text = example.read_text()
    if "eks:" in text or "-eks" in example.name:
        return "eks"
    return "slurm" if yaml.safe_load(text)["cluster"].get("nodes", 1) > 1 else "local"


def mtk(*argv: str) -> tuple[int, str]:
    """The real CLI entry point, in this process (a subprocess per case costs seconds of imports)."""
    from mtk.launcher.cli import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(list(argv))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return code, err.getvalue()


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.name for e in EXAMPLES])
def test_every_example_validates_and_pins_its_fetches(example):
    code, err = mtk("validate", str(example), "--backend", backend_of(example), "--no-megatron", "-q")
    assert code == 0, err
    for i, item in enumerate(yaml.safe_load(example.read_text()).get("data", {}).get("fetch", [])):
        where = f"{example.name} data.fetch.{i}"
        if not item["url"].startswith(("http://", "https://")):
            continue
        if item.get("sha256"):
            assert re.fullmatch(r"[0-9a-f]{64}", item["sha256"]), where
            assert moving_ref(item["url"]) is None, f"{where}: pinned by digest but fetched from a moving revision"
            revision = HF_REVISION.search(item["url"])
            assert revision is None or re.fullmatch(r"[0-9a-f]{40}", revision.group(1)), where
        else:
            assert item.get("trust_first_fetch") is True, f"{where}: neither sha256 nor trust_first_fetch"


def test_the_examples_fetch_something_and_pin_the_tokenizer_by_digest():
    fetching = {e.name: yaml.safe_load(e.read_text())["data"]["fetch"] for e in EXAMPLES
                if yaml.safe_load(e.read_text()).get("data", {}).get("fetch")}
    assert len(fetching) >= 2, fetching
    for name, items in fetching.items():
        tokenizer = [i for i in items if i.get("path", "").startswith("gpt2-")]
        assert len(tokenizer) == 2 and all(i.get("sha256") for i in tokenizer), (name, items)
    digests = {tuple(sorted(i.get("sha256") or "" for i in items)) for items in fetching.values()}
    assert len(digests) == 1, "the examples fetch the same files: the same pins"


@pytest.mark.parametrize("url,ref", [
    ("https://huggingface.co/bigscience/misc-test-data/resolve/main/stas/oscar-1GB.jsonl.xz", "main"),
    ("https://huggingface.co/datasets/org/set/resolve/v1.0/data.jsonl", "v1.0"),
    ("https://raw.githubusercontent.com/org/repo/master/vocab.json", "master"),
    ("https://github.com/org/repo/raw/main/merges.txt", "main"),
    ("https://example.com/releases/latest/corpus.jsonl.zst", "latest"),
    ("https://example.com/get?file=a.jsonl&ref=dev", "dev"),
])
def test_a_moving_revision_without_sha256_is_refused_at_validate(url, ref):
    assert moving_ref(url) == ref
    code, err = mtk("validate", TINY, "--no-megatron", "-q", "--set", f"data.fetch=[{{url: '{url}'}}]")
    assert code == 2 and "data.fetch.0.url" in err and f"moving revision '{ref}'" in err, err
    assert "sha256" in err and "trust_first_fetch" in err and "Traceback" not in err, err
    for extra in ("sha256: '" + "a" * 64 + "'", "trust_first_fetch: true"):
        code, err = mtk("validate", TINY, "--no-megatron", "-q", "--set", f"data.fetch=[{{url: '{url}', {extra}}}]")
        assert code == 0, (extra, err)


@pytest.mark.parametrize("url", [
    "https://huggingface.co/openai-community/gpt2/resolve/607a30d783dfa663caf39e06633721c8d4cfcd7e/vocab.json",
    "https://raw.githubusercontent.com/org/repo/0123456789abcdef0123456789abcdef01234567/vocab.json",
    "https://example.com/data/corpus-2024-05.jsonl.xz",
    "s3://bucket/latest/corpus.jsonl",
    "/shared/main/corpus.jsonl",
])
def test_fixed_content_and_non_http_sources_are_not_moving(url):
    assert moving_ref(url) is None
    code, err = mtk("validate", TINY, "--no-megatron", "-q", "--set", f"data.fetch=[{{url: '{url}'}}]")
    assert code == 0 and "moving revision" not in err, err
