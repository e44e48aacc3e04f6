"""On-prem placement on whole nodes, first fit: the model of Starburst's simulator (ATC '24).

The engine's default on-prem is a fluid pool of units: a job starts whenever enough units are free
anywhere. Real GPUs sit on nodes, so a cluster with 8 free GPUs spread over 8 nodes cannot start an
8-GPU job. ``FirstFit`` keeps each node's free GPUs and places a job the way Starburst's
``Cluster.try_fit_v2`` does for single-"node" jobs (all of Philly's): the job's GPUs are split into
demands of a whole node each plus the remainder (26 GPUs on 8-GPU nodes: 8, 8, 8, 2), and each demand
takes the lowest-numbered node, not already used by the job, with that many GPUs free. So a job of more
than one node's GPUs needs that many whole free nodes. Pure: no I/O.
"""

from __future__ import annotations

PLACEMENTS = ("fluid", "first-fit")


def demands(units: int, per_node: int) -> list[int]:
    """A job's units split into whole nodes and the remainder, largest first."""
    if units < 1 or per_node < 1:
        raise ValueError(f"a job needs at least 1 unit on nodes of at least 1 (got {units} on {per_node})")
    full, rest = divmod(units, per_node)
    return [per_node] * full + ([rest] if rest else [])


class FirstFit:
    """Free units per node; ``place`` first fit, ``release`` gives a placement back."""

    __slots__ = ("free", "per_node", "free_total")

    def __init__(self, nodes: int, per_node: int):
        if nodes < 1 or per_node < 1:
            raise ValueError(f"first-fit needs at least one node of at least one unit (got {nodes} x {per_node})")
        self.per_node = per_node
        self.free = [per_node] * nodes
        self.free_total = nodes * per_node

    def place(self, units: int) -> tuple[tuple[int, int], ...] | None:
        """Take ``units`` first fit and return ``((node, units), ...)``, or None (and take nothing) when
        the free units, however many, are not on nodes that can hold the job's demands."""
        if units > self.free_total:
            return None
        free = self.free
        taken: list[tuple[int, int]] = []
        used: set[int] = set()
        for d in demands(units, self.per_node):
            for i, f in enumerate(free):
                if f >= d and i not in used:
                    taken.append((i, d))
                    used.add(i)
                    break
            else:
                return None
        for i, d in taken:
            free[i] -= d
        self.free_total -= units
        return tuple(taken)

    def release(self, placement: tuple[tuple[int, int], ...]) -> None:
        for i, d in placement:
            if self.free[i] + d > self.per_node:
                raise ValueError(f"node {i}: releasing {d} units would exceed its {self.per_node}")
            self.free[i] += d
            self.free_total += d
