"""The import contracts of pyproject.toml (`lint-imports`, run by `make lint`):
they pass on the tree, and fail on an import up a layer, on a circle between
two packages, on a circle between two modules of one package (even an
import inside a function or under `TYPE_CHECKING`), and on an import up the
analysis package's own floors (docs/architecture.md)."""

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
    assert "3 kept, 0 broken" in result.stdout


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


def _append(path: Path, text: str) -> None:
    path.write_text(path.read_text() + text)


@pytest.mark.parametrize("how", ["top", "function", "type_checking"])
def test_a_circle_inside_one_package_fails(tmp_path: Path, how: str) -> None:
    # trace.shaping imports trace.records; records importing shaping back
    # closes a circle of two modules of one package, which the layers
    # contract (packages only) does not see. Hidden in a function or under
    # TYPE_CHECKING, it is still a circle.
    src = _copy(tmp_path)
    line = {
        "top": "\nfrom specreplay.trace import shaping  # noqa\n",
        "function": "\n\ndef _late() -> None:\n    from specreplay.trace import shaping  # noqa\n",
        "type_checking": "\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from specreplay.trace import shaping  # noqa\n",
    }[how]
    _append(src / "specreplay" / "trace" / "records.py", line)
    result = _lint(src)
    assert result.returncode != 0
    assert "no import circle inside a package BROKEN" in result.stdout
    assert "No cycles are allowed in specreplay.trace" in result.stdout


def test_a_circle_inside_analysis_fails(tmp_path: Path) -> None:
    # The circle issue 23 found: a point's rows reaching back up for the analysis.
    src = _copy(tmp_path)
    _append(src / "specreplay" / "analysis" / "point.py", "\n\ndef _late() -> None:\n    from specreplay.analysis.analyse import analyse  # noqa\n")
    result = _lint(src)
    assert result.returncode != 0
    assert "No cycles are allowed in specreplay.analysis" in result.stdout
    assert "specreplay.analysis.point is not allowed to import specreplay.analysis.analyse" in result.stdout

