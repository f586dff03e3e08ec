"""The README's analyze-kernel section runs as shown: the `$ fakegpu analyze-kernel ...` example prints exactly
what the README shows (its files are committed under examples/analyze-kernel)."""

from __future__ import annotations

import pytest

from tests.readme_examples import examples, printed

HEADING = "## What do these kernels need? `analyze-kernel`"
EXAMPLES = examples(HEADING, "analyze-kernel")


def test_the_section_has_its_example():
    assert [cmd for cmd, _ in EXAMPLES] == [
        "fakegpu analyze-kernel --profile a100 examples/analyze-kernel/scale.cu examples/analyze-kernel/scale.ptx"]


@pytest.mark.parametrize("command,shown", EXAMPLES, ids=[c for c, _ in EXAMPLES])
def test_each_example_prints_what_the_readme_shows(command, shown):
    assert printed(command) == shown
