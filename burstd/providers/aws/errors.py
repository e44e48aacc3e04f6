"""EC2 error codes -> ``ErrorKind``: what the daemon should do about each failure.

Grouped like aws-parallelcluster-node's failure classes: capacity cools the offering down and tries the next;
throttling and transient errors are retried with jittered backoff; quota stops the pool and tells the admin;
auth and config errors fail loudly, never retried.
"""

from __future__ import annotations

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    NoRegionError,
    PartialCredentialsError,
    ReadTimeoutError,
)

from burstd.providers.base import ErrorKind, Offering, ProviderError

CAPACITY_CODES = frozenset({
    "InsufficientInstanceCapacity",
    "InsufficientCapacity",
    "InsufficientHostCapacity",
    "InsufficientReservedInstanceCapacity",
    "InsufficientFreeAddressesInSubnet",
    "MaxSpotInstanceCountExceeded",
    "SpotMaxPriceTooLow",
    "UnfulfillableCapacity",
    "Unsupported",  # this type is not offered in this AZ
    "capacity-not-available",
})
THROTTLE_CODES = frozenset({
    "RequestLimitExceeded", "Throttling", "ThrottlingException", "TooManyRequestsException",
    "RequestThrottled", "SlowDown", "PriorRequestNotComplete",
})
QUOTA_CODES = frozenset({
    "VcpuLimitExceeded", "InstanceLimitExceeded", "MaxFleetCountExceeded", "MaxSpotFleetRequestCountExceeded",
    "ResourceLimitExceeded", "VolumeLimitExceeded", "AddressLimitExceeded", "LimitExceededException",
})
CONFIG_CODES = frozenset({
    "AuthFailure", "UnauthorizedOperation", "InvalidClientTokenId", "SignatureDoesNotMatch", "AccessDenied",
    "AccessDeniedException", "OptInRequired", "Blocked", "ExpiredToken", "UnrecognizedClientException",
    "InvalidParameterValue", "InvalidParameter", "InvalidParameterCombination", "MissingParameter",
    "IdempotentParameterMismatch", "InvalidUserData.Malformed", "InvalidFleetConfig", "ValidationError",
})
CONFIG_PREFIXES = (
    "InvalidLaunchTemplate", "InvalidAMIID", "InvalidSubnetID", "InvalidGroup", "InvalidKeyPair",
    "InvalidIamInstanceProfile", "InvalidSecurityGroupID", "InvalidVpcID", "InvalidInstanceType",
)
TRANSIENT_CODES = frozenset({
    "InternalError", "InternalFailure", "ServiceUnavailable", "Unavailable", "RequestTimeout",
    "InvalidInstanceID.NotFound",  # eventual consistency right after a launch
})


def kind_of_code(code: str, http_status: int | None = None) -> ErrorKind:
    if code in CAPACITY_CODES:
        return ErrorKind.CAPACITY
    if code in THROTTLE_CODES:
        return ErrorKind.THROTTLED
    if code in QUOTA_CODES:
        return ErrorKind.QUOTA
    if code in CONFIG_CODES or code.startswith(CONFIG_PREFIXES):
        return ErrorKind.CONFIG
    if code in TRANSIENT_CODES or (http_status or 0) >= 500:
        return ErrorKind.TRANSIENT
    # An unknown client-side error: fail loudly rather than loop on it.
    return ErrorKind.CONFIG


def classify(exc: Exception, offering: Offering | None = None) -> ProviderError:
    """Map a boto3/botocore exception to a ProviderError (never raises)."""
    if isinstance(exc, ProviderError):
        return exc
    if isinstance(exc, ClientError):
        err = exc.response.get("Error", {})
        code = str(err.get("Code", "Unknown"))
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return ProviderError(kind_of_code(code, status), str(err.get("Message", exc)), code=code, offering=offering)
    if isinstance(exc, (NoCredentialsError, PartialCredentialsError, NoRegionError)):
        return ProviderError(ErrorKind.CONFIG, str(exc), code=type(exc).__name__)
    if isinstance(exc, (EndpointConnectionError, ConnectTimeoutError, ReadTimeoutError, ConnectionClosedError)):
        return ProviderError(ErrorKind.TRANSIENT, str(exc), code=type(exc).__name__)
    if isinstance(exc, BotoCoreError):
        return ProviderError(ErrorKind.TRANSIENT, str(exc), code=type(exc).__name__)
    return ProviderError(ErrorKind.TRANSIENT, f"{type(exc).__name__}: {exc}", code=type(exc).__name__)
