"""The offline real-data example's inputs (``make demo-data``): a JSONL corpus and a tokenizer trained on it.

Why: ``examples/tiny-corpus.yaml`` and ``examples/tiny-slurm.yaml`` read real text through a GPT-2 style BPE,
and a laptop without network access must be able to walk that path (tokenizer → preprocess → train → resume →
convert). The text is this project's own — its READMEs, guides and the docstrings of its package — so it is
license-clean and present in every clone; the tokenizer is a byte-level BPE trained on it with Hugging Face
``tokenizers`` (in ``make demo``'s environment), saved as the ``vocab.json`` + ``merges.txt`` that
``GPT2BPETokenizer`` reads (``<|endoftext|>``, the EOD/EOS of the export, is id 0).

    python examples/make_demo_data.py [OUT_DIR]     # default: data (the examples' data.dir)

Files that already exist are kept (a relaunch then resumes on the same tokens); delete ``OUT_DIR`` to rebuild.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("mtk", "launcher", "training", "data_jobs", "slurm", "k8s", "containers")
READMES = ("README.md", "docs/*.md", "benchmarks/README.md", "containers/README.md")
GENERATED = ("docs/spec.md",)  # tables made from the models: no prose to learn from
FILES = ("corpus.jsonl", "vocab.json", "merges.txt")
EOT = "<|endoftext|>"
VOCAB = 1024  # the tiny preset's vocabulary: <|endoftext|>, 256 bytes and 767 merges
CORPUS_BUDGET = 400 * 1024  # bytes of corpus.jsonl: the demo stays tiny (and its figures steady) as the project grows
HEADING = re.compile(r"^(?=#{1,3} )", re.M)


def readme_sections(root: Path) -> Iterator[str]:
    """Each section of the READMEs and guides (split at its headings) as one document."""
    for pattern in READMES:
        for path in sorted(root.glob(pattern)):
            if path.is_file() and path.relative_to(root).as_posix() not in GENERATED:
                yield from (s.strip() for s in HEADING.split(path.read_text(encoding="utf-8")) if s.strip())


def module_docstrings(root: Path) -> Iterator[str]:
    """Each package module's docstrings (module, classes, functions, in source order) as one document."""
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            nodes = [n for n in ast.walk(tree)
                     if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)]
            docs = [d for d in map(ast.get_docstring, nodes) if d]
            if docs:
                yield "\n\n".join(docs)


def documents(root: Path = ROOT) -> list[str]:
    """The corpus: deterministic for a given tree (sorted files, source order), whole documents in that order while
    their JSONL lines fit ``CORPUS_BUDGET`` — the project's text grows with every commit, the demo must not."""
    kept, size = [], 0
    for doc in (*readme_sections(root), *module_docstrings(root)):
        size += len(json.dumps({"text": doc}, ensure_ascii=False).encode()) + 1
        if size > CORPUS_BUDGET:
            break
        kept.append(doc)
    return kept


def write_corpus(docs: list[str], path: Path) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps({"text": doc}, ensure_ascii=False) + "\n" for doc in docs)


def train_tokenizer(docs: list[str], out: Path) -> int:
    """``vocab.json`` + ``merges.txt`` of a byte-level BPE trained on ``docs``; returns its vocabulary size."""
    from tokenizers import ByteLevelBPETokenizer

    tok = ByteLevelBPETokenizer()
    tok.train_from_iterator(docs, vocab_size=VOCAB, special_tokens=[EOT], show_progress=False)
    tok.save_model(str(out))
    return len(json.loads((out / "vocab.json").read_text(encoding="utf-8")))


def make(out: Path) -> str:
    """Write the missing inputs into ``out`` (all three, or none: they belong together); returns what was done."""
    if all((out / name).is_file() for name in FILES):
        return f"{out}/: {', '.join(FILES)} exist, kept (delete {out}/ to rebuild)"
    docs = documents()
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out, prefix=".demo-data-") as tmp:
        write_corpus(docs, Path(tmp) / "corpus.jsonl")
        vocab = train_tokenizer(docs, Path(tmp))
        for name in FILES:  # the corpus and its tokenizer replace any partial set together
            os.replace(Path(tmp) / name, out / name)
    sizes = ", ".join(f"{name} {(out / name).stat().st_size // 1024} KiB" for name in FILES)
    return f"{out}/: {len(docs)} documents of this project's own text, a {vocab}-token byte-level BPE ({sizes})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", default="data", help="the examples' data.dir (default: data)")
    args = ap.parse_args(argv)
    print(make(Path(args.out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
