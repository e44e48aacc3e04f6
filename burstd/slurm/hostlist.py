"""Moved to burstd/domain/hostlist.py (issue 20 seam 4); kept for imports in flight, the merge removes it."""
from burstd.domain.hostlist import HostlistError, compress, expand  # noqa: F401
