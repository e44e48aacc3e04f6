"""Slurm hostlist expressions, without calling Slurm: ``c[1-3,7],n01`` <-> ``["c1", "c2", "c3", "c7", "n01"]``.

Pure functions (no I/O), so the policy and tests can use them freely; standard library only, so the Slurm
hooks (``burstd.daemon.hooks``) import it too. ``expand(expr, validate=True)`` is for names that come from
outside (hook calls, the API): it also refuses an empty or whitespace-carrying expression and any name that
is not a valid node name, and caps the count at ``MAX_VALIDATED_HOSTS``; the error names the bad part.

    >>> expand("cloud[1-3],onprem[01-02]")
    ['cloud1', 'cloud2', 'cloud3', 'onprem01', 'onprem02']
    >>> compress(["cloud3", "cloud1", "cloud2", "onprem01"])
    'cloud[1-3],onprem01'
"""

from __future__ import annotations

import re
from collections.abc import Iterable

MAX_HOSTS = 1_000_000  # refuse absurd expressions instead of eating memory
MAX_VALIDATED_HOSTS = 100_000  # the bound for expressions from outside (hooks, the API)
MAX_VALIDATED_CHARS = 65_536
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")  # a node name the daemon accepts


class HostlistError(ValueError):
    """A hostlist expression that Slurm would not accept either."""


def _split_top(expr: str) -> list[str]:
    """Split on commas that are not inside brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(expr):
        if ch == "[":
            depth += 1
            if depth > 1:
                raise HostlistError(f"malformed hostlist {expr!r}: nested brackets")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"malformed hostlist {expr!r}: unbalanced ']'")
        elif ch == "," and depth == 0:
            parts.append(expr[start:i])
            start = i + 1
    if depth:
        raise HostlistError(f"malformed hostlist {expr!r}: unbalanced '['")
    parts.append(expr[start:])
    return [p.strip() for p in parts if p.strip()]


def _range_values(body: str, expr: str, limit: int) -> list[str]:
    out: list[str] = []
    for item in body.split(","):
        item = item.strip()
        if not item:
            raise HostlistError(f"malformed hostlist {expr!r}: empty range")
        lo, sep, hi = item.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise HostlistError(f"malformed hostlist {expr!r}: bad range {item!r}")
        if not sep:
            out.append(lo)
            continue
        a, b = int(lo), int(hi)
        if b < a:
            raise HostlistError(f"malformed hostlist {expr!r}: range {item!r} runs backwards")
        if b - a + 1 + len(out) > limit:
            raise HostlistError(f"range {item!r} in hostlist {expr!r} is too large (more than {limit} hosts)")
        width = len(lo) if lo.startswith("0") else 0
        out.extend(str(n).zfill(width) for n in range(a, b + 1))
    return out


def _expand_one(part: str, expr: str, limit: int) -> list[str]:
    m = re.search(r"\[([^\]]*)\]", part)
    if not m:
        return [part]
    prefix, suffix = part[: m.start()], part[m.end() :]
    tails = _expand_one(suffix, expr, limit) if suffix else [""]
    values = _range_values(m.group(1), expr, limit)
    if len(values) * len(tails) > limit:  # checked before building the product
        raise HostlistError(f"hostlist {expr!r} is too large (more than {limit} hosts)")
    return [prefix + v + t for v in values for t in tails]


def expand(expr: str | None, *, validate: bool = False) -> list[str]:
    """All host names of a hostlist expression, in order (duplicates kept, as Slurm does).

    ``validate=True`` (names from outside): an empty expression, whitespace, an expression longer than
    ``MAX_VALIDATED_CHARS``, more than ``MAX_VALIDATED_HOSTS`` names, or a name that does not match
    ``NAME_RE`` (``cloud1;id``) raises ``HostlistError`` naming it. Without it, empty gives ``[]``.
    """
    limit = MAX_VALIDATED_HOSTS if validate else MAX_HOSTS
    if validate:
        if not isinstance(expr, str) or not expr.strip():
            raise HostlistError("empty hostlist")
        expr = expr.strip()
        if any(c.isspace() for c in expr) or len(expr) > MAX_VALIDATED_CHARS:
            raise HostlistError(f"malformed hostlist {expr[:80]!r}: whitespace or too long")
    if not expr:
        return []
    out: list[str] = []
    for part in _split_top(expr):
        out.extend(_expand_one(part, expr, limit))
        if len(out) > limit:
            raise HostlistError(f"hostlist {expr!r} is too large (more than {limit} hosts)")
    if validate:
        for name in out:
            if not NAME_RE.fullmatch(name):
                raise HostlistError(f"malformed hostlist {expr!r}: bad name {name!r}")
    return out


_NUM_TAIL = re.compile(r"^(.*?)(\d+)$")


def compress(names: Iterable[str]) -> str:
    """The shortest-ish Slurm hostlist for ``names`` (sorted, de-duplicated, zero padding kept)."""
    groups: dict[tuple[str, int], set[int]] = {}
    plain: set[str] = set()
    for name in names:
        m = _NUM_TAIL.match(name)
        if not m:
            plain.add(name)
            continue
        prefix, digits = m.groups()
        width = len(digits) if digits.startswith("0") and len(digits) > 1 else 0
        groups.setdefault((prefix, width), set()).add(int(digits))
    parts: list[tuple[str, str]] = [(p, p) for p in plain]
    for (prefix, width), nums in groups.items():
        ordered = sorted(nums)
        ranges: list[str] = []
        start = prev = ordered[0]
        for n in [*ordered[1:], None]:  # None closes the last range
            if n is not None and n == prev + 1:
                prev = n
                continue
            a, b = str(start).zfill(width), str(prev).zfill(width)
            ranges.append(a if start == prev else f"{a}-{b}")
            if n is not None:
                start = prev = n
        if len(ordered) == 1:
            text = prefix + ranges[0]
        else:
            text = f"{prefix}[{','.join(ranges)}]"
        parts.append((prefix + str(ordered[0]).zfill(width), text))
    return ",".join(text for _key, text in sorted(parts, key=_natural_key))


def _natural_key(item: tuple[str, str]) -> tuple:
    key = item[0]
    m = _NUM_TAIL.match(key)
    return (m.group(1), int(m.group(2))) if m else (key, -1)
