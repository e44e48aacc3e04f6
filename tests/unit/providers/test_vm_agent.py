"""The agent of an image VM (providers/local/vm_agent.py): its user data, its link to the head (real unix sockets,
a real metadata server), checked without a VM; the live VM is tests/integration/test_image_vm_bed.py."""

from __future__ import annotations

import asyncio
import os
import stat
import subprocess
import threading
import tomllib
from pathlib import Path

import httpx
import pytest

from burstd.config import AgentConfig, parse_config
from burstd.providers.local import vm_agent
from burstd.providers.local.metadata import Identity, MetadataServer


def _config(tmp_path: Path, **agent):
    return parse_config({"cluster": {"id": "c1"}, "daemon": {"state_dir": str(tmp_path / "state")},
                         "api": {"socket": str(tmp_path / "head" / "burstd.sock")}, "agent": agent})


def test_the_user_data_holds_the_agents_settings_with_the_daemon_behind_the_vms_link_and_no_head_path(tmp_path):
    cfg = _config(tmp_path, poll_interval_s=0.5, deadman_s=120, signal="TERM",
                  standby_daemon_urls=["unix:/run/other-head/burstd.sock", "https://head-b:8787"])
    text = vm_agent.user_data(cfg, "cloud3", 1338)
    assert str(tmp_path) not in text and "/run/other-head" not in text  # no path of the head's
    agent = tomllib.loads(text)["agent"]
    assert agent["node_name"] == "cloud3" and agent["metadata_url"] == "http://169.254.169.254:1338"
    assert agent["daemon_url"] == "unix:/run/burstd-boot/daemon-0.sock"
    assert agent["standby_daemon_urls"] == ["unix:/run/burstd-boot/daemon-1.sock", "https://head-b:8787"]
    assert agent["poweroff_command"] == ["touch", "/run/burstd-boot/poweroff"]
    assert (agent["poll_interval_s"], agent["deadman_s"], agent["signal"]) == (0.5, 120, "TERM")
    assert agent["daemon_token_file"] == "/run/burstd-boot/agent.token"  # handed in by the boot, never in here
    AgentConfig.model_validate(agent)  # the agent accepts it as it is
    # each unix socket of the head is relayed under its in-VM name, to that daemon's nodes' socket (tokens only:
    # the relay is root on the head, which the control socket would take for an admin); an https daemon is
    # reached over the network
    assert vm_agent.relays(vm_agent.daemon_urls(cfg)) == {
        "daemon-0.sock": str(tmp_path / "head" / "burstd.agents.sock"),
        "daemon-1.sock": "/run/other-head/burstd.agents.sock"}
    assert "daemon_token_file" not in tomllib.loads(vm_agent.user_data(cfg, "cloud3", 1338, token=False))["agent"]


