"""The README's plan-serving section runs as shown: each `$ fakegpu plan-serving ...` block prints exactly what the
README shows (the example folder holds only a config.json, so the plan is deterministic)."""

from __future__ import annotations

import pytest

from tests.readme_examples import examples, printed

EXAMPLES = examples("## Serving capacity with vLLM: `plan-serving`", "plan-serving")


def test_the_section_has_its_examples():
    assert len(EXAMPLES) == 2
    assert all("examples/plan-serving/llama-3.1-8b" in cmd for cmd, _ in EXAMPLES)


@pytest.mark.parametrize("command,shown", EXAMPLES, ids=[c for c, _ in EXAMPLES])
def test_each_example_prints_what_the_readme_shows(command, shown):
    assert printed(command) == shown
