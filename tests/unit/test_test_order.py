"""The suite's own order: the tests marked slow run first (ADR 0027)."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

#: A test module of marked and unmarked tests, in this order.
MODULE = """
import pytest

def test_one(): pass

@pytest.mark.slow
def test_two(): pass

def test_three(): pass

@pytest.mark.slow
def test_four(): pass
"""


def collected(pytester: pytest.Pytester) -> list[str]:
    """The names of the tests as the root conftest's hook orders them."""
    pytester.makeini(
        "[pytest]\nmarkers = slow: long tests\nasyncio_default_fixture_loop_scope = function\n"
    )
    pytester.makeconftest("from tests.conftest import pytest_collection_modifyitems  # noqa\n")
    pytester.makepyfile(test_a=MODULE)
    lines = pytester.runpytest("--collect-only", "-q", "-p", "no:cacheprovider").outlines
    return [line.split("::")[-1] for line in lines if "::" in line]


def test_slow_tests_come_first_and_each_group_keeps_its_order(pytester: pytest.Pytester) -> None:
    assert collected(pytester) == ["test_two", "test_four", "test_one", "test_three"]
