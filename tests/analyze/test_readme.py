"""The README's analyze-repo section runs as shown: each `$ fakegpu analyze-repo ...` block prints exactly what the
README shows (the report of examples/analyze-repo is deterministic: no timing in the text output)."""

from __future__ import annotations

import shlex

import pytest

from tests.analyze.conftest import REPO, runner


def _examples() -> list[tuple[str, str]]:
    readme = (REPO / "README.md").read_text()
    start = readme.index("## What in this repository needs a GPU? `analyze-repo`")
    section = readme[start:readme.index("\n## ", start + 1)].splitlines()
    out = []
    for i, line in enumerate(section):
        if line.startswith("    $ fakegpu analyze-repo "):
            shown = []
            for later in section[i + 1:]:
                if later and not later.startswith("    "):
                    break
                shown.append(later[4:])
            out.append((line[len("    $ "):], "\n".join(shown).strip("\n")))
    return out


EXAMPLES = _examples()


def test_the_section_has_its_example():
    assert [cmd for cmd, _ in EXAMPLES] == ["fakegpu analyze-repo examples/analyze-repo"]


@pytest.mark.parametrize("command,shown", EXAMPLES, ids=[c for c, _ in EXAMPLES])
def test_each_example_prints_what_the_readme_shows(command, shown, monkeypatch):
    from fakegpu.cli.main import app

    monkeypatch.chdir(REPO)
    result = runner.invoke(app, shlex.split(command)[1:])
    assert result.exit_code == 0, result.output
    printed = "\n".join(line.rstrip() for line in result.stdout.splitlines()).strip("\n")
    assert printed == shown
