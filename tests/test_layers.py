"""The layers contract of pyproject.toml (`lint-imports`, run by `make lint`):
it passes on the tree, and fails on an import up a layer and on a circle
between two packages (docs/architecture.md)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINT = Path(sys.executable).parent / "lint-imports"

pytestmark = pytest.mark.skipif(not LINT.exists(), reason="import-linter is not installed (the test extra has it)")


def _lint(src: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    return subprocess.run(
        [str(LINT), "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
        cwd=src, env=env, capture_output=True, text=True, timeout=120,
    )


def _copy(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    shutil.copytree(ROOT / "python" / "specreplay", src / "specreplay", ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    return src


def test_the_tree_keeps_its_layers() -> None:
    result = _lint(ROOT / "python")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 kept, 0 broken" in result.stdout


def test_an_import_up_a_layer_fails(tmp_path: Path) -> None:
    src = _copy(tmp_path)
    config = src / "specreplay" / "settings" / "config.py"
    config.write_text(config.read_text() + "\nfrom specreplay.present import console  # noqa\n")
    result = _lint(src)
    assert result.returncode != 0
    assert "specreplay.settings is not allowed to import specreplay.present" in result.stdout


def test_a_circle_between_two_packages_fails(tmp_path: Path) -> None:
    src = _copy(tmp_path)
    # trace already imports results (shaping's request schema): results
    # importing trace closes a circle, whichever way the layers list them.
    schema = src / "specreplay" / "results" / "schema.py"
    schema.write_text(schema.read_text() + "\nfrom specreplay.trace import records  # noqa\n")
    result = _lint(src)
    assert result.returncode != 0
    assert "specreplay.results is not allowed to import specreplay.trace" in result.stdout
