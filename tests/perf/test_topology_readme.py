"""The README's simulate-topology section runs as shown: each `$ fakegpu simulate-topology ...` block's output is
what the command prints today (the model is deterministic: no timing, no randomness)."""

from __future__ import annotations

import pytest

from tests.readme_examples import examples, printed

EXAMPLES = examples("## How fast do collectives run? `simulate-topology`", "simulate-topology")


def test_the_section_has_its_examples():
    assert len(EXAMPLES) == 3
    assert any("--model-dir" in cmd for cmd, _ in EXAMPLES)
    assert any("--fabric-file examples/topology/two-hgx-h100.yaml" in cmd for cmd, _ in EXAMPLES)


@pytest.mark.parametrize("command,shown", EXAMPLES, ids=[c for c, _ in EXAMPLES])
def test_each_example_prints_what_the_readme_shows(command, shown):
    assert printed(command) == shown
