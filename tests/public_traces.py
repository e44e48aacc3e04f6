"""The public workload traces the tests and benchmarks read: the whole ones under ``BURSTD_TRACES``, or the
samples in examples/traces (its README.md: sources, how each sample was cut, the layout ``BURSTD_TRACES`` takes).

No pytest here: bench/ scripts import it too.
"""

from __future__ import annotations

import os
from pathlib import Path

#: The first jobs of each public trace, and a one-region Spot Advisor snapshot (its README.md says how each was cut)
SAMPLE_TRACES = Path(__file__).resolve().parent.parent / "examples" / "traces"
#: Each public trace, by its path in the whole set, and its sample here
PUBLIC_TRACES = {
    "swf/SDSC-BLUE-2000-4.2-cln.swf.gz": "SDSC-BLUE-2000-4.2-cln.first2000.swf.gz",
    "swf/CTC-SP2-1996-3.1-cln.swf.gz": "CTC-SP2-1996-3.1-cln.first2000.swf.gz",
    "swf/KTH-SP2-1996-2.1-cln.swf.gz": "KTH-SP2-1996-2.1-cln.first2000.swf.gz",
    "gpu/philly_trace_rfold.csv.gz": "philly_trace_rfold.first2000.csv.gz",
    "spot/spot-advisor-data.json": "spot-advisor-data.us-east-1.json",
}


def public_trace(name: str) -> Path:
    """The whole trace ``name`` (a key of PUBLIC_TRACES) under ``BURSTD_TRACES`` when that is set, else its sample.

    A ``BURSTD_TRACES`` that lacks the file is an error, not a quiet fall back to the sample."""
    whole = os.environ.get("BURSTD_TRACES")
    if not whole:
        return SAMPLE_TRACES / PUBLIC_TRACES[name]
    path = Path(whole) / name
    if not path.is_file():
        raise FileNotFoundError(f"BURSTD_TRACES={whole}: no {name} there (examples/traces/README.md lists the "
                                "whole traces and where to get them; unset BURSTD_TRACES to use the samples)")
    return path
