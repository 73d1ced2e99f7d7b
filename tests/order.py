"""The order the tests of each module run in: as written (what CI runs), reversed, or shuffled by a seed.

`GRS_TEST_ORDER=reverse`, or `GRS_TEST_ORDER=<integer seed>`, shows whether a test depends on what ran
before it in its module. Modules keep their order and each stays in one piece, so a module-scoped
fixture still starts once. Pure: the hook in tests/conftest.py applies it. TEST HARNESS ONLY.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Hashable, Sequence
from typing import TypeVar

VARIABLE = "GRS_TEST_ORDER"
T = TypeVar("T")


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
