"""The pages link what is there (#52): every relative link in README.md, docs/*.md, benchmarks/README.md and
containers/README.md resolves to a file of this repository, and a ``#anchor`` to a heading of the page it names
(GitHub's slugs); a path the text cites as ``../...`` is a file of the repository (a clone has nothing else)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "benchmarks" / "README.md",
         ROOT / "containers" / "README.md"]
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
CITED_UP = re.compile(r"`(\.\./[^`\s]+)`")
FENCE = re.compile(r"^(```|~~~)")


def _prose(text: str) -> str:
    """The page without its fenced code blocks (a link-like text in a shell example is no link)."""
    out, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        out.append("" if fenced else line)
    return "\n".join(out)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation dropped (hyphens and underscores kept), spaces to '-'."""
    text = re.sub(r"`|\*\*|\*|<[^>]+>", "", heading).strip().lower()
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link in a heading: its text
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    for line in _prose(page.read_text()).splitlines():
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading:
            base = slug(heading.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
        found.update(re.findall(r"<a\s+(?:name|id)=\"([^\"]+)\"", line))
    return found


def broken(page: Path, root: Path = ROOT) -> list[str]:
    """What on ``page`` points nowhere: a missing file, one outside ``root``, an anchor no heading makes."""
    text = _prose(page.read_text())
    out = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # https:, mailto:, ...
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page.resolve()
        if not dest.is_relative_to(root.resolve()):
            out.append(f"{target}: outside the repository")
        elif not dest.exists():
            out.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            out.append(f"{target}: no heading makes #{anchor} in {dest.relative_to(root.resolve())}")
    for cited in CITED_UP.findall(text):
        where = [(base / cited).resolve() for base in (page.parent, root)]
        if not any(w.is_relative_to(root.resolve()) and w.exists() for w in where):
            out.append(f"`{cited}`: cites a file that is not in the repository")
    return out


def test_every_relative_link_and_anchor_resolves():
    found = {str(p.relative_to(ROOT)): b for p in PAGES if (b := broken(p))}
    assert found == {}


def test_the_checker_sees_each_kind_of_broken_link(tmp_path):
    repo = tmp_path / "repo"
    (repo / "docs").mkdir(parents=True)
    (repo / "docs" / "there.md").write_text("# Exit codes\n\n## `cluster.secrets`\n\n## Exit codes\n")
    page = repo / "docs" / "page.md"
    page.write_text(
        "See [megatron-lm.md](megatron-lm.md), [there](there.md#exit-codes), [twice](there.md#exit-codes-1),\n"
        "[field](there.md#clustersecrets), [gone](there.md#nowhere), [up](../../elsewhere.md), [web](https://x.y/z)\n"
        "and [self](#top). One H100, see `../shared/notes/gpu-device.md`; `../docs/there.md` is fine.\n"
        "```sh\necho '[not a link](nowhere.md)'\n```\n# Top\n")
    assert broken(page, repo) == [
        "megatron-lm.md: no such file",
        "there.md#nowhere: no heading makes #nowhere in docs/there.md",
        "../../elsewhere.md: outside the repository",
        "`../shared/notes/gpu-device.md`: cites a file that is not in the repository",
    ]


def test_slugs_follow_githubs_rule():
    assert slug("The CLI with the megatron-core verdict cache vs TorchX (`cli_startup.py`)") == (
        "the-cli-with-the-megatron-core-verdict-cache-vs-torchx-cli_startuppy")
    assert slug("`cluster.slurm.data`") == "clusterslurmdata" and slug("Exit codes") == "exit-codes"
