"""Cloud node shapes sized to the trace's site, and the jobs that could not burst."""

from burstd.config import parse_config
from burstd.simulate.engine import SimSetup, Simulator
from burstd.simulate.policies import default_site, make_setup, policy_config
from burstd.simulate.shapes import cannot_burst_reason, fitting_shape, site_cpus, site_cpus_per_node
from burstd.simulate.traces import TraceInfo, TraceJob


def test_site_node_shape_comes_from_the_swf_header():
    assert site_cpus_per_node(1152, 144) == 8  # SDSC-BLUE
    assert site_cpus_per_node(100, 100) == 1  # KTH-SP2
    assert site_cpus_per_node(None, None, default=8) == 8


def test_the_smallest_c5_that_holds_a_site_node_is_offered():
    assert fitting_shape(1).name == "c5.large"
    assert fitting_shape(8).name == "c5.2xlarge"
    assert fitting_shape(16).name == "c5.4xlarge"
    assert fitting_shape(500).name == "c5.24xlarge"


def test_built_in_site_for_16_cpu_nodes_offers_16_vcpu_cloud_nodes():
    cfg = default_site(False, 16)
    assert [p.cpus for p in cfg.pools] == [16]
    assert cfg.pools[0].ondemand_price_per_hour == 0.68
    assert default_site(False).pools[0].price_per_hour == 0.146  # the 8-CPU site keeps its tuned prices


def test_reasons_name_what_does_not_fit():
    pools = [(8, 0, 100)]
    assert cannot_burst_reason(8, 0, 3, pools) == ""
    assert cannot_burst_reason(16, 0, 1, pools) == "needs 16 CPUs a node, largest cloud node has 8"
    assert cannot_burst_reason(8, 1, 1, pools) == "needs 1 GPUs a node, largest cloud node has 0"
    assert "nodes" in cannot_burst_reason(8, 0, 101, pools)
    assert cannot_burst_reason(1, 0, 1, []) == "no cloud pools"


def test_simulator_reports_jobs_a_too_small_cloud_node_keeps_home():
    cfg = parse_config({
        "pools": [{"name": "small", "provider": "local", "partition": "cloud", "node_prefix": "c", "node_count": 10,
                   "instance_types": [{"name": "t", "cpus": 8, "memory_mb": 1000}], "market": "on-demand",
                   "price_per_hour": 1.0}],
        "budget": {"default_account_usd": 1e9},
        "policy": {"boot_overhead_s": 0, "waiting": {"min_wait_s": 0}},
    })
    setup = SimSetup(policy_config(cfg, "ondemand-all"), False, 64, 16, boot_s=0, cycle_s=60.0)
    jobs = [TraceJob(1, 0, 600, 600, 16), TraceJob(2, 0, 600, 600, 8), TraceJob(3, 0, 600, 600, 32)]
    res = Simulator(setup, jobs, "ondemand-all").run()
    assert res.cannot_burst == {"needs 16 CPUs a node, largest cloud node has 8": 2}


def test_a_header_with_nodes_and_no_processors_counts_one_cpu_a_node():
    # the Lublin-Feitelson model's files: "MaxNodes: 256" and no MaxProcs; the site is 256 CPUs, not 1,024
    assert site_cpus_per_node(None, 256) == 1 and site_cpus(None, 256) == 256
    assert site_cpus(1152, 144) == 1152 and site_cpus(None, None) == 1024
    setup = make_setup(TraceInfo("swf", max_nodes=256), False, None, None, None, None)
    assert (setup.onprem_units, setup.units_per_node) == (256, 1)
    assert make_setup(TraceInfo("swf", max_nodes=256), False, None, 64, None, None).onprem_units == 64
