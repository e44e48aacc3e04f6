"""Files and directories whose owner and mode are part of burstd's security (standard library only).

    problem = secret_file_problem("api.token_file", path)     # None, or "api.token_file: ...; chmod 600"
    key = read_secret("agent.key", path)                       # owner and mode checked on the open file
    problem = trusted_dir_problem("slurm.bin_dir", "/usr/bin")  # None, or why another user could plant a file
    with private_lock(records_dir / ".lock", timeout_s=60): ...   # 0600, ours, and a bounded wait

burstd runs as root: a secret another user made (a pre-made ``agent.key`` in a writable state dir) or may read
is no secret, a directory another user may write is a place to plant an ``squeue``, and a lock file another
user may open is a lock they may hold for ever. "Ours" means owned by root or by the user burstd runs as; when
that user is root, by root only.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

MAX_SECRET_BYTES = 64 << 10  # a token or key is a few hundred bytes; a bigger "secret" is the wrong file


class UnsafeFileError(ValueError):
    """A secret, directory or lock file that another user made or may read or write."""


class LockTimeout(TimeoutError):
    """A lock file stayed held past its bound (another process stuck while holding it)."""


def trusted_owners(euid: int | None = None) -> set[int]:
    euid = os.geteuid() if euid is None else euid
    return {0, euid}


def _owner_words(euid: int | None) -> str:
    euid = os.geteuid() if euid is None else euid
    return "root" if euid == 0 else f"root or uid {euid} (burstd's user)"


def _ours_problem(key: str, path: str, st: os.stat_result, euid: int | None, why: str) -> str | None:
    """A regular file owned by root or burstd's user, or why not (``why``: what another owner could do)."""
    if not stat.S_ISREG(st.st_mode):
        return f"{key}: {path} is not a regular file"
    if st.st_uid not in trusted_owners(euid):
        return f"{key}: {path} is owned by uid {st.st_uid}, not {_owner_words(euid)}: {why}"
    return None


def _secret_stat_problem(key: str, path: str, st: os.stat_result, euid: int | None) -> str | None:
    problem = _ours_problem(key, path, st, euid, "another user made it, so it is no secret; remove it (or chown "
                                                 "root and chmod 600 a file you made)")
    if problem:
        return problem
    if st.st_mode & 0o077:
        return (f"{key}: {path} is open to group or other users (mode {stat.S_IMODE(st.st_mode):04o}); "
                f"chmod 600")
    return None


def secret_file_problem(key: str, path: str | None, *, what: str = "token", euid: int | None = None) -> str | None:
    """A secret burstd reads: present, a regular file, ours, mode 0600 or stricter, and (a token) not empty."""
    if not path:
        return None
    try:
        st = os.stat(path)
    except OSError as exc:
        return f"{key}: cannot read {path}: {exc.strerror}"
    problem = _secret_stat_problem(key, path, st, euid)
    if problem is None and st.st_size == 0 and what == "token":
        return f"{key}: {path} is empty"
    return problem


def read_secret(key: str, path: str | os.PathLike, *, max_bytes: int = MAX_SECRET_BYTES) -> bytes:
    """The bytes of a secret file, checked (owner, mode, regular file) on the file actually opened, so a swap
    between the check and the read cannot slip another file in. Raises UnsafeFileError naming ``key``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK)
    except OSError as exc:
        raise UnsafeFileError(f"{key}: cannot read {path}: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as fh:
        problem = _secret_stat_problem(key, str(path), os.fstat(fd), None)
        if problem:
            raise UnsafeFileError(problem)
        data = fh.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise UnsafeFileError(f"{key}: {path} is over {max_bytes} bytes: not a secret file")
    return data


def trusted_dir_problem(key: str, path: str, *, euid: int | None = None) -> str | None:
    """Why another user could put a file into ``path`` (or swap a directory on its way), or None.

    ``path`` itself may be written by no one else (not even with the sticky bit: a name there could be taken
    first); every directory above it must be ours and, when others may write it, sticky (``/tmp``: only an
    entry's owner may rename or remove it). Symlinks are followed and the real directories checked. Parts that
    do not exist yet are skipped: burstd makes them.
    """
    real = Path(os.path.realpath(path))
    leaf = True
    for part in (real, *real.parents):
        try:
            st = os.stat(part)
        except FileNotFoundError:
            continue
        except OSError as exc:
            return f"{key}: cannot check {part}: {exc.strerror}"
        if st.st_uid not in trusted_owners(euid):
            return (f"{key}: {part} is owned by uid {st.st_uid}, not {_owner_words(euid)}: that user could put "
                    f"files burstd trusts there; chown root {part}")
        writable_by_others = st.st_mode & stat.S_IWOTH
        if writable_by_others and (leaf or not st.st_mode & stat.S_ISVTX):
            return (f"{key}: {part} is writable by every user (mode {stat.S_IMODE(st.st_mode):04o}): anyone could "
                    f"put a file burstd trusts there; chmod o-w {part}")
        leaf = False
    return None


def trusted_file_problem(key: str, path: str, *, euid: int | None = None) -> str | None:
    """Why another user could change a file burstd trusts but need not keep secret (a public certificate it
    verifies signatures with), or None: a regular file of ours that no one else may write, in a trusted folder."""
    try:
        st = os.stat(path)
    except OSError as exc:
        return f"{key}: cannot read {path}: {exc.strerror}"
    problem = _ours_problem(key, path, st, euid, f"that user could change what burstd trusts; chown root {path}")
    if problem:
        return problem
    if st.st_mode & 0o022:
        return f"{key}: {path} is writable by group or other users (mode {stat.S_IMODE(st.st_mode):04o}); chmod go-w"
    return trusted_dir_problem(key, str(Path(os.path.realpath(path)).parent), euid=euid)


def _open_private(path: Path) -> int:
    """The lock file, opened: a regular file owned by us, mode 0600. One another user made or may open (or a
    symlink) is replaced: a lock is an inode, so whoever holds the old one holds nothing of ours."""
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(3):
        try:
            fd = os.open(path, flags, 0o600)
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise UnsafeFileError(f"lock {path}: cannot open: {exc.strerror}") from None
        else:
            st = os.fstat(fd)
            if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o077:
                return fd
            os.close(fd)
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise UnsafeFileError(f"lock {path}: another user's lock file, and it cannot be replaced: "
                                  f"{exc.strerror}") from None
    raise UnsafeFileError(f"lock {path}: replaced three times and still not ours; is its directory writable "
                          "by other users?")


@contextmanager
def private_lock(path: str | os.PathLike, *, timeout_s: float, poll_s: float = 0.05,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> Iterator[None]:
    """An exclusive ``flock`` on ``path`` (made 0600 and ours), waiting at most ``timeout_s``; LockTimeout
    after that, naming the file."""
    path = Path(path)
    fd = _open_private(path)
    try:
        deadline = clock() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if clock() >= deadline:
                    raise LockTimeout(f"lock {path} is still held after {timeout_s:g} s: a burstd process is stuck "
                                      f"holding it (find it with `fuser -v {path}`)") from None
                sleep(poll_s)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock
