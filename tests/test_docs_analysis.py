"""docs/analysis.md runs as written: every python block, in order, in one
namespace, from a directory that has the repository's traces."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "analysis.md"


def test_the_analysis_walkthrough_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)
    assert len(blocks) >= 5
    os.symlink(ROOT / "traces", tmp_path / "traces")
    monkeypatch.chdir(tmp_path)
    scope: dict[str, Any] = {}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), scope)
    assert (tmp_path / "report.html").stat().st_size > 10_000
    assert (tmp_path / "itl.svg").read_text(encoding="utf-8").startswith("<svg")
