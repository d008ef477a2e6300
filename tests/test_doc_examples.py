"""Every example output the user docs print is what its command prints now (``validation/doc_examples.py``
lists them; ``python -m validation.doc_examples --write`` regenerates them)."""

from __future__ import annotations

import pytest

from validation.doc_examples import EXAMPLES, ROOT, block_span, stale


def test_every_example_has_its_block():
    for example in EXAMPLES:
        start, end = block_span((ROOT / example.doc).read_text(), example.command)
        assert end > start, example


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.command.split()[1] for e in EXAMPLES])
def test_the_example_output_is_current(example):
    problems = stale(example)
    assert not problems, "\n".join(problems) + "\n(regenerate: python -m validation.doc_examples --write)"
