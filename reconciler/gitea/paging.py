"""Walking one of Gitea's paged lists, and telling whether the rows read are all of them.

Owns: the page rule, the runaway guard and the completeness verdict. Pages are `page=1..` with
`limit=50` (Gitea caps `limit` at 50 and returns every row when `page` is omitted).

- Where Gitea sends paging headers (`X-Total-Count` and `Link`: 1.26 on `/actions/jobs`, every
  release on `/users/{u}/repos`), `Link: rel="next"` says which page follows; no `rel="next"` means
  the last page. Only its page number is used: Gitea builds the link from its ROOT_URL, which the
  poller may not reach, and the token never goes to a host a header names.
- Otherwise (1.25 jobs, every runners list) a short page is the last, as is the page that brings
  the rows read up to the body's `total_count`.
- A listing is complete when every page was read (not cut off by MAX_PAGES) and, where Gitea gave a
  total (`X-Total-Count`, or the body's `total_count`), every page gave the same total, no row id
  came twice and the distinct rows read number exactly that total. Rows that moved between pages
  (a row inserted or removed before the page being read, a row that changed place) show up as a
  total that changed or a row read twice; what no count can show is a removal and an insertion
  between two pages that leave the total unchanged. Only a single short page (one SELECT) is
  free of that.
Must not parse rows beyond their `id`: the caller validates them.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

PAGE_SIZE = 50
MAX_PAGES = 200  # 10,000 rows per list per poll: a runaway guard, not a limit anyone should meet
_LINK = re.compile(r'<([^>]*)>\s*;\s*rel="?([^",;]+)"?')

Fetch = Callable[[int], Awaitable[tuple[Any, Mapping[str, str]]]]  # page -> (decoded body, headers)


@dataclass(frozen=True, slots=True)
class Pages:
    """The decoded bodies of a list's pages, and whether they hold every row."""

    bodies: list[Any]
    complete: bool


@dataclass
class _Tally:
    ids: set[Any] = field(default_factory=set)
    read: int = 0
    totals: set[int] = field(default_factory=set)
    broken: bool = False  # a page Gitea would not send: an unreadable total or next link, a row without id

    def add(self, rows: list[Any], body: Any, headers: Mapping[str, str]) -> None:
        for row in rows:
            row_id = row.get("id") if isinstance(row, dict) else None
            self.broken |= row_id is None
            self.ids.add(row_id)
        self.read += len(rows)
        sent = [headers.get("X-Total-Count"), body.get("total_count") if isinstance(body, dict) else None]
        for total in sent:
            try:
                self.totals |= set() if total is None else {int(total)}
            except (TypeError, ValueError):
                self.broken = True

    def complete(self) -> bool:
        if self.broken or len(self.totals) > 1 or self.read != len(self.ids):
            return False
        return all(total == len(self.ids) for total in self.totals)


def _rows(body: Any, key: str | None) -> list[Any]:
    rows = body.get(key) if isinstance(body, dict) and key else body
    return rows if isinstance(rows, list) else []


def next_link(header: str) -> str | None:
    """The target of `rel="next"` in a Link header, if it names one."""
    for match in _LINK.finditer(header):
        if "next" in match.group(2).split():
            return match.group(1)
    return None


def _following(page: int, rows: int, headers: Mapping[str, str], tally: _Tally) -> int | None:
    """The page to read after `page`, or None when `page` was the last."""
    if "Link" in headers or "X-Total-Count" in headers:
        link = next_link(headers.get("Link", ""))
        if link is None:
            return None
        try:
            following = int(parse_qs(urlsplit(link).query)["page"][0])
        except (KeyError, ValueError):
            following = 0
        if following <= page:  # a link that does not move forward: stop, and say so
            tally.broken = True
            return None
        return following
    if rows < PAGE_SIZE or (tally.totals and len(tally.ids) >= max(tally.totals)):
        return None
    return page + 1


async def walk(fetch: Fetch, *, key: str | None) -> Pages:
    """Every page of a list, from page 1; each body holds its rows under `key`, or is the list."""
    bodies: list[Any] = []
    tally = _Tally()
    page = 1
    for _ in range(MAX_PAGES):
        body, headers = await fetch(page)
        bodies.append(body)
        rows = _rows(body, key)
        tally.add(rows, body, headers)
        following = _following(page, len(rows), headers, tally)
        if following is None:
            return Pages(bodies, tally.complete())
        page = following
    return Pages(bodies, False)  # cut off by the runaway guard
