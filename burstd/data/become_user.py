"""Dropping root for the job's user inside a staging command, after its code is loaded.

The daemon brings a job's outputs home as the job's user, so no root-owned file lands in a user's folder. Run
as that user from the start, the command needs a Python the user can read (the daemon's own may sit in a venv
under /root): ``[data] user_python``. Without one, the daemon runs its own Python as root with ``--as-user``:
the code and the store's client load as root, then the process takes the user's uid, gid and groups for good
(all three ids: it cannot take root back) before it touches a file. A process whose ids changed this way is not
dumpable, so the user cannot read the store's credentials out of it either.
"""

from __future__ import annotations

import os
import pwd


def become(user: str) -> None:
    """Take ``user``'s uid, gid and groups for the rest of the process (nothing to do if already them)."""
    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        raise ValueError(f"--as-user {user!r}: no such user") from None
    if os.getuid() == pw.pw_uid and os.geteuid() == pw.pw_uid:
        return
    if os.geteuid() != 0:
        raise ValueError(f"--as-user {user!r}: only root can switch to another user")
    os.setgroups(os.getgrouplist(user, pw.pw_gid))
    os.setresgid(pw.pw_gid, pw.pw_gid, pw.pw_gid)
    os.setresuid(pw.pw_uid, pw.pw_uid, pw.pw_uid)
    if os.getuid() != pw.pw_uid or os.geteuid() != pw.pw_uid:  # never go on as root
        raise PermissionError(f"--as-user {user!r}: could not switch (still uid {os.geteuid()})")
