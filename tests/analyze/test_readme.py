"""The README's analyze-repo section runs as shown: each `$ fakegpu analyze-repo ...` block prints exactly what the
README shows (the report of examples/analyze-repo is deterministic: no timing in the text output)."""

from __future__ import annotations

import pytest

from tests.readme_examples import examples, printed

EXAMPLES = examples("## What in this repository needs a GPU? `analyze-repo`", "analyze-repo")


def test_the_section_has_its_example():
    assert [cmd for cmd, _ in EXAMPLES] == ["fakegpu analyze-repo examples/analyze-repo"]


@pytest.mark.parametrize("command,shown", EXAMPLES, ids=[c for c, _ in EXAMPLES])
def test_each_example_prints_what_the_readme_shows(command, shown):
    assert printed(command) == shown
