"""The README's shown commands, for tests that hold a section to them: each `    $ fakegpu CMD ...` line of a
section (from its `## ` heading to the next) with the indented lines under it, which are what the command
prints."""

from __future__ import annotations

import shlex

from typer.testing import CliRunner

from tests.conftest import REPO


def examples(heading: str, command: str) -> list[tuple[str, str]]:
    """(command line, shown output) of every `$ fakegpu <command> ...` in the section whose heading line starts
    with `heading`."""
    readme = (REPO / "README.md").read_text()
    start = readme.index(heading)
    section = readme[start:readme.index("\n## ", start + 1)].splitlines()
    out = []
    for i, line in enumerate(section):
        if line.startswith(f"    $ fakegpu {command} "):
            shown = []
            for later in section[i + 1:]:
                if later and not later.startswith("    "):
                    break
                shown.append(later[4:])
            out.append((line[len("    $ "):], "\n".join(shown).strip("\n")))
    return out


def printed(command: str) -> str:
    """What `command` (a `fakegpu ...` line, run from the checkout) prints, trailing spaces and blank edge lines
    dropped as the README shows output; fails when it exits non-zero."""
    import os

    from fakegpu.cli.main import app

    here = os.getcwd()
    os.chdir(REPO)
    try:
        result = CliRunner().invoke(app, shlex.split(command)[1:])
    finally:
        os.chdir(here)
    assert result.exit_code == 0, result.output
    return "\n".join(line.rstrip() for line in result.stdout.splitlines()).strip("\n")
