"""The README's replay-trace section runs as shown: each `$ fakegpu replay-trace ...` block's output is what the
command prints today (the replay is deterministic: the traces are committed, nothing is timed)."""

from __future__ import annotations

import shlex

import pytest

from tests.perf.conftest import REPO, runner


def _examples() -> list[tuple[str, str]]:
    readme = (REPO / "README.md").read_text()
    start = readme.index("## Where did a profiled step's time go? `replay-trace`")
    section = readme[start:readme.index("\n## ", start + 1)].splitlines()
    out = []
    for i, line in enumerate(section):
        if line.startswith("    $ fakegpu replay-trace "):
            shown = []
            for later in section[i + 1:]:
                if later and not later.startswith("    "):
                    break
                shown.append(later[4:])
            out.append((line[len("    $ "):], "\n".join(shown).strip("\n")))
    return out


EXAMPLES = _examples()


def test_the_section_has_its_example():
    assert len(EXAMPLES) == 1 and "tests/data/traces/ddp-2rank" in EXAMPLES[0][0]


@pytest.mark.parametrize("command,shown", EXAMPLES, ids=[c for c, _ in EXAMPLES])
def test_each_example_prints_what_the_readme_shows(command, shown, monkeypatch):
    from fakegpu.cli.main import app

    monkeypatch.chdir(REPO)
    result = runner.invoke(app, shlex.split(command)[1:])
    assert result.exit_code == 0, result.output
    printed = "\n".join(line.rstrip() for line in result.stdout.splitlines()).strip("\n")
    assert printed == shown
