"""Slurm hostlist expressions, without calling Slurm: ``c[1-3,7],n01`` <-> ``["c1", "c2", "c3", "c7", "n01"]``.

Pure functions (no I/O), so the policy and tests can use them freely.

    >>> expand("cloud[1-3],onprem[01-02]")
    ['cloud1', 'cloud2', 'cloud3', 'onprem01', 'onprem02']
    >>> compress(["cloud3", "cloud1", "cloud2", "onprem01"])
    'cloud[1-3],onprem01'
"""

from __future__ import annotations

import re
from collections.abc import Iterable

MAX_HOSTS = 1_000_000  # refuse absurd expressions instead of eating memory


class HostlistError(ValueError):
    """A hostlist expression that Slurm would not accept either."""


def _split_top(expr: str) -> list[str]:
    """Split on commas that are not inside brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(expr):
        if ch == "[":
            depth += 1
            if depth > 1:
                raise HostlistError(f"nested brackets in hostlist {expr!r}")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"unbalanced ']' in hostlist {expr!r}")
        elif ch == "," and depth == 0:
            parts.append(expr[start:i])
            start = i + 1
    if depth:
        raise HostlistError(f"unbalanced '[' in hostlist {expr!r}")
    parts.append(expr[start:])
    return [p.strip() for p in parts if p.strip()]


def _range_values(body: str, expr: str) -> list[str]:
    out: list[str] = []
    for item in body.split(","):
        item = item.strip()
        if not item:
            raise HostlistError(f"empty range in hostlist {expr!r}")
        lo, sep, hi = item.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise HostlistError(f"bad range {item!r} in hostlist {expr!r}")
        if not sep:
            out.append(lo)
            continue
        a, b = int(lo), int(hi)
        if b < a:
            raise HostlistError(f"descending range {item!r} in hostlist {expr!r}")
        if b - a + 1 > MAX_HOSTS:
            raise HostlistError(f"range {item!r} in hostlist {expr!r} is too large")
        width = len(lo) if lo.startswith("0") else 0
        out.extend(str(n).zfill(width) for n in range(a, b + 1))
    return out


def _expand_one(part: str, expr: str) -> list[str]:
    m = re.search(r"\[([^\]]*)\]", part)
    if not m:
        return [part]
    prefix, suffix = part[: m.start()], part[m.end() :]
    tails = _expand_one(suffix, expr) if suffix else [""]
    names = [prefix + v + t for v in _range_values(m.group(1), expr) for t in tails]
    if len(names) > MAX_HOSTS:
        raise HostlistError(f"hostlist {expr!r} is too large")
    return names


def expand(expr: str | None) -> list[str]:
    """All host names of a hostlist expression, in order (duplicates kept, as Slurm does)."""
    if not expr:
        return []
    out: list[str] = []
    for part in _split_top(expr):
        out.extend(_expand_one(part, expr))
        if len(out) > MAX_HOSTS:
            raise HostlistError(f"hostlist {expr!r} is too large")
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
        for n in ordered[1:] + [None]:  # type: ignore[list-item]
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
