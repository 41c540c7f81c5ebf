"""Every relative link in README.md and docs/*.md resolves: the file exists, and a `#anchor` into a Markdown file
names one of its headings (GitHub's slugs). Links inside code blocks and inline code are not links."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DOCS = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md")])

_FENCE = re.compile(r"^(```|~~~)")
_INLINE_CODE = re.compile(r"(`+).*?\1")
_LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def _prose_lines(text: str):
    """(line number, line) outside fenced code blocks."""
    fenced = False
    for n, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if not fenced:
            yield n, line


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lower case, punctuation removed, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = re.sub(r"[`*_]", lambda m: "_" if m.group(0) == "_" else "", text)
    text = text.strip().lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for _, line in _prose_lines(path.read_text()):
        m = _HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def broken_links(path: Path) -> list[str]:
    """Each relative link of `path` that does not resolve, as 'line N: target (why)'."""
    bad = []
    for n, line in _prose_lines(path.read_text()):
        for target in _LINK.findall(_INLINE_CODE.sub("", line)):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, file: ...
                continue
            file_part, _, anchor = target.partition("#")
            dest = (path.parent / file_part).resolve() if file_part else path
            if not dest.exists():
                bad.append(f"line {n}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                bad.append(f"line {n}: {target} (no heading #{anchor} in {dest.name})")
    return bad


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(doc):
    assert broken_links(doc) == [], f"{doc.relative_to(REPO)} links to what does not exist"


def test_the_checker_finds_what_is_broken(tmp_path):
    (tmp_path / "other.md").write_text("# Title\n\n## Views on Spark\n\n## Views on Spark\n\n```\n## not a heading\n```\n")
    doc = tmp_path / "doc.md"
    doc.write_text(
        "[ok](other.md) [ok](other.md#views-on-spark) [ok](other.md#views-on-spark-1) [ok](#a-b)\n"
        "[gone](missing.md) [bad anchor](other.md#not-a-heading) [web](https://example.com/x.md)\n"
        "`[code](nowhere.md)`\n"
        "```\n[fenced](nowhere.md)\n```\n"
        "## A, b\n"
    )
    assert broken_links(doc) == [
        "line 2: missing.md (no such file)",
        "line 2: other.md#not-a-heading (no heading #not-a-heading in other.md)",
    ]
    assert slug("How DuckDB reads the bucket: s3fs (fsspec) vs httpfs") == "how-duckdb-reads-the-bucket-s3fs-fsspec-vs-httpfs"
    assert slug("The record kinds' export (`shopsimrl-v4`, issue 10)") == "the-record-kinds-export-shopsimrl-v4-issue-10"
