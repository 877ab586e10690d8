"""The headless browser the report tests drive (Debian's `chromium`), and how
`make test` gets it: run as a script (the Makefile does, before any test), it
installs Chromium when it is missing and it may (root, with apt-get), and
otherwise says in one line what to run.

`SPECREPLAY_NO_BROWSER=1` skips the two browser tests instead, except in CI
(`CI` set), where they must run: a CI run never skips them silently."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping

#: Debian and Ubuntu name the binary differently.
NAMES = ("chromium", "chromium-browser")
SKIP_VAR = "SPECREPLAY_NO_BROWSER"
INSTALL = ("apt-get", "install", "-y", "-qq", "chromium")


def find() -> str | None:
    """The browser's path, or None."""
    return next((path for name in NAMES if (path := shutil.which(name)) is not None), None)


def may_skip(environ: Mapping[str, str]) -> bool:
    """The user asked to skip the browser tests, and this is not CI."""
    return environ.get(SKIP_VAR) == "1" and not environ.get("CI")


def missing_message(is_root: bool, has_apt: bool) -> str:
    """One line: what to run to get the browser (or to skip its tests)."""
    if has_apt:
        get = "apt-get install chromium" if is_root else "sudo apt-get install chromium"
    else:
        get = "install Chromium with your package manager (the binary must be on PATH as chromium)"
    return f"make test: the report tests need a headless Chromium: {get}, or set {SKIP_VAR}=1 to skip them (not in CI)"


def plan(found: str | None, environ: Mapping[str, str], is_root: bool, has_apt: bool) -> str:
    """What `make test` does about the browser: "present", "skip", "install"
    or "missing" (stop with `missing_message`)."""
    if found is not None:
        return "present"
    if may_skip(environ):
        return "skip"
    if is_root and has_apt:
        return "install"
    return "missing"


def ensure() -> int:
    """The Makefile's step: 0 when the browser tests can run (or are skipped on request)."""
    is_root, has_apt = os.geteuid() == 0, shutil.which("apt-get") is not None
    action = plan(find(), os.environ, is_root, has_apt)
    if action == "install":
        print("make test: installing chromium with apt-get (the report tests drive it)", file=sys.stderr, flush=True)
        quiet = {"stdout": subprocess.DEVNULL}
        subprocess.run(["apt-get", "update", "-qq"], check=False, **quiet)
        subprocess.run(INSTALL, check=False, env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"}, **quiet)
        action = "present" if find() is not None else "missing"
    if action == "missing":
        print(missing_message(is_root, has_apt), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(ensure())
