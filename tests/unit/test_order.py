"""tests/order.py: the order the tests of each module run in (GRS_TEST_ORDER), and which modules run first
(GRS_MODULES_FIRST)."""

from __future__ import annotations

from operator import itemgetter

import pytest

from tests.order import arranged, modules_first

ITEMS = [("a", 1), ("a", 2), ("a", 3), ("b", 1), ("b", 2)]
module = itemgetter(0)


@pytest.mark.parametrize(
    ("order", "expected"),
    [
        pytest.param("", ITEMS, id="unset-as-written"),
        pytest.param("reverse", [("a", 3), ("a", 2), ("a", 1), ("b", 2), ("b", 1)], id="reverse-within-each-module"),
    ],
)
def test_the_order_within_each_module(order: str, expected: list[tuple[str, int]]) -> None:
    assert arranged(ITEMS, module=module, order=order) == expected


def test_a_seed_shuffles_within_each_module_the_same_way_every_time() -> None:
    items = [(m, n) for m in "abc" for n in range(8)]
    once = arranged(items, module=module, order="7")
    assert once == arranged(items, module=module, order="7")
    assert once != items and sorted(once) == items
    assert [m for m, _ in once] == [m for m, _ in items], "each module in one piece, in its place"


@pytest.mark.parametrize("order", ["random", "-1", "Reverse"])
def test_any_other_order_is_refused(order: str) -> None:
    with pytest.raises(ValueError, match="GRS_TEST_ORDER"):
        arranged(ITEMS, module=module, order=order)


@pytest.mark.parametrize(
    ("first", "expected"),
    [
        pytest.param([], ITEMS, id="none-named-as-collected"),
        pytest.param(["b"], [("b", 1), ("b", 2), ("a", 1), ("a", 2), ("a", 3)], id="the-named-first"),
        pytest.param(["c", "b"], [("b", 1), ("b", 2), ("a", 1), ("a", 2), ("a", 3)], id="one-not-collected"),
    ],
)
def test_the_modules_named_first_run_first_and_the_rest_as_collected(
    first: list[str], expected: list[tuple[str, int]]
) -> None:
    assert modules_first(ITEMS, module=module, first=first) == expected


def test_the_modules_named_first_keep_the_order_they_are_named_in() -> None:
    items = [(m, n) for m in "abcd" for n in range(2)]
    ordered = modules_first(items, module=module, first=["c", "a"])
    assert [m for m, _ in ordered] == list("ccaabbdd")
