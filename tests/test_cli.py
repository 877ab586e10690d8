from click.testing import CliRunner

import specreplay
from specreplay.cli import cli


def test_version_matches_the_extension() -> None:
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"specreplay, version {specreplay.__version__}"


def test_help_lists_commands() -> None:
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0
    assert "Usage:" in result.output
