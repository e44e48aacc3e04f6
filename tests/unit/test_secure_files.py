"""Issue 21 item 7: files and locks another local user could plant, read or hold.

The local provider's lock was a world-readable ``.lock`` any user could flock for ever (the reconcile loop froze
behind it); a user's pre-made ``agent.key`` was accepted; secrets were checked for "other" but not for "group"
or owner. Each is refused or replaced here, with a message that names the file. The suite runs as root (as
the daemon does), so "another user" is uid 65534 made with chown.
"""

from __future__ import annotations

import fcntl
import os
import stat
import threading
import time

import pytest

from burstd.config import parse_config
from burstd.daemon.agent_auth import AgentCredentials
from burstd.providers.base import ErrorKind, ProviderError
from burstd.providers.local.provider import LocalProvider
from burstd.secure_files import (
    LockTimeout,
    UnsafeFileError,
    private_lock,
    read_secret,
    secret_file_problem,
    trusted_dir_problem,
)

NOBODY = 65534


def _provider(tmp_path) -> LocalProvider:
    conf = parse_config({
        "daemon": {"state_dir": str(tmp_path)},
        "pools": [{"name": "p", "provider": "local", "partition": "cloud", "node_prefix": "cn", "node_count": 3,
                   "price_per_hour": 0.5, "instance_types": [{"name": "a", "cpus": 2, "memory_mb": 1000}]}],
    })
    return LocalProvider(conf.pool("p"), conf)


def _in_thread(fn, timeout: float = 5.0) -> tuple[bool, list]:
    """Run ``fn`` in a thread; (finished within ``timeout``, [its exception, if any])."""
    errors: list = []

    def body():
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            errors.append(exc)

    t = threading.Thread(target=body, daemon=True)
    t.start()
    t.join(timeout)
    return not t.is_alive(), errors


def test_a_lock_file_another_user_planted_and_holds_does_not_freeze_the_provider(tmp_path):
    prov = _provider(tmp_path)
    prov.records_dir.mkdir(parents=True)
    planted = prov.records_dir / ".lock"
    planted.write_text("")
    planted.chmod(0o644)
    os.chown(planted, NOBODY, NOBODY)
    with open(planted) as held:  # read-only is enough for flock: what any user could do with a 0644 lock
        fcntl.flock(held, fcntl.LOCK_EX)

        def terminate_nothing():
            prov.terminate([])

        finished, errors = _in_thread(terminate_nothing)
    assert finished, "the provider waited on a lock another user holds"
    assert errors == []
    st = os.stat(planted)
    assert st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) == 0o600


def test_the_provider_makes_its_lock_private(tmp_path):
    prov = _provider(tmp_path)
    prov.terminate([])
    assert stat.S_IMODE(os.stat(prov.records_dir / ".lock").st_mode) == 0o600


def test_a_lock_held_past_its_bound_is_a_transient_provider_error_naming_the_file(tmp_path):
    prov = _provider(tmp_path)
    prov.lock_timeout_s = 0.3
    prov.records_dir.mkdir(parents=True)
    with private_lock(prov.records_dir / ".lock", timeout_s=1):  # a stuck burstd process holds it

        def terminate_nothing():
            prov.terminate([])

        t0 = time.monotonic()
        finished, errors = _in_thread(terminate_nothing)
        assert finished and time.monotonic() - t0 < 3
    assert len(errors) == 1 and isinstance(errors[0], ProviderError)
    assert errors[0].kind is ErrorKind.TRANSIENT and ".lock is still held after 0.3 s" in str(errors[0])


def test_private_lock_waits_its_bound_then_says_which_file(tmp_path):
    lock = tmp_path / "x.lock"
    with private_lock(lock, timeout_s=1):
        with pytest.raises(LockTimeout, match=f"{lock} is still held after 0.2 s"):
            with private_lock(lock, timeout_s=0.2):
                pass
    with private_lock(lock, timeout_s=0.2):  # released: taken at once
        pass


