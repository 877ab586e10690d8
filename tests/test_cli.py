import click
import pytest
from click.testing import CliRunner

import specreplay
from specreplay.cli import COMMANDS, cli
from specreplay.errors import EXIT_INTERRUPTED


def test_version_matches_the_extension() -> None:
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"specreplay, version {specreplay.__version__}"


def test_help_lists_commands() -> None:
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0
    assert "Usage:" in result.output


@click.command("stuck")
def _interrupted_command() -> None:
    raise KeyboardInterrupt


def test_ctrl_c_in_any_command_exits_130_without_clicks_aborted(monkeypatch: pytest.MonkeyPatch) -> None:
    # e.g. Ctrl-C while `replay` still reads its config files, or in `compare`.
    monkeypatch.setitem(COMMANDS, "stuck", (__name__, "_interrupted_command", "raises KeyboardInterrupt"))
    result = CliRunner().invoke(cli, ["stuck"])
    assert result.exit_code == EXIT_INTERRUPTED == 130
    assert "interrupted" in result.output and "Aborted" not in result.output
