"""Render the node start-up script (``scripts/node-bootstrap.sh``) for one pool.

The rendered script is the shared body behind a small header of settings. It holds the *name* of the secret
that stores the munge key, never the key; the node fetches the key itself with its instance role.
"""

from __future__ import annotations

import re
import shlex
from importlib import resources

MARKER = "# ---- burstd node-bootstrap.sh ----"
_SAFE = re.compile(r"^[A-Za-z0-9_.:/@+=,\[\]-]*$")


def script_body() -> str:
    return resources.files("burstd.providers").joinpath("node-bootstrap.sh").read_text()


def render_startup_script(settings: dict[str, str]) -> str:
    """``#!/bin/bash`` + ``export KEY=value`` lines + the bootstrap body.

    Values are restricted to a conservative character set (and quoted anyway): they come from the admin's
    config, and a start-up script is the last place for an injection.
    """
    lines = ["#!/bin/bash", "# Rendered by burstd for this pool; holds no secret."]
    for key, value in settings.items():
        if not re.fullmatch(r"BURSTD_[A-Z_]+", key):
            raise ValueError(f"bootstrap setting name {key!r} must look like BURSTD_NAME")
        if not _SAFE.fullmatch(value):
            raise ValueError(f"bootstrap setting {key}={value!r} has characters that are not allowed")
        lines.append(f"export {key}={shlex.quote(value)}")
    body = script_body()
    if body.startswith("#!"):
        body = body.split("\n", 1)[1]
    return "\n".join(lines) + "\n" + MARKER + "\n" + body
