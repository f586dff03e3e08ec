"""The README's replay-trace section runs as shown: each `$ fakegpu replay-trace ...` block's output is what the
command prints today (the replay is deterministic: the traces are committed, nothing is timed)."""

from __future__ import annotations

import pytest

from tests.readme_examples import examples, printed

EXAMPLES = examples("## Where did a profiled step's time go? `replay-trace`", "replay-trace")


def test_the_section_has_its_examples():
    assert len(EXAMPLES) == 2 and all("tests/data/traces/ddp-2rank" in command for command, _ in EXAMPLES)
    assert "--fabric ib-ndr400" in EXAMPLES[1][0]  # the what-if onto a fabric, priced by the topology model


@pytest.mark.parametrize("command,shown", EXAMPLES, ids=[c for c, _ in EXAMPLES])
def test_each_example_prints_what_the_readme_shows(command, shown):
    assert printed(command) == shown
