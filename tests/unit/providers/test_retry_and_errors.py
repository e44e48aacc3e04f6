from __future__ import annotations

import random

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError

from burstd.providers.aws.errors import classify as aws_classify
from burstd.providers.aws.errors import kind_of_code as aws_kind
from burstd.providers.base import ErrorKind, ProviderError
from burstd.providers.gcp.errors import classify as gcp_classify
from burstd.providers.gcp.errors import kind_of_code as gcp_kind
from burstd.providers.retry import RetryPolicy, call_with_retry


@pytest.mark.parametrize("code,kind", [
    ("InsufficientInstanceCapacity", ErrorKind.CAPACITY),
    ("MaxSpotInstanceCountExceeded", ErrorKind.CAPACITY),
    ("SpotMaxPriceTooLow", ErrorKind.CAPACITY),
    ("UnfulfillableCapacity", ErrorKind.CAPACITY),
    ("RequestLimitExceeded", ErrorKind.THROTTLED),
    ("VcpuLimitExceeded", ErrorKind.QUOTA),
    ("UnauthorizedOperation", ErrorKind.CONFIG),
    ("AuthFailure", ErrorKind.CONFIG),
    ("InvalidAMIID.NotFound", ErrorKind.CONFIG),
    ("InvalidLaunchTemplateName.NotFoundException", ErrorKind.CONFIG),
    ("InternalError", ErrorKind.TRANSIENT),
    ("SomethingNew", ErrorKind.CONFIG),
])
def test_aws_codes(code, kind):
    assert aws_kind(code) is kind


def test_aws_unknown_server_error_is_transient():
    assert aws_kind("SomethingNew", 503) is ErrorKind.TRANSIENT


def test_aws_exceptions():
    err = ClientError({"Error": {"Code": "RequestLimitExceeded", "Message": "slow down"},
                       "ResponseMetadata": {"HTTPStatusCode": 503}}, "CreateFleet")
    pe = aws_classify(err)
    assert pe.kind is ErrorKind.THROTTLED and pe.code == "RequestLimitExceeded" and "slow down" in str(pe)
    assert aws_classify(NoCredentialsError()).kind is ErrorKind.CONFIG
    assert aws_classify(EndpointConnectionError(endpoint_url="http://x")).kind is ErrorKind.TRANSIENT


@pytest.mark.parametrize("code,kind", [
    ("ZONE_RESOURCE_POOL_EXHAUSTED", ErrorKind.CAPACITY),
    ("ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS", ErrorKind.CAPACITY),
    ("QUOTA_EXCEEDED", ErrorKind.QUOTA),
    ("RATE_LIMIT_EXCEEDED", ErrorKind.THROTTLED),
    ("INTERNAL_ERROR", ErrorKind.TRANSIENT),
    ("RESOURCE_NOT_FOUND", ErrorKind.CONFIG),
])
def test_gcp_operation_codes(code, kind):
    assert gcp_kind(code) is kind


def test_gcp_http_errors():
    from google.api_core import exceptions as gexc

    assert gcp_classify(gexc.TooManyRequests("x")).kind is ErrorKind.THROTTLED
    assert gcp_classify(gexc.Forbidden("x", errors=[{"reason": "rateLimitExceeded"}])).kind is ErrorKind.THROTTLED
    assert gcp_classify(gexc.Forbidden("x", errors=[{"reason": "quotaExceeded"}])).kind is ErrorKind.QUOTA
    assert gcp_classify(gexc.Forbidden("x", errors=[{"reason": "forbidden"}])).kind is ErrorKind.CONFIG
    assert gcp_classify(gexc.Unauthorized("x")).kind is ErrorKind.CONFIG
    assert gcp_classify(gexc.ServiceUnavailable("x")).kind is ErrorKind.TRANSIENT


def test_full_jitter_stays_under_the_capped_exponential():
    policy = RetryPolicy(attempts=10, base_s=0.5, max_s=4.0)
    rng = random.Random(1)
    for attempt in range(10):
        for _ in range(50):
            assert 0 <= policy.delay(attempt, rng) <= min(4.0, 0.5 * 2**attempt)


def _failing(errors):
    it = iter(errors)

    def fn():
        e = next(it, None)
        if e is None:
            return "ok"
        raise e
    return fn


def test_retry_retries_throttling_then_succeeds():
    sleeps = []
    throttled = ProviderError(ErrorKind.THROTTLED, "x")
    out = call_with_retry(_failing([throttled, throttled]), aws_classify, RetryPolicy(5, 0.01, 0.1), "t",
                          sleep=sleeps.append)
    assert out == "ok" and len(sleeps) == 2


@pytest.mark.parametrize("kind", [ErrorKind.CAPACITY, ErrorKind.QUOTA, ErrorKind.CONFIG])
def test_retry_never_retries_capacity_quota_or_config(kind):
    sleeps = []
    with pytest.raises(ProviderError) as exc:
        call_with_retry(_failing([ProviderError(kind, "x"), None]), aws_classify, RetryPolicy(5), "t",
                        sleep=sleeps.append)
    assert exc.value.kind is kind and sleeps == []


def test_retry_gives_up_after_the_attempts():
    sleeps = []
    t = ProviderError(ErrorKind.TRANSIENT, "x")
    with pytest.raises(ProviderError):
        call_with_retry(_failing([t] * 9), aws_classify, RetryPolicy(3, 0.01, 0.1), "t", sleep=sleeps.append)
    assert len(sleeps) == 2
