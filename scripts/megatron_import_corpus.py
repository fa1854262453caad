#!/usr/bin/env python3
"""Import every ``examples/**/*.sh`` of a Megatron-LM checkout the way ``mtk import`` does, and print one table row
per script: its entry point, the exit status ``mtk import`` gives, its flags honoured / ignored / refused, and
validate's verdict (with the refused flags dropped, when some were refused).

    git -C /path/to/Megatron-LM archive core_r0.19.0 examples | tar -x -C /tmp/mlm-0.19
    .venv/bin/python scripts/megatron_import_corpus.py /tmp/mlm-0.19

The result for core_r0.19.0 is in docs/megatron-import.md. Reads the scripts only: nothing is run.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path


def _cell(text: str, limit: int = 150) -> str:
    one = " ".join(text.split()).replace("|", "\\|")
    return one if len(one) <= limit else one[:limit - 1] + "…"


def _first_problem(problems: str) -> str:
    lines = [line.strip(" -") for line in problems.splitlines() if line.strip()]
    return lines[1] if len(lines) > 1 and lines[0].endswith(":") else (lines[0] if lines else "")


def row(root: Path, path: Path) -> tuple[str, list[str]]:
    """(outcome, the table's cells) for one script."""
    from mtk.launcher.megatron_import.verdict import judge

    from mtk.exitcodes import BadInput

    rel = str(path.relative_to(root))
    text = path.read_text(encoding="utf-8", errors="replace")
    try:
        verdict = judge(text, rel)
    except BadInput as exc:
        reason = str(exc).removeprefix(f"{rel}: ").split("; mtk trains megatron-core's GPTModel")[0]
        return "refused: script", [rel, "—", "2", "—", "—", _cell(reason)]
    imported = verdict.imported
    counts = f"{len(imported.honoured)} / {len(imported.ignored)} / {len(verdict.blocking)}"
    entry = (imported.entry.rsplit("/", 1)[-1] or "argument list")
    if verdict.blocking:
        dropped = judge(text, rel, allow={f for f, _ in verdict.blocking})
        after = "validates" if not dropped.problems else _cell(_first_problem(dropped.problems), 90)
        names = ", ".join(dict.fromkeys(f.split(" ")[0] for f, _ in verdict.blocking))
        return "refused: flags", [rel, entry, "2", counts, f"with those dropped: {after}", _cell(f"refused: {names}")]
    if verdict.problems:
        return "does not validate", [rel, entry, "2", counts, _cell(_first_problem(verdict.problems), 90), ""]
    return "imports", [rel, entry, "0", counts, "validates", ""]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkout", type=Path, help="a Megatron-LM checkout (or an extracted examples/ tree's parent)")
    args = parser.parse_args(argv)
    root = args.checkout.resolve()
    scripts = sorted((root / "examples").rglob("*.sh"))
    if not scripts:
        print(f"no examples/**/*.sh under {root}", file=sys.stderr)
        return 2
    outcomes: Counter[str] = Counter()
    print("| script | entry point | exit | flags honoured / ignored / refused | validate | why not |")
    print("|---|---|---|---|---|---|")
    for path in scripts:
        outcome, cells = row(root, path)
        outcomes[outcome] += 1
        print("| " + " | ".join(c if i else f"`{c}`" for i, c in enumerate(cells)) + " |")
    print()
    print(f"{len(scripts)} scripts: " + ", ".join(f"{n} {what}" for what, n in sorted(outcomes.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
