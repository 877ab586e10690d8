"""What the vLLM job's parts share: its output, its checks and the
`specreplay` command line."""

from __future__ import annotations

import subprocess
import sys


def say(msg: str) -> None:
    print(msg, flush=True)


failures: list[str] = []


def check(ok: bool, what: str) -> None:
    say(("  ok    " if ok else "  FAIL  ") + what)
    if not ok:
        failures.append(what)


def specreplay_cli(*args: str) -> None:
    """A `specreplay` command as a user types it; its output is shown."""
    say("$ specreplay " + " ".join(args))
    out = subprocess.run([sys.executable, "-m", "specreplay", *args], capture_output=True, text=True, timeout=600)
    for line in (out.stdout + out.stderr).splitlines()[-12:]:
        say("    " + line)
    if out.returncode != 0:
        raise SystemExit(f"specreplay {args[0]} exited with {out.returncode}")
