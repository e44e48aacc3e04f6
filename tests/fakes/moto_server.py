"""pytest fixtures: a real moto server on a free 127.0.0.1 port, with the fault proxy in front.

    def test_x(aws_env):  # aws_env.url is the proxy; aws_env.faults the controls; aws_env.session boto3
        ...
"""

from __future__ import annotations

import json
import urllib.request
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.fakes.ec2_faults import Ec2FaultProxy

# Distinctive fake credentials: the secret scan looks for them in logs and request bodies.
FAKE_ACCESS_KEY = "AKIABURSTDFAKE000001"
FAKE_SECRET_KEY = "burstdFakeSecretKey/DoNotLog+0123456789abcd"
REGION = "us-east-1"


@dataclass
class AwsEnv:
    moto_url: str
    url: str  # the fault proxy: give this to boto3
    faults: Ec2FaultProxy
    _loader: Any = field(default=None, repr=False)
    _clients: dict[tuple[str, bool], Any] = field(default_factory=dict, repr=False)

    def session(self):
        """A new boto3 session with the fake credentials. Every session of the run reads botocore's service models
        through one loader: a fresh session parses EC2's model again (megabytes of JSON, about 0.25 CPU-s), and
        the tests make hundreds of them (docs/testbed.md, round twelve)."""
        import boto3
        import botocore.loaders
        import botocore.session

        if self._loader is None:
            self._loader = botocore.loaders.create_loader()
        core = botocore.session.get_session()
        core.register_component("data_loader", self._loader)
        return boto3.session.Session(aws_access_key_id=FAKE_ACCESS_KEY, aws_secret_access_key=FAKE_SECRET_KEY,
                                     region_name=REGION, botocore_session=core)

    def client(self, service: str = "ec2", direct: bool = False):
        """A client to moto (``direct``) or to the fault proxy, made once: boto3's clients are thread-safe, and what
        moto holds is reset between tests, not the client."""
        key = (service, direct)
        if key not in self._clients:
            self._clients[key] = self.session().client(service, endpoint_url=self.moto_url if direct else self.url)
        return self._clients[key]

    def reset(self) -> None:
        """Forget every resource and fault. The reset takes well under a second, but once in a CI run its answer
        never came within 30 s (the server thread busy behind a previous test's killed daemon): ask again."""
        for attempt in range(3):
            req = urllib.request.Request(f"{self.moto_url}/moto-api/reset", data=b"", method="POST")
            try:
                urllib.request.urlopen(req, timeout=30).read()
                break
            except TimeoutError:
                if attempt == 2:
                    raise
        self.faults.reset()


@pytest.fixture(scope="session")
def moto_server():
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    proxy = Ec2FaultProxy(host, port, REGION)
    env = AwsEnv(moto_url=f"http://{host}:{port}", url=proxy.url, faults=proxy)
    try:
        yield env
    finally:
        proxy.close()
        server.stop()


@pytest.fixture
def aws_env(moto_server, monkeypatch):
    """A clean moto (reset before each test) and the fake credentials in the environment."""
    moto_server.reset()
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", FAKE_ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", FAKE_SECRET_KEY)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    for var in ("AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    yield moto_server


def dump(obj) -> str:
    return json.dumps(obj, indent=2, sort_keys=True, default=str)
