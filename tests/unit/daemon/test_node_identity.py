"""What counts as a cloud node's proof of identity (``burstd.daemon.node_identity``): real RSA signatures and
Google-format JWTs made by ``tests.fakes.instance_identity``, checked by the daemon's own verifiers."""

from __future__ import annotations

import json

import pytest

from burstd.config import parse_config
from burstd.daemon.node_identity import (
    GoogleKeys,
    IdentityRefused,
    InstanceIdentity,
    lease_to_enroll,
    verify_aws,
    verify_gcp,
)
from burstd.domain.lease import Lease, LeaseState
from tests.fakes.instance_identity import AwsIdentity, GoogleIdentity

AUD = "https://head.example.org:8787"
TYPES = [{"name": "m5.large", "cpus": 2, "memory_mb": 8000}]
POOLS = parse_config({"pools": [
    {"name": "aws-spot", "provider": "aws", "partition": "cloud", "node_prefix": "aws", "node_count": 4,
     "instance_types": TYPES, "price_per_hour": 0.1, "aws": {"region": "us-east-1", "subnets": ["subnet-1"], "launch_template": "lt"}},
    {"name": "gcp-spot", "provider": "gcp", "partition": "gcloud", "node_prefix": "gcp", "node_count": 4,
     "instance_types": TYPES, "price_per_hour": 0.1, "gcp": {"project": "proj", "region": "europe-west4", "zones": ["europe-west4-a"]}},
]}).pools


def test_an_aws_document_signed_by_the_regional_certificate_names_its_instance(aws):
    proof = aws.proof("i-0abc", region="us-east-1", account="111122223333")
    assert verify_aws(proof["document"], proof["signature"], aws.cert_pem) == InstanceIdentity(
        "aws", "i-0abc", "111122223333", "us-east-1")


def test_an_aws_document_changed_after_signing_or_signed_by_another_key_is_refused(aws):
    proof = aws.proof("i-0abc")
    forged = proof["document"].replace("i-0abc", "i-0def")
    with pytest.raises(IdentityRefused, match="does not verify") as e:
        verify_aws(forged, proof["signature"], aws.cert_pem)
    assert e.value.status == 401
    with pytest.raises(IdentityRefused, match="does not verify"):
        verify_aws(proof["document"], proof["signature"], AwsIdentity().cert_pem)
    for bad in ("", "not base64!", "A" * 9000):
        with pytest.raises(IdentityRefused) as e:
            verify_aws(proof["document"], bad, aws.cert_pem)
        assert e.value.status == 401


def test_a_signed_aws_document_without_its_fields_is_refused(aws):
    for doc in ("[1, 2]", "not json", json.dumps({"instanceId": "i-1", "region": "us-east-1"}),
                json.dumps({"instanceId": 7, "accountId": "1", "region": "us-east-1"})):
        with pytest.raises(IdentityRefused) as e:
            verify_aws(doc, aws.sign(doc), aws.cert_pem)
        assert e.value.status == 401


def test_a_google_token_for_this_daemon_names_its_instance_by_zone_and_name(google):
    token = google.token("burstd-gcp1-x", "europe-west4-a", "proj", AUD)
    assert verify_gcp(token, google.certs, AUD) == InstanceIdentity("gcp", "europe-west4-a/burstd-gcp1-x", "proj",
                                                                    "europe-west4-a")


@pytest.mark.parametrize("change", ["audience", "issuer", "expired", "key", "not full", "tampered"])
def test_a_google_token_for_another_audience_issuer_key_or_time_is_refused(google, change):
    kw: dict = {}
    certs = google.certs
    if change == "audience":
        kw["audience"] = "https://other.example.org"
    elif change == "issuer":
        kw["iss"] = "https://evil.example.org"
    elif change == "expired":
        kw["issued"], kw["lifetime_s"] = 1_700_000_000, 3600
    elif change == "key":
        certs = {google.kid: GoogleIdentity().cert_pem.decode()}
    elif change == "not full":
        kw["full"] = False
    token = google.token("n", "europe-west4-a", "proj", kw.pop("audience", AUD), **kw)
    if change == "tampered":
        head, body, sig = token.split(".")
        token = ".".join([head, body[:-4] + ("AAAA" if body[-4:] != "AAAA" else "BBBB"), sig])
    with pytest.raises(IdentityRefused) as e:
        verify_gcp(token, certs, AUD)
    assert e.value.status == 401


def _lease(state=LeaseState.BOOTING, instance="i-0abc", pool="aws-spot", node="aws1") -> Lease:
    return Lease(lease_id="L1", pool=pool, node_name=node, state=state, instance_id=instance)


def test_the_open_lease_that_launched_the_instance_enrols_only_before_its_slurmd_registers():
    me = InstanceIdentity("aws", "i-0abc", "1", "us-east-1")
    others = [_lease(instance="i-0zzz", node="aws2"), _lease(pool="gcp-spot", instance="i-0abc", node="gcp1")]
    for state in (LeaseState.LAUNCHING, LeaseState.BOOTING):
        assert lease_to_enroll(me, [*others, _lease(state)], POOLS).node_name == "aws1"
    for state in (LeaseState.READY, LeaseState.DRAINING, LeaseState.TERMINATING):
        with pytest.raises(IdentityRefused, match="before its slurmd registers") as e:
            lease_to_enroll(me, [_lease(state)], POOLS)
        assert e.value.status == 403
    with pytest.raises(IdentityRefused, match="ask again") as e:
        lease_to_enroll(me, others, POOLS)  # a gang member's id not recorded yet
    assert e.value.status == 404


def test_an_instance_of_another_region_project_or_zone_is_not_this_pools():
    with pytest.raises(IdentityRefused, match="us-west-2") as e:
        lease_to_enroll(InstanceIdentity("aws", "i-0abc", "1", "us-west-2"), [_lease()], POOLS)
    assert e.value.status == 403
    gcp = _lease(pool="gcp-spot", instance="europe-west4-a/n", node="gcp1")
    assert lease_to_enroll(InstanceIdentity("gcp", "europe-west4-a/n", "proj", "europe-west4-a"), [gcp], POOLS)
    with pytest.raises(IdentityRefused, match="not in pool gcp-spot"):
        lease_to_enroll(InstanceIdentity("gcp", "europe-west4-a/n", "other-proj", "europe-west4-a"), [gcp], POOLS)


def test_google_keys_are_kept_and_an_unknown_key_id_refetches_at_most_once_a_minute(google):
    now = [0.0]
    fetched: list[str] = []

    def fetch(url):
        fetched.append(url)
        return google.certs

    keys = GoogleKeys("https://certs.example", fetch=fetch, clock=lambda: now[0])
    token = google.token("n", "z", "p", AUD)
    assert keys.for_token(token) == google.certs and keys.for_token(token) == google.certs
    assert len(fetched) == 1
    stranger = GoogleIdentity()
    stranger.kid = "unknown"
    for _ in range(50):  # forged key ids: no fetch storm
        keys.for_token(stranger.token("n", "z", "p", AUD))
    assert len(fetched) == 1
    now[0] = 61
    keys.for_token(stranger.token("n", "z", "p", AUD))
    assert len(fetched) == 2
    now[0] = 61 + 3601
    keys.for_token(token)
    assert len(fetched) == 3  # kept an hour, then read again (Google rotates its keys)
