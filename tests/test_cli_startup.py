"""`specreplay --help` imports neither the extension nor pandas, pyarrow or
numpy (the command modules are imported when a command is used: cli.COMMANDS).
Its time is measured by bench/startup.py, not here."""

from __future__ import annotations

import json
import subprocess
import sys

import click
import pytest

from specreplay.cli import COMMANDS, cli

HEAVY = ("pandas", "pyarrow", "numpy", "rich", "specreplay._core", "specreplay.commands")


def modules_after(code: str) -> set[str]:
    probe = f"import sys\n{code}\nimport json; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True).stdout
    return set(json.loads(out.strip().splitlines()[-1]))


def heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in HEAVY or any(m == h or m.startswith(h + ".") for h in HEAVY))


@pytest.mark.parametrize("args", [["--help"], [], ["--version"]], ids=["help", "bare", "version"])
def test_the_top_level_help_imports_nothing_heavy(args: list[str]) -> None:
    code = ("from specreplay.cli import cli\n"
            f"try:\n    cli({args!r}, prog_name='specreplay')\nexcept SystemExit:\n    pass")
    loaded = modules_after(code)
    assert "specreplay.cli" in loaded
    assert heavy(loaded) == []


def test_a_command_still_imports_what_it_needs() -> None:
    # The check above can fail: a command's own help does load its module.
    code = ("from specreplay.cli import cli\n"
            "try:\n    cli(['replay', '--help'], prog_name='specreplay')\nexcept SystemExit:\n    pass")
    loaded = modules_after(code)
    assert "specreplay.commands.replay" in loaded and "pyarrow" in loaded


def test_each_listed_help_line_is_the_commands_own() -> None:
    ctx = click.Context(cli)
    for name, (_module, _attribute, text) in COMMANDS.items():
        command = cli.get_command(ctx, name)
        assert command is not None and command.name == name
        assert text == command.get_short_help_str(limit=10**6), name
    assert cli.get_command(ctx, "nope") is None


def test_the_package_api_is_still_there_and_replay_is_the_function() -> None:
    import specreplay
    import specreplay.run.replay  # the submodule does not take the function's name

    assert callable(specreplay.replay) and specreplay.replay.__module__ == "specreplay.run.replay"
    assert specreplay.load.__name__ == "load" and isinstance(specreplay.__version__, str)
    with pytest.raises(AttributeError):
        specreplay.nope  # noqa: B018
