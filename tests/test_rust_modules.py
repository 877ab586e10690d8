"""tests/rust_module_circles.py, the check `make lint` runs on the Rust core:
it passes on the tree, and fails on a circle between two top-level modules
and between two of `sim`'s, however the path is written."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "rust" / "specreplay-core" / "src"
sys.path.insert(0, str(Path(__file__).resolve().parent))

import rust_module_circles as check  # noqa: E402


def test_the_core_has_no_module_circle() -> None:
    assert check.sibling_circles(SRC) == []
    assert check.main(["", str(SRC)]) == 0


def _copy(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    shutil.copytree(SRC, src)
    return src


def _append(path: Path, text: str) -> None:
    path.write_text(path.read_text(encoding="utf-8") + text, encoding="utf-8")


@pytest.mark.parametrize(
    "line",
    [
        "use crate::decode::DecodeError;",
        "use crate::{clock, decode::Dialect};",
        "fn _late() -> Option<crate::decode::Dialect> { None }",
        "use super::decode;",
    ],
)
def test_a_circle_between_top_level_modules_fails(tmp_path: Path, line: str) -> None:
    # decode uses sse; sse using decode back closes a circle.
    src = _copy(tmp_path)
    _append(src / "sse.rs", f"\n{line}\n")
    assert check.sibling_circles(src) == [["decode", "sse"]]
    assert check.main(["", str(src)]) == 1


def test_a_re_export_of_the_crate_root_counts_as_its_module(tmp_path: Path) -> None:
    # `crate::CoreError` is `error::CoreError` (lib.rs re-exports it); error uses decode.
    src = _copy(tmp_path)
    _append(src / "decode" / "json.rs", "\nfn _e() -> Option<crate::CoreError> { None }\n")
    assert check.sibling_circles(src) == [["decode", "error"]]


def test_a_circle_between_sim_modules_fails(tmp_path: Path) -> None:
    # sim::shared holds what every handler shares; a handler it names back is a circle.
    src = _copy(tmp_path)
    _append(src / "sim" / "shared.rs", "\n#[allow(unused_imports)]\nuse super::embed::Pooling;\n")
    circles = check.sibling_circles(src)
    assert len(circles) == 1 and {"sim::embed", "sim::shared"} <= set(circles[0])


def test_comments_and_strings_are_not_paths(tmp_path: Path) -> None:
    src = _copy(tmp_path)
    _append(src / "sse.rs", '\n// use crate::decode::Dialect;\nconst _X: &str = "crate::decode::Dialect";\n')
    assert check.sibling_circles(src) == []
