"""Every relative link in the repository's Markdown resolves: the file exists,
and a `#anchor` names a heading of the file it points to (GitHub's slugs).

Docs move (docs/benchmarks.md's log went to bench/notebook.md); a link that
points nowhere is a reader sent nowhere, so it fails here, not on GitHub.
"""

from __future__ import annotations

import re
import subprocess
import unicodedata
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SKIP_DIRS = {".git", ".venv", "target", "node_modules", "results", ".pytest_cache"}
LINK = re.compile(r"(?<!\!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"")


def markdown_files() -> list[Path]:
    """The project's own Markdown: what git tracks or would (not what it
    ignores, such as the vLLM job's .venv-vllm with vLLM's own docs); every
    file under ROOT outside SKIP_DIRS where this is not a git checkout."""
    try:
        listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z", "*.md"],
                                cwd=ROOT, capture_output=True, check=True).stdout.decode()
    except (OSError, subprocess.CalledProcessError):
        return sorted(p for p in ROOT.rglob("*.md") if not SKIP_DIRS.intersection(p.relative_to(ROOT).parts[:-1]))
    return sorted(ROOT / name for name in listed.split("\0") if name and (ROOT / name).is_file()
                  and not SKIP_DIRS.intersection(Path(name).parts[:-1]))


def prose_lines(path: Path) -> list[tuple[int, str]]:
    """The file's lines outside fenced code blocks, numbered from 1."""
    lines, fenced = [], False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append((number, line))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation
    dropped (letters, digits, `-`, `_` and spaces kept), spaces to `-`."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text
    text = text.replace("`", "").lower()
    kept = "".join(
        c for c in text if c in "-_ " or unicodedata.category(c)[0] in "LN"
    )
    return kept.replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    seen: dict[str, int] = {}
    out = set()
    for _, line in prose_lines(path):
        out.update(HTML_ANCHOR.findall(line))
        m = HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return frozenset(out)


def broken_links(path: Path) -> list[str]:
    problems = []
    for number, line in prose_lines(path):
        for target in LINK.findall(re.sub(r"`[^`]*`", "", line)):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            file_part, _, anchor = target.partition("#")
            dest = path if not file_part else (path.parent / file_part).resolve()
            where = f"{path.relative_to(ROOT)}:{number}: ({target})"
            if not dest.exists():
                problems.append(f"{where} no such file")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                problems.append(f"{where} no heading #{anchor} in {dest.relative_to(ROOT)}")
    return problems


def test_the_slugs_are_githubs() -> None:
    assert slug("Figures at the round's head (`8266a8c`, 2026-12-03)") == (
        "figures-at-the-rounds-head-8266a8c-2026-12-03"
    )
    assert slug("`response`: what came back (written by `specreplay capture`)") == (
        "response-what-came-back-written-by-specreplay-capture"
    )
    assert slug("Capacity: what rate holds p99 TTFT < 2 s?") == "capacity-what-rate-holds-p99-ttft--2-s"


def test_a_broken_link_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    (tmp_path / "a.md").write_text("# Top\n\n## Top\n[ok](#top-1) [ok](b.md#there) [bad](b.md#nowhere) [gone](c.md)\n"
                                   "```\n[in code](d.md)\n```\n")
    (tmp_path / "b.md").write_text("## There\n")
    assert broken_links(tmp_path / "a.md") == [
        "a.md:4: (b.md#nowhere) no heading #nowhere in b.md",
        "a.md:4: (c.md) no such file",
    ]


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(path: Path) -> None:
    assert broken_links(path) == []
