"""Ids by unique prefix, as git takes commits: ``burstctl events --lease 3f2a`` is enough when one lease starts so."""

from __future__ import annotations

from collections.abc import Iterable


class IdError(ValueError):
    """An unknown or ambiguous id prefix; the message names what was asked and what matched."""


def unique_prefix(prefix: str, ids: Iterable[str], what: str = "lease") -> str:
    """The one id in ``ids`` equal to ``prefix`` or starting with it; ``IdError`` when none or several do."""
    if not prefix:
        raise IdError(f"empty {what} id")
    ids = list(dict.fromkeys(ids))
    if prefix in ids:
        return prefix
    hits = [i for i in ids if i.startswith(prefix)]
    if len(hits) == 1:
        return hits[0]
    if not hits:
        raise IdError(f"no {what} id starts with {prefix!r}")
    shown = ", ".join(sorted(hits)[:5]) + (f" and {len(hits) - 5} more" if len(hits) > 5 else "")
    raise IdError(f"{what} id prefix {prefix!r} is ambiguous: it matches {shown}; give more characters")
