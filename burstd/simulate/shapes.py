"""Cloud node shapes that fit the simulated site, and why a job could not burst.

A site's node shape comes from the trace (SWF header ``MaxProcs / MaxNodes``); the built-in CPU site then
offers the smallest c5 size with at least that many vCPUs, so every job the site can run a node at a
time can also burst (an 8-vCPU cloud node for a 16-CPU-a-node site would silently keep those jobs home,
and a 1-CPU-a-node site would pay for 8 vCPUs per rank). Pure: no I/O.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Shape:
    name: str
    cpus: int
    ondemand: float  # us-east-1 list price, $/node-hour (early 2024)


C5 = (Shape("c5.large", 2, 0.085), Shape("c5.xlarge", 4, 0.17), Shape("c5.2xlarge", 8, 0.34),
      Shape("c5.4xlarge", 16, 0.68), Shape("c5.9xlarge", 36, 1.53), Shape("c5.12xlarge", 48, 2.04),
      Shape("c5.18xlarge", 72, 3.06), Shape("c5.24xlarge", 96, 4.08))
# spot as a share of on-demand: c5.2xlarge's $0.146 / $0.34 (Spot Advisor savings), applied to every size
SPOT_SHARE = 0.146 / 0.34


def site_cpus_per_node(max_procs: int | None, max_nodes: int | None, default: int = 8) -> int:
    """CPUs per on-prem node from the SWF header, or ``default`` without one.

    A header with ``MaxNodes`` and no ``MaxProcs`` (the Lublin-Feitelson model's files, some early MPP logs)
    counts processors as nodes: one CPU a node, and the site has ``MaxNodes`` CPUs (``site_cpus``)."""
    if max_procs and max_nodes:
        return max(1, max_procs // max_nodes)
    if max_nodes:  # and no MaxProcs
        return 1
    return default


def site_cpus(max_procs: int | None, max_nodes: int | None, default: int = 1024) -> int:
    """On-prem CPUs from the SWF header (``MaxProcs``, else ``MaxNodes`` one-CPU nodes), or ``default``."""
    return max_procs or max_nodes or default


def fitting_shape(cpus_per_node: int, catalogue: tuple[Shape, ...] = C5) -> Shape:
    """The smallest shape with at least ``cpus_per_node`` vCPUs (the largest if none is that big)."""
    for s in catalogue:
        if s.cpus >= cpus_per_node:
            return s
    return catalogue[-1]


def cannot_burst_reason(cpus_a_node: int, gpus_a_node: int, nodes: int,
                        pools: list[tuple[int, int, int]]) -> str:
    """Why no pool (cpus, gpus, node_count) can take the job; "" when one can."""
    if not pools:
        return "no cloud pools"
    if any(cpus_a_node <= c and gpus_a_node <= g and nodes <= n for c, g, n in pools):
        return ""
    if all(cpus_a_node > c for c, _, _ in pools):
        return f"needs {cpus_a_node} CPUs a node, largest cloud node has {max(c for c, _, _ in pools)}"
    if all(gpus_a_node > g for _, g, _ in pools):
        return f"needs {gpus_a_node} GPUs a node, largest cloud node has {max(g for _, g, _ in pools)}"
    return f"needs {nodes} nodes of its shape, more than any pool holds"


def count_reasons(reasons: list[str]) -> dict[str, int]:
    return dict(Counter(r for r in reasons if r).most_common())
