"""LocalProvider construction, address plan and prices (no root, nothing created)."""

from __future__ import annotations

import pytest

from burstd.config import parse_config


def test_local_provider_is_built_like_the_other_providers_and_maps_nodes_to_addresses(tmp_path):
    from burstd.providers.base import ErrorKind, ProviderError
    from burstd.providers.local.provider import LocalProvider, instance_id_for

    conf = parse_config({
        "cluster": {"id": "site"}, "daemon": {"state_dir": str(tmp_path)},
        "pools": [{"name": "p", "provider": "local", "partition": "cloud", "node_prefix": "cn",
                   "node_count": 3, "price_per_hour": 0.5, "max_nodes": 2,
                   "instance_types": [{"name": "a", "cpus": 2, "memory_mb": 1000},
                                      {"name": "b", "cpus": 4, "memory_mb": 2000, "price_per_hour": 0.9}],
                   "local": {"subnet": "10.9.0.0/24", "first_host": 50}}],
    })
    prov = LocalProvider(conf.pool("p"), conf)
    assert prov.records_dir == tmp_path / "local" / "p" and prov.capacity == 2
    assert prov.address_of("cn3") == "10.9.0.52/24" and prov.conf_server == "10.9.0.1:6817"
    assert sorted(prov.prices().values()) == [500_000, 900_000]
    assert instance_id_for("L1") == instance_id_for("L1") != instance_id_for("L2")
    for bad in ("cn4", "cn0", "other1", "cn"):
        with pytest.raises(ProviderError) as err:
            prov.address_of(bad)
        assert err.value.kind is ErrorKind.CONFIG
    assert prov.list_instances() == []
