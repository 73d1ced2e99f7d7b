"""The order the tests of each module run in: as written (what CI runs), reversed, or shuffled by a seed;
and which modules run first.

`GRS_TEST_ORDER=reverse`, or `GRS_TEST_ORDER=<integer seed>`, shows whether a test depends on what ran
before it in its module. Modules keep their order and each stays in one piece, so a module-scoped
fixture still starts once. `GRS_MODULES_FIRST="test_node.py test_workflows.py"` runs those modules
first, in that order, and the others after them as collected: .ci/run's node lane starts with the
modules that need no Helm while Helm is still being built. Pure: the hook in tests/conftest.py applies
it. TEST HARNESS ONLY.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Hashable, Sequence
from typing import TypeVar

VARIABLE = "GRS_TEST_ORDER"
FIRST = "GRS_MODULES_FIRST"
T = TypeVar("T")


def modules_first(items: Sequence[T], *, module: Callable[[T], str], first: Sequence[str]) -> list[T]:
    """`items` with those of the modules named in `first` (file names) first, in that order; each other
    item keeps its place among the rest."""
    rank = {name: i for i, name in enumerate(first)}
    return sorted(items, key=lambda item: rank.get(module(item), len(rank)))  # sorted() is stable


def arranged(items: Sequence[T], *, module: Callable[[T], Hashable], order: str) -> list[T]:
    """`items` reordered within each module as `order` says: "" as they are, "reverse", or a seed."""
    if not order:
        return list(items)
    if order != "reverse" and not order.isdigit():
        raise ValueError(f"{VARIABLE}={order!r}: expected 'reverse' or an integer seed")
    modules: dict[Hashable, list[T]] = {}
    for item in items:
        modules.setdefault(module(item), []).append(item)
    shuffle = random.Random(int(order)).shuffle if order.isdigit() else None
    out: list[T] = []
    for tests in modules.values():
        if shuffle is None:
            tests.reverse()
        else:
            shuffle(tests)
        out += tests
    return out
