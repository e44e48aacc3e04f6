"""A node's identity proof is outside input (``POST /v1/enroll`` is open to anyone): hostile documents,
signatures and tokens, and mutations of genuine ones, give an identity only when genuine, else
``IdentityRefused`` with status 401; never another exception."""

from __future__ import annotations

import base64
import json
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from burstd.daemon.node_identity import IdentityRefused, verify_aws, verify_gcp
from tests.fakes.instance_identity import AwsIdentity, GoogleIdentity

EXAMPLES = int(os.environ.get("BURSTD_FUZZ_EXAMPLES", "150"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                               HealthCheck.function_scoped_fixture])
AUD = "https://head.example.org:8787"
AWS, GOOGLE = AwsIdentity(), GoogleIdentity()
GENUINE_DOC = AWS.document("i-0abc")
GENUINE_TOKEN = GOOGLE.token("n", "europe-west4-a", "proj", AUD, lifetime_s=10 * 365 * 86400)

json_scalar = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=20))
json_doc = st.dictionaries(st.sampled_from(["instanceId", "accountId", "region", "x"]), json_scalar, max_size=4)
b64ish = st.one_of(st.text(max_size=400), st.binary(max_size=300).map(lambda b: base64.b64encode(b).decode()))


def _refused_or(genuine: bool, call):
    try:
        identity = call()
    except IdentityRefused as exc:
        assert exc.status == 401 and str(exc)
        return None
    assert genuine, f"accepted a forged proof: {identity}"
    return identity


@FUZZ
@given(st.one_of(st.text(max_size=600), json_doc.map(json.dumps)), b64ish)
def test_any_aws_document_and_signature_are_refused_unless_signed(doc, signature):
    _refused_or(False, lambda: verify_aws(doc, signature, AWS.cert_pem))


@FUZZ
@given(json_doc.map(json.dumps))
def test_a_signed_aws_document_of_any_shape_gives_an_identity_or_401(doc):
    _refused_or(True, lambda: verify_aws(doc, AWS.sign(doc), AWS.cert_pem))


@FUZZ
@given(st.integers(0, len(GENUINE_DOC) - 1), st.characters(codec="ascii"))
def test_one_changed_character_of_a_signed_aws_document_is_refused(at, char):
    changed = GENUINE_DOC[:at] + char + GENUINE_DOC[at + 1:]
    _refused_or(changed == GENUINE_DOC, lambda: verify_aws(changed, AWS.sign(GENUINE_DOC), AWS.cert_pem))


@FUZZ
@given(st.one_of(st.text(max_size=600), st.lists(b64ish, min_size=3, max_size=3).map(".".join),
                 st.tuples(st.integers(0, len(GENUINE_TOKEN) - 1), st.characters(codec="ascii")).map(
                     lambda t: GENUINE_TOKEN[:t[0]] + t[1] + GENUINE_TOKEN[t[0] + 1:])))
def test_any_google_token_is_refused_unless_google_signed_it_for_this_audience(token):
    identity = _refused_or(_same_token(token), lambda: verify_gcp(token, GOOGLE.certs, AUD))
    if identity is not None:
        assert identity.instance_id == "europe-west4-a/n"


def _same_token(token: str) -> bool:
    """The genuine token, or one that differs only in a signature character's unused low bits (base64 decodes
    both to the same signature, so both are genuine)."""
    signed, _, sig = token.rpartition(".")
    g_signed, _, g_sig = GENUINE_TOKEN.rpartition(".")
    try:
        return signed == g_signed and base64.urlsafe_b64decode(sig + "==") == base64.urlsafe_b64decode(g_sig + "==")
    except ValueError:
        return False


@pytest.mark.parametrize("token", [GENUINE_TOKEN])
def test_the_genuine_token_the_fuzzing_mutates_is_accepted(token):
    assert verify_gcp(token, GOOGLE.certs, AUD).account == "proj"
