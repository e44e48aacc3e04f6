"""Who sent a job's progress report: a MUNGE credential, the cluster's own identity, checked by ``unmunge``.

A training job (``burstd.train.progress``) signs its report with ``munge -s <report>`` on the node it runs on and
sends the credential as ``Authorization: Munge <credential>``. ``unmunge`` on the head node (its munged shares the
cluster's key) answers with the uid and gid of the process that made it, the host it was made on, and the
report itself, which the credential seals: nobody can change a report, make one for another uid, or send one
twice (munged refuses a replayed credential; a credential lives ``munge --ttl``, 300 s by default). It is the
same on-prem and on a cloud node: both run munged with the cluster's key. The API then checks that this uid owns
the job and that the host is one of its nodes (``burstd.api.routers.progress``).

    caller = verify_munge(credential, socket="/run/munge/munge.socket.2")   # JobCaller or MungeRefused
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass

MAX_CREDENTIAL = 8192  # a report is a few hundred bytes; its credential, base64 of it sealed, is not much more
_CREDENTIAL = re.compile(r"MUNGE:[A-Za-z0-9+/=]{8,8192}:")
_UNMUNGE_TIMEOUT_S = 2.0


class MungeRefused(Exception):
    """The credential is malformed, expired, replayed, made with another key, or munged is not answering."""


@dataclass(frozen=True, slots=True)
class JobCaller:
    uid: int
    gid: int
    host: str  # the address munged gave for the host that encoded it
    payload: bytes


def read_unmunge(out: bytes) -> JobCaller:
    """``unmunge --numeric`` output (metadata lines ``KEY: value``, a blank line, the payload) -> JobCaller.

    Any other shape, or a status other than 0, is MungeRefused naming what is wrong; the payload is returned
    exactly as it was sealed."""
    head, sep, payload = out.partition(b"\n\n")
    if not sep:
        raise MungeRefused("unmunge printed no payload")
    meta: dict[str, str] = {}
    for line in head.decode("ascii", errors="replace").splitlines():
        key, colon, value = line.partition(":")
        if colon:
            meta[key.strip()] = value.strip()
    status = meta.get("STATUS", "")
    if status != "0":
        raise MungeRefused(f"munge status {status[:40] or 'missing'}")
    try:
        uid, gid = int(meta["UID"].split()[0]), int(meta["GID"].split()[0])
    except (KeyError, ValueError, IndexError):
        raise MungeRefused("unmunge gave no numeric UID/GID") from None
    host = meta.get("ENCODE_HOST", "").split()[0] if meta.get("ENCODE_HOST") else ""
    if uid < 0 or gid < 0 or not host:
        raise MungeRefused("unmunge gave no encoding host or a negative id")
    return JobCaller(uid, gid, host[:255], payload)


def verify_munge(credential: str, *, socket: str | None = None, unmunge: str = "unmunge") -> JobCaller:
    """Decode ``credential`` with the local munged (stdin, never a command line); MungeRefused if it is not good."""
    if len(credential) > MAX_CREDENTIAL or not _CREDENTIAL.fullmatch(credential):
        raise MungeRefused("not a MUNGE credential")
    argv = [unmunge, "--numeric", "--keys=STATUS,ENCODE_HOST,UID,GID"]
    if socket:
        argv.append(f"--socket={socket}")
    try:
        done = subprocess.run(argv, input=credential.encode(), capture_output=True, timeout=_UNMUNGE_TIMEOUT_S,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise MungeRefused(f"unmunge could not run: {exc}") from None
    if done.returncode != 0:
        # e.g. "unmunge: Error: Replayed credential", "Expired credential", "Invalid credential"
        raise MungeRefused(done.stderr.decode(errors="replace").strip().splitlines()[-1:][0][:200]
                           if done.stderr.strip() else f"unmunge exit {done.returncode}")
    return read_unmunge(done.stdout)
