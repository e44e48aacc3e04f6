"""The SQLite database holds spend, budgets and leases: it is created 0600 whatever the umask (issue 9 item 11)."""

from __future__ import annotations

import os
import stat

from burstd.db.store import Store


def test_a_new_sqlite_database_is_readable_by_its_owner_only(tmp_path):
    old = os.umask(0o022)  # what a shell outside systemd (UMask=0077) typically has
    try:
        store = Store.open(f"sqlite:///{tmp_path}/sub/burstd.db")
    finally:
        os.umask(old)
    try:
        assert stat.S_IMODE(os.stat(tmp_path / "sub" / "burstd.db").st_mode) == 0o600
    finally:
        store.close()
