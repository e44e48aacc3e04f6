"""The field types and the section base every part of burstd's configuration shares (``burstd.config``).

Bounds live in the types: a price, a duration, a count, a name, each checked the same wherever it appears.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

DEFAULT_CONFIG_PATH = Path("/etc/burstd/burstd.toml")
CONFIG_ENV = "BURSTD_CONFIG"

_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
Name = Annotated[str, Field(pattern=_NAME, max_length=64)]
NodePrefix = Annotated[str, Field(pattern=r"^[a-z][a-z0-9-]*$", max_length=40)]
NonNegFloat = Annotated[float, Field(ge=0, allow_inf_nan=False)]
PosFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]
# Every number has an upper bound too: a typo (1e12 s, 1e10 USD) must be refused, not overflow a timer.
YEAR_S = 366 * 86400.0
MAX_USD = 1e12  # a trillion dollars: "no limit" in a simulation, yet never an overflow
Seconds = Annotated[float, Field(ge=0, le=YEAR_S, allow_inf_nan=False)]
PosSeconds = Annotated[float, Field(gt=0, le=YEAR_S, allow_inf_nan=False)]
Usd = Annotated[float, Field(ge=0, le=MAX_USD, allow_inf_nan=False)]
# a price per node-hour: a hundredth of a cent at least (a 1e-300 price is a typo that makes every burst free)
MIN_PRICE_USD = 1e-4
Price = Annotated[float, Field(ge=MIN_PRICE_USD, le=MAX_USD, allow_inf_nan=False)]
Count = Annotated[int, Field(ge=0, le=1_000_000)]
Port = Annotated[int, Field(ge=1, le=65535)]
# Slurm feature / GRES type names: they land in the generated slurm.conf, so no spaces, '=', '#' or newlines
SlurmWord = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")]
_HOST_PORT = re.compile(r"^(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]{1,253}):(?P<port>[0-9]{1,5})$")
_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOSTNAME = re.compile(rf"(?=.{{1,253}}$){_LABEL}(\.{_LABEL})*")
_DB_SCHEMES = ("sqlite", "postgresql", "postgresql+psycopg", "postgresql+psycopg2", "postgres")


def check_host_port(value: str) -> str:
    """``host:port`` (``[v6]:port``), port 1..65535."""
    m = _HOST_PORT.fullmatch(value)
    if not m or not 1 <= int(m.group("port")) <= 65535:
        raise ValueError(f"{value!r} is not host:port (e.g. 127.0.0.1:8787, port 1..65535)")
    return value


def check_address(value: str) -> str:
    """An IP address or a host name (what a listener binds to)."""
    try:
        ipaddress.ip_address(value)
        return value
    except ValueError:
        pass
    if not _HOSTNAME.fullmatch(value):
        raise ValueError(f"{value!r} is neither an IP address nor a host name")
    return value


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
