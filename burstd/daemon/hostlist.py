"""Slurm hostlist expressions, expanded without calling ``scontrol`` (the hooks must be fast).

    expand_hostlist("cloud[1-3,7],gpu01")  ->  ["cloud1", "cloud2", "cloud3", "cloud7", "gpu01"]
    compress_hostlist(["cloud1", "cloud2", "cloud3"])  ->  "cloud[1-3]"

Zero padding is kept (``n[01-03]`` -> n01 n02 n03). Anything else raises ``HostlistError`` naming the
offending part. Standard library only: imported by the hook processes.
"""

from __future__ import annotations

import re

MAX_HOSTS = 100_000
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_RANGE_RE = re.compile(r"^(\d+)(?:-(\d+))?$")


class HostlistError(ValueError):
    pass


def _split_top(expr: str) -> list[str]:
    parts, depth, cur = [], 0, []
    for ch in expr:
        if ch == "[":
            depth += 1
            if depth > 1:
                raise HostlistError(f"malformed hostlist {expr!r}: nested '['")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"malformed hostlist {expr!r}: unbalanced ']'")
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth != 0:
        raise HostlistError(f"malformed hostlist {expr!r}: unbalanced '['")
    parts.append("".join(cur))
    return parts


def _expand_one(part: str, expr: str) -> list[str]:
    if not part:
        raise HostlistError(f"malformed hostlist {expr!r}: empty name")
    m = re.fullmatch(r"([^\[\]]*)\[([^\[\]]+)\]([^\[\]]*)", part)
    if not m:
        if "[" in part or "]" in part or not _NAME_RE.fullmatch(part):
            raise HostlistError(f"malformed hostlist {expr!r}: bad name {part!r}")
        return [part]
    prefix, body, suffix = m.groups()
    out: list[str] = []
    for rng in body.split(","):
        r = _RANGE_RE.fullmatch(rng.strip())
        if not r:
            raise HostlistError(f"malformed hostlist {expr!r}: bad range {rng!r}")
        lo_s, hi_s = r.group(1), r.group(2) or r.group(1)
        lo, hi = int(lo_s), int(hi_s)
        if hi < lo:
            raise HostlistError(f"malformed hostlist {expr!r}: range {rng!r} runs backwards")
        if hi - lo + 1 + len(out) > MAX_HOSTS:
            raise HostlistError(f"hostlist {expr!r} names more than {MAX_HOSTS} hosts")
        width = len(lo_s) if lo_s.startswith("0") and len(lo_s) > 1 else 0
        for i in range(lo, hi + 1):
            name = f"{prefix}{i:0{width}d}{suffix}"
            if not _NAME_RE.fullmatch(name):
                raise HostlistError(f"malformed hostlist {expr!r}: bad name {name!r}")
            out.append(name)
    return out


def expand_hostlist(expr: str) -> list[str]:
    if not isinstance(expr, str) or not expr.strip():
        raise HostlistError("empty hostlist")
    expr = expr.strip()
    if any(c.isspace() for c in expr) or len(expr) > 65536:
        raise HostlistError(f"malformed hostlist {expr[:80]!r}: whitespace or too long")
    seen: dict[str, None] = {}
    for part in _split_top(expr):
        for name in _expand_one(part, expr):
            seen.setdefault(name, None)
    if len(seen) > MAX_HOSTS:
        raise HostlistError(f"hostlist names more than {MAX_HOSTS} hosts")
    return list(seen)


def compress_hostlist(names: list[str]) -> str:
    groups: dict[str, list[int]] = {}
    plain: list[str] = []
    for n in names:
        m = re.fullmatch(r"(.*?[^0-9])(\d+)", n)
        if m and not (m.group(2).startswith("0") and len(m.group(2)) > 1):
            groups.setdefault(m.group(1), []).append(int(m.group(2)))
        else:
            plain.append(n)
    out = []
    for prefix, nums in groups.items():
        nums = sorted(set(nums))
        if len(nums) == 1:
            out.append(f"{prefix}{nums[0]}")
            continue
        ranges, start, prev = [], nums[0], nums[0]
        for x in nums[1:] + [None]:
            if x is not None and x == prev + 1:
                prev = x
                continue
            ranges.append(f"{start}" if start == prev else f"{start}-{prev}")
            if x is not None:
                start = prev = x
        out.append(f"{prefix}[{','.join(ranges)}]")
    return ",".join(out + plain)
