"""Moved to burstd/faults.py, a leaf module (issue 20 seam 4); kept for imports in flight, the merge removes it."""
from burstd.faults import CRASH_ENV, CRASH_EXIT, POINTS, crash_point, reload_from_env  # noqa: F401
