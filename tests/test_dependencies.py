"""The declared dependencies say the truth: what the package imports is
declared, the pinned test server is the one installed, and the Rust and
Python versions declared are those the lock file and CI need."""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
CARGO = tomllib.loads((ROOT / "Cargo.toml").read_text())


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def test_every_third_party_import_of_the_package_is_declared() -> None:
    declared = {_name(r) for r in PYPROJECT["project"]["dependencies"]}
    optional = {_name(r) for extra in PYPROJECT["project"]["optional-dependencies"].values() for r in extra}
    dist_of = {"yaml": "pyyaml", "prometheus_client": "prometheus-client", "tomli_w": "tomli-w", "PIL": "pillow"}
    stdlib = set(sys.stdlib_module_names)
    missing = set()
    for path in (ROOT / "python" / "specreplay").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 else []
            for name in names:
                top = name.split(".")[0]
                if top in stdlib or top in ("specreplay", "__future__"):
                    continue
                dist = dist_of.get(top, top).lower().replace("_", "-")
                if dist not in declared and dist not in optional:
                    missing.add(f"{dist} ({path.relative_to(ROOT)})")
    assert not missing


def test_requires_python_is_the_version_tested() -> None:
    lower = re.match(r">=\s*3\.(\d+)", PYPROJECT["project"]["requires-python"])
    assert lower is not None
    assert sys.version_info[:2] >= (3, int(lower.group(1)))
    abi3 = CARGO["workspace"]["dependencies"]["pyo3"]["features"]
    assert f"abi3-py3{lower.group(1)}" in abi3  # the wheel's tag says the same


def test_the_pinned_llamacpp_is_the_installed_one() -> None:
    [pin] = [r for r in PYPROJECT["project"]["optional-dependencies"]["test"] if _name(r) == "xllamacpp"]
    assert pin == f"xllamacpp=={metadata.version('xllamacpp')}"


@pytest.mark.skipif(shutil.which("cargo") is None, reason="needs cargo")
def test_rust_version_is_what_the_lock_file_needs() -> None:
    out = subprocess.run(["cargo", "metadata", "--format-version", "1", "--locked", "--offline"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120, check=True).stdout
    def version(v: str) -> tuple[int, ...]:
        return tuple(int(x) for x in v.split("."))[:2]
    # wasip2 is a wasm-only dependency of getrandom, never built on a server.
    needed = max(version(p["rust_version"]) for p in json.loads(out)["packages"]
                 if p.get("rust_version") and not p["name"].startswith("wasi"))
    assert version(CARGO["workspace"]["package"]["rust-version"]) >= needed
