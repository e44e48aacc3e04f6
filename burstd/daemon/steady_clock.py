"""Wall-clock time for the daemon that never jumps (issue 9 item 10).

    clock = SteadyClock()          # Unix seconds, like time.time()
    clock()                        # follows the wall clock's small corrections (NTP slews), never its steps

Every timestamp the daemon writes (a lease's state_since, launch, end; spend up to "now") and every timeout it
judges comes from one clock. A wall clock stepped by +30 days would otherwise fail every booting lease and bill
30 days of every VM; stepped back, it would freeze timeouts and spend. So time advances with the monotonic
clock and takes the wall clock's word only while the two agree within ``max_step_s`` (a step is logged, and the
daemon keeps its own time until a restart re-reads the wall clock).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

log = logging.getLogger("burstd.clock")


class SteadyClock:
    def __init__(self, wall: Callable[[], float] = time.time, monotonic: Callable[[], float] = time.monotonic,
                 max_step_s: float = 5.0):
        self._wall, self._mono, self.max_step_s = wall, monotonic, max_step_s
        self._base_wall, self._base_mono = wall(), monotonic()
        self.steps = 0  # wall-clock steps ignored so far
        self.offset = 0.0  # wall clock minus steady time, as last seen

    def __call__(self) -> float:
        mono = self._mono()
        steady = self._base_wall + (mono - self._base_mono)
        wall = self._wall()
        gap = wall - steady
        if abs(gap) <= self.max_step_s:
            self._base_wall, self._base_mono = wall, mono  # a small correction: follow it
            self.offset = 0.0
            return wall
        if abs(gap - self.offset) > self.max_step_s:  # a new step (not the one already reported)
            self.steps += 1
            log.warning("wall clock stepped %+.0f s; burstd keeps monotonic time (timeouts and spend unaffected "
                        "until a restart)", gap - self.offset)
        self.offset = gap
        return steady
