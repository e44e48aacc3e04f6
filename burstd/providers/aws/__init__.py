"""AWS provider: EC2 Fleet ``instant`` spot launches (``pip install burstd[aws]``)."""

from burstd.providers.aws.provider import AwsProvider, build_fleet_request

__all__ = ["AwsProvider", "build_fleet_request"]
