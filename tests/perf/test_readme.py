"""The README's estimate-roofline section runs as shown: each `$ fakegpu estimate-roofline ...` block's output is
what the command prints today (the roofline is deterministic: no timing, no randomness)."""

from __future__ import annotations

import pytest

from tests.readme_examples import examples, printed

EXAMPLES = examples("## How fast will it run? `estimate-roofline`", "estimate-roofline")


def test_the_section_has_its_examples():
    assert len(EXAMPLES) == 3
    assert any("--ops examples/roofline/ops.yaml" in cmd for cmd, _ in EXAMPLES)


@pytest.mark.parametrize("command,shown", EXAMPLES, ids=[c for c, _ in EXAMPLES])
def test_each_example_prints_what_the_readme_shows(command, shown):
    assert printed(command) == shown