def test_a_symlinked_lock_is_replaced_never_followed(tmp_path):
    target = tmp_path / "target"
    target.write_text("keep")
    (tmp_path / "x.lock").symlink_to(target)
    with private_lock(tmp_path / "x.lock", timeout_s=1):
        pass
    assert not (tmp_path / "x.lock").is_symlink() and target.read_text() == "keep"


def test_a_pre_made_agent_key_of_another_user_is_refused(tmp_path):
    key = tmp_path / "agent.key"
    key.write_bytes(b"k" * 32)  # the user knows it: they could mint every node's agent token
    key.chmod(0o600)
    os.chown(key, NOBODY, NOBODY)
    with pytest.raises(ValueError, match="agent.key is owned by uid 65534"):
        AgentCredentials.load(tmp_path)


def test_a_group_readable_agent_key_is_refused_and_a_fresh_one_is_private(tmp_path):
    AgentCredentials.load(tmp_path)
    assert stat.S_IMODE(os.stat(tmp_path / "agent.key").st_mode) == 0o600
    os.chmod(tmp_path / "agent.key", 0o640)
    with pytest.raises(ValueError, match="open to group or other users"):
        AgentCredentials.load(tmp_path)


@pytest.mark.parametrize("mode, owner, problem", [
    (0o600, 0, None),
    (0o640, 0, "open to group or other users (mode 0640)"),
    (0o604, 0, "open to group or other users"),
    (0o600, NOBODY, "owned by uid 65534"),
])
def test_secret_files_must_be_ours_and_private(tmp_path, mode, owner, problem):
    secret = tmp_path / "token"
    secret.write_text("t")
    secret.chmod(mode)
    os.chown(secret, owner, owner)
    found = secret_file_problem("api.token_file", str(secret))
    if problem is None:
        assert found is None and read_secret("api.token_file", secret) == b"t"
    else:
        assert found is not None and found.startswith("api.token_file: ") and problem in found
        with pytest.raises(UnsafeFileError, match=problem.replace("(", r"\(").replace(")", r"\)")):
            read_secret("api.token_file", secret)


def test_an_oversized_secret_is_refused_not_read_whole(tmp_path):
    secret = tmp_path / "token"
    with open(secret, "wb") as fh:
        fh.truncate(1 << 30)  # sparse: 1 GiB on paper
    secret.chmod(0o600)
    with pytest.raises(UnsafeFileError, match="over 65536 bytes"):
        read_secret("api.token_file", secret)


def test_trusted_dirs_refuse_what_another_user_could_write(tmp_path):
    good = tmp_path / "a" / "bin"
    good.mkdir(parents=True)
    assert trusted_dir_problem("slurm.bin_dir", str(good)) is None
    assert trusted_dir_problem("slurm.bin_dir", str(good / "not" / "yet")) is None  # made later, by burstd
    os.chmod(tmp_path / "a", 0o1777)  # a sticky parent (/tmp): nobody renames our directory in it
    assert trusted_dir_problem("slurm.bin_dir", str(good)) is None
    os.chmod(tmp_path / "a", 0o777)
    assert "writable by every user" in (trusted_dir_problem("slurm.bin_dir", str(good)) or "")
    os.chmod(tmp_path / "a", 0o755)
    os.chmod(good, 0o1777)  # the directory itself: not even sticky (a name there could be taken first)
    assert "writable by every user" in (trusted_dir_problem("slurm.bin_dir", str(good)) or "")
    os.chmod(good, 0o755)
    os.chown(good, NOBODY, NOBODY)
    assert "owned by uid 65534, not root" in (trusted_dir_problem("slurm.bin_dir", str(good)) or "")
    link = tmp_path / "link"
    link.symlink_to(good)  # the real directory is checked
    assert "owned by uid 65534" in (trusted_dir_problem("slurm.bin_dir", str(link)) or "")
    # a daemon run as an ordinary user may own its directories
    assert trusted_dir_problem("slurm.bin_dir", str(good), euid=NOBODY) is None
