"""Invoking the `wattline` command in-process, and the shape every user-facing error must have."""

from click.testing import CliRunner

from pipeline.cli import main


def invoke(*args, env=None):
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


def one_line_error(result, *fragments):
    """Exit 2, exactly one line starting with ``error: ``, no traceback, each fragment in it."""
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in lines[0]
