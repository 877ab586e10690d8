"""How `make test` gets the report tests' browser (tests/browser.py): found,
installed when root with apt, skipped only on request and never in CI, and
otherwise one line saying what to run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import browser

SCRIPT = Path(__file__).with_name("browser.py")


def test_plan() -> None:
    assert browser.plan("/usr/bin/chromium", {}, is_root=False, has_apt=False) == "present"
    assert browser.plan(None, {}, is_root=True, has_apt=True) == "install"
    assert browser.plan(None, {}, is_root=False, has_apt=True) == "missing"
    assert browser.plan(None, {}, is_root=True, has_apt=False) == "missing"
    skip = {browser.SKIP_VAR: "1"}
    assert browser.plan(None, skip, is_root=False, has_apt=False) == "skip"
    # In CI the switch is ignored: the browser is installed, or the run stops.
    assert browser.plan(None, {**skip, "CI": "true"}, is_root=True, has_apt=True) == "install"
    assert browser.plan(None, {**skip, "CI": "true"}, is_root=False, has_apt=False) == "missing"


def test_missing_message_is_one_line_with_the_command() -> None:
    user = browser.missing_message(is_root=False, has_apt=True)
    assert "\n" not in user and "sudo apt-get install chromium" in user and browser.SKIP_VAR in user
    assert "sudo" not in browser.missing_message(is_root=True, has_apt=True)
    assert "package manager" in browser.missing_message(is_root=False, has_apt=False)


def run_script(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    # PATH holds only tmp_path: no apt-get, and chromium only if the test put one there.
    environ = {k: v for k, v in os.environ.items() if k not in ("CI", browser.SKIP_VAR)}
    environ.update(PATH=str(tmp_path), **env)
    return subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, env=environ, timeout=30)


def test_script_stops_with_one_line_when_it_cannot_install(tmp_path: Path) -> None:
    result = run_script(tmp_path)
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and "Chromium" in result.stderr and "package manager" in result.stderr
    assert run_script(tmp_path, **{browser.SKIP_VAR: "1"}).returncode == 0
    assert run_script(tmp_path, **{browser.SKIP_VAR: "1", "CI": "true"}).returncode == 1


def test_script_finds_an_installed_browser(tmp_path: Path) -> None:
    fake = tmp_path / "chromium-browser"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    result = run_script(tmp_path)
    assert (result.returncode, result.stderr) == (0, "")
