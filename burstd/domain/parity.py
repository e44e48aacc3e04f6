"""The parity gate's comparison: a cloud node's fingerprint against the on-prem reference (pure, no I/O).

A fingerprint is a flat mapping of fact keys to strings, as ``burstd.agent.fingerprint`` measures it::

    {"slurm.release": "22.05.8", "munge.version": "0.5.15", "os.release": "Debian GNU/Linux 12 (bookworm)",
     "python.version": "3.11.2", "python.package.numpy": "1.26.4", "torch.version": "2.5.1+cpu",
     "slurm.plugin.auth_munge": "present", "check.lustre": "2.15.4", ...}

``compare(reference, node, allowed)`` lists what the node lacks or has differently, minus what the site allows
(``fnmatch`` patterns over keys, e.g. ``python.package.*``). What the node has *beyond* the reference is no
difference: an image may carry more than the on-prem nodes. Hardware facts (GPU model, CUDA driver, GRES,
Slurm features) are compared only where both sides have them: a CPU pool has no GPU to match the on-prem one.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

Fingerprint = Mapping[str, str]

# compared only when present on both sides
WHERE_PRESENT = ("cuda.driver", "gpu.model", "slurm.gres", "slurm.features")

_LABELS = {
    "slurm.release": "slurmd",
    "munge.version": "munge",
    "os.release": "OS",
    "python.version": "Python",
    "torch.version": "torch",
    "cuda.driver": "CUDA driver",
    "gpu.model": "GPU",
    "slurm.gres": "GRES",
    "slurm.features": "Slurm features",
}
_PREFIX_LABELS = {
    "slurm.plugin.": "Slurm plugin ",
    "python.package.": "Python package ",
    "check.": "site check ",
}


def label(key: str) -> str:
    """The human name of a fact key (``slurm.release`` -> ``slurmd``)."""
    if key in _LABELS:
        return _LABELS[key]
    for prefix, text in _PREFIX_LABELS.items():
        if key.startswith(prefix):
            return text + key[len(prefix):]
    return key


@dataclass(frozen=True)
class Difference:
    key: str
    reference: str | None  # the on-prem value; never None in a Difference that compare() returns
    node: str | None  # None: the node lacks it

    @property
    def message(self) -> str:
        """``slurmd 24.11.5 on the node, 22.05.8 on-prem``."""
        have = "missing" if self.node is None else self.node
        return f"{label(self.key)} {have} on the node, {self.reference} on-prem"


# the order differences are named in (a lease's reason has room for a few): the root causes first
_FIRST = ("slurm.release", "munge.version", "os.release", "python.version", "torch.version", "cuda.driver",
          "gpu.model", "slurm.gres", "slurm.features")
_THEN = ("check.", "python.package.", "slurm.plugin.")


def rank(key: str) -> tuple[int, str]:
    """Sort key of a fact: the Slurm release first, then munge, OS, Python, torch, GPU, the site's checks, packages,
    and Slurm's plugins last (a release change takes many plugins with it)."""
    if key in _FIRST:
        return _FIRST.index(key), key
    for i, prefix in enumerate(_THEN):
        if key.startswith(prefix):
            return len(_FIRST) + i, key
    return len(_FIRST) + len(_THEN), key


def is_allowed(key: str, allowed: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(key, pattern) for pattern in allowed)


def compare(reference: Fingerprint, node: Fingerprint, allowed: Iterable[str] = ()) -> list[Difference]:
    """Every fact of the reference the node lacks or has with another value, unless allowed; in ``rank`` order."""
    allowed = tuple(allowed)
    out = []
    for key in sorted(reference, key=rank):
        want, have = reference[key], node.get(key)
        if have == want or is_allowed(key, allowed):
            continue
        if have is None and key in WHERE_PRESENT:
            continue
        out.append(Difference(key, want, have))
    return out


def reason(differences: list[Difference], max_len: int = 200) -> str:
    """One line for a lease's failure reason (Slurm's reasons are bounded: ``max_len``)."""
    return reason_of([d.message for d in differences], max_len)


def reason_of(messages: list[str], max_len: int = 200) -> str:
    """``parity: <first>; <second>; and N more``: as many messages as fit in ``max_len`` characters."""
    if not messages:
        return "parity: the node matches the on-prem reference"
    for shown in range(len(messages), 0, -1):
        more = len(messages) - shown
        text = "parity: " + "; ".join(messages[:shown]) + (f"; and {more} more" if more else "")
        if len(text) <= max_len:
            return text
    tail = f"; and {len(messages) - 1} more" if len(messages) > 1 else ""
    return "parity: " + messages[0][: max(max_len - len("parity: ...") - len(tail), 0)] + "..." + tail
