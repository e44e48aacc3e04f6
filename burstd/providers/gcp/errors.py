"""Compute Engine failures -> ``ErrorKind`` (HTTP errors from the client, and operation error codes)."""

from __future__ import annotations

from burstd.providers.base import ErrorKind, Offering, ProviderError

CAPACITY_CODES = frozenset({
    "ZONE_RESOURCE_POOL_EXHAUSTED", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS", "RESOURCE_POOL_EXHAUSTED",
    "UNSUPPORTED_OPERATION_MACHINE_TYPE_NOT_AVAILABLE", "STOCKOUT",
})
QUOTA_CODES = frozenset({"QUOTA_EXCEEDED", "QUOTA_LIMIT"})
THROTTLE_CODES = frozenset({"RATE_LIMIT_EXCEEDED", "rateLimitExceeded", "userRateLimitExceeded"})
TRANSIENT_CODES = frozenset({"INTERNAL_ERROR", "SERVICE_UNAVAILABLE", "backendError", "internalError"})
QUOTA_REASONS = frozenset({"quotaExceeded", "QUOTA_EXCEEDED"})


def kind_of_code(code: str) -> ErrorKind:
    if code in CAPACITY_CODES:
        return ErrorKind.CAPACITY
    if code in QUOTA_CODES:
        return ErrorKind.QUOTA
    if code in THROTTLE_CODES:
        return ErrorKind.THROTTLED
    if code in TRANSIENT_CODES:
        return ErrorKind.TRANSIENT
    return ErrorKind.CONFIG


def _reasons(exc) -> list[str]:
    out = []
    for e in getattr(exc, "errors", None) or []:
        if isinstance(e, dict) and e.get("reason"):
            out.append(str(e["reason"]))
    reason = getattr(exc, "reason", None)
    if reason:
        out.append(str(reason))
    return out


def classify(exc: Exception, offering: Offering | None = None) -> ProviderError:
    """Map a google-api-core / google-auth / requests exception to a ProviderError (never raises)."""
    from google.api_core import exceptions as gexc

    if isinstance(exc, ProviderError):
        return exc
    if isinstance(exc, gexc.GoogleAPICallError):
        reasons = _reasons(exc)
        code = reasons[0] if reasons else type(exc).__name__
        status = getattr(exc, "code", None) or 0
        msg = getattr(exc, "message", str(exc))
        if status == 429 or any(r in THROTTLE_CODES for r in reasons):
            kind = ErrorKind.THROTTLED
        elif any(r in QUOTA_REASONS for r in reasons):
            kind = ErrorKind.QUOTA
        elif isinstance(status, int) and status >= 500:
            kind = ErrorKind.TRANSIENT
        elif any(r in CAPACITY_CODES for r in reasons):
            kind = ErrorKind.CAPACITY
        else:  # 400 bad request, 401, 403 forbidden, 404 not found: config or auth, fail loudly
            kind = ErrorKind.CONFIG
        return ProviderError(kind, str(msg), code=code, offering=offering)
    try:
        from google.auth import exceptions as aexc

        if isinstance(exc, aexc.DefaultCredentialsError):
            return ProviderError(ErrorKind.CONFIG, str(exc), code="DefaultCredentialsError")
        if isinstance(exc, aexc.TransportError):
            return ProviderError(ErrorKind.TRANSIENT, str(exc), code="TransportError")
        if isinstance(exc, aexc.GoogleAuthError):
            return ProviderError(ErrorKind.CONFIG, str(exc), code=type(exc).__name__)
    except ImportError:  # pragma: no cover
        pass
    return ProviderError(ErrorKind.TRANSIENT, f"{type(exc).__name__}: {exc}", code=type(exc).__name__)
