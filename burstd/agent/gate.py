"""The parity gate on a new cloud node, before slurmd starts: ``burstd-agent --parity-gate`` (node-bootstrap.sh).

1. ask the daemon for the on-prem reference, the allowed differences and the site's checks (``GET /v1/parity``);
2. fingerprint this node (``burstd.agent.fingerprint``) and compare (``burstd.domain.parity``);
3. on a difference: print each one, report them (``POST /v1/parity``: the daemon fails the lease with them as its
   reason, requeues its jobs and counts a boot failure for the pool) and exit 1, so the bootstrap never starts
   slurmd.

Exit 0 when the node matches, or when there is nothing to compare with (no ``agent.daemon_url``, or the daemon has
no reference: the gate is open, and says so). A daemon that cannot be asked is a closed gate (exit 3): a node that
was never checked takes no job; its lease then fails at the boot timeout.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from pydantic import ValidationError

from burstd.agent.fingerprint import fingerprint
from burstd.agent.report import DaemonUnreachable, ReportConfigError, fetch_parity_settings, report_parity
from burstd.config import AgentConfig
from burstd.domain.parity import compare
from burstd.image.spec import ParityConfig

log = logging.getLogger("burstd.agent")

MATCHES, DIFFERS, BAD_SETTINGS, UNREACHABLE = 0, 1, 2, 3


def run_gate(agent: AgentConfig, node: str, *, measure: Callable[..., dict[str, str]] = fingerprint,
             attempts: int = 5, retry_s: float = 3.0, sleep: Callable[[float], None] = time.sleep) -> int:
    if not agent.daemon_url:
        log.warning("parity gate open: no agent.daemon_url to ask for the on-prem reference")
        return MATCHES
    token_file, ca_file = agent.daemon_token_file, agent.daemon_ca_file
    error: Exception | None = None
    for attempt in range(attempts):
        try:
            settings = fetch_parity_settings(agent.daemon_url, token_file=token_file, ca_file=ca_file)
            break
        except ReportConfigError as exc:
            log.error("parity gate closed: %s", exc)
            return BAD_SETTINGS
        except DaemonUnreachable as exc:
            error = exc
            if attempt + 1 < attempts:
                sleep(retry_s)
    else:
        log.error("parity gate closed: %s", error)
        return UNREACHABLE
    if settings is None:
        log.warning("parity gate open: the daemon has no parity.reference_file")
        return MATCHES
    try:
        # the daemon validated these from its config; a node re-checks what reaches it over the network
        parity = ParityConfig.model_validate({k: settings.get(k) for k in ("allow", "checks", "job_python")
                                              if settings.get(k) is not None})
        reference = {str(k): str(v) for k, v in settings["reference"].items()}
    except (ValidationError, AttributeError) as exc:
        log.error("parity gate closed: the daemon's settings are not usable: %s", exc)
        return BAD_SETTINGS
    differences = compare(reference, measure(job_python=parity.job_python, checks=parity.checks), parity.allow)
    if not differences:
        log.info("parity gate: node %s matches the on-prem reference (%d facts)", node, len(reference))
        return MATCHES
    for d in differences:
        log.error("parity gate: %s", d.message)
    if not report_parity(agent.daemon_url, node, [d.message for d in differences], token_file=token_file,
                         ca_file=ca_file):
        log.error("parity gate: the differences were not reported; the lease fails at the boot timeout instead")
    return DIFFERS