def test_the_metadata_endpoint_serves_the_user_data_to_an_imdsv2_caller(tmp_path):
    srv = MetadataServer(tmp_path, Identity("i-1", "cloud1"), "127.0.0.1", 0).start()
    try:
        with httpx.Client(base_url=srv.url, trust_env=False) as c:
            token = c.put("/latest/api/token", headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"}).text
            headers = {"X-aws-ec2-metadata-token": token}
            assert c.get("/latest/user-data", headers=headers).status_code == 404  # none handed in
            (tmp_path / vm_agent.USER_DATA).write_text('[agent]\nnode_name = "cloud1"\n')
            assert c.get("/latest/user-data").status_code == 401  # IMDSv2: no token, no answer
            assert c.get("/latest/user-data", headers=headers).text == '[agent]\nnode_name = "cloud1"\n'
    finally:
        srv.stop()


def test_the_starter_is_valid_shell_and_runs_the_images_agent_with_the_fetched_settings():
    script = vm_agent.starter_script()
    assert subprocess.run(["sh", "-n", "-c", script], check=False).returncode == 0
    assert "/latest/user-data" in script and "X-aws-ec2-metadata-token" in script
    assert f"exec {vm_agent.IMAGE_AGENT} --config /etc/burstd/burstd.toml" in script
    assert "umask 077" in script.split("/etc/burstd/burstd.toml")[0]  # the settings file is root's only


def _echo_server(path: Path, seen: list[bytes]) -> tuple[asyncio.AbstractEventLoop, threading.Thread]:
    """A unix-socket server (the daemon's place) that answers each request in upper case, in its own loop."""
    loop = asyncio.new_event_loop()
    ready = threading.Event()

    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        data = await r.read(1024)
        seen.append(data)
        w.write(data.upper())
        await w.drain()
        w.close()

    async def run() -> None:
        await asyncio.start_unix_server(handle, path=str(path))
        ready.set()

    thread = threading.Thread(target=lambda: (loop.run_until_complete(run()), loop.run_forever()), daemon=True)
    thread.start()
    assert ready.wait(5)
    return loop, thread


def test_the_link_relays_the_daemons_socket_into_the_vm_for_root_only_and_sees_the_guests_power_off(tmp_path):
    boot = tmp_path / "vm" / "boot"
    boot.mkdir(parents=True)
    daemon_sock = tmp_path / "daemon.sock"
    seen: list[bytes] = []
    loop, _ = _echo_server(daemon_sock, seen)
    powered_off = threading.Event()
    cwd = os.getcwd()
    os.chdir(boot)  # as `vm_agent link` runs
    try:
        async def scenario() -> bytes:
            link = asyncio.create_task(vm_agent.serve_link(boot, {"daemon-0.sock": str(daemon_sock)},
                                                           powered_off.set, poll_s=0.05))
            for _ in range(100):
                if (boot / "daemon-0.sock").exists():
                    break
                await asyncio.sleep(0.02)
            mode = stat.S_IMODE((boot / "daemon-0.sock").stat().st_mode)
            assert mode == 0o600, oct(mode)
            r, w = await asyncio.open_unix_connection(str(boot / "daemon-0.sock"))
            w.write(b"get /healthz")
            await w.drain()
            answer = await asyncio.wait_for(r.read(1024), 5)
            w.close()
            assert not link.done()
            (boot / vm_agent.POWEROFF).touch()  # the guest's dead-man switch
            await asyncio.wait_for(link, 5)
            return answer

        assert asyncio.run(scenario()) == b"GET /HEALTHZ"
        assert seen == [b"get /healthz"] and powered_off.is_set()
    finally:
        os.chdir(cwd)
        loop.call_soon_threadsafe(loop.stop)


def test_a_relay_to_a_daemon_that_is_not_there_closes_the_callers_connection(tmp_path):
    boot = tmp_path / "boot"
    boot.mkdir()
    cwd = os.getcwd()
    os.chdir(boot)
    try:
        async def scenario() -> bytes:
            link = asyncio.create_task(vm_agent.serve_link(boot, {"daemon-0.sock": str(tmp_path / "none.sock")},
                                                           lambda: None, poll_s=0.05))
            for _ in range(100):
                if (boot / "daemon-0.sock").exists():
                    break
                await asyncio.sleep(0.02)
            r, w = await asyncio.open_unix_connection(str(boot / "daemon-0.sock"))
            w.write(b"GET / HTTP/1.1\r\n\r\n")
            try:  # closed (EOF, or a reset: the request was not read): the agent counts the daemon unreachable
                answer = await asyncio.wait_for(r.read(), 5)
            except ConnectionResetError:
                answer = b""
            (boot / vm_agent.POWEROFF).touch()
            await asyncio.wait_for(link, 5)
            return answer

        assert asyncio.run(scenario()) == b""
    finally:
        os.chdir(cwd)


@pytest.mark.parametrize("bad", ["daemon.sock", "../x.sock=/run/s", "a/b.sock=/run/s", "d.sock=relative"])
def test_a_relay_that_is_not_a_socket_name_and_an_absolute_target_is_refused(bad):
    with pytest.raises(SystemExit):
        vm_agent.main(["link", "--vm-dir", "/nonexistent", "--records-dir", "/x", "--netns", "n", "--relay", bad])
