"""``burstctl testbed up|down|status``: a real Slurm cluster on this machine (docs/testbed.md)."""

from __future__ import annotations

from pathlib import Path

import typer

from burstd.cli.common import JsonFlag, console, fail, print_json, sub_app


def _config(name, slot, subnet, ctld_port, rest_port, state_dir, hooks, cloud_nodes, onprem_nodes,
            suspend_time, burstd_config, slurm_release=None, cloud_image=None, data_store=None):
    from burstd.testbed.config import BedConfig

    try:
        return BedConfig.from_env(
            name=name, slot=slot, subnet=subnet, ctld_port=ctld_port, rest_port=rest_port,
            state_dir=state_dir, hooks=hooks, cloud_count=cloud_nodes, onprem_count=onprem_nodes,
            suspend_time=suspend_time, slurm_release=slurm_release,
            burstd_config=burstd_config, cloud_image=cloud_image, data_store=data_store,
        )
    except ValueError as exc:
        fail(f"bad test bed settings: {exc}", 2)


NameOpt = typer.Option(None, "--name", help="Bed name [default: $BURSTD_BED_NAME, else burstd].")
SlotOpt = typer.Option(None, "--slot", help="The slot the bed was brought up with, as for up [default: "
                       "$BURSTD_BED_SLOT]; a bed up in another slot is refused, not torn down.")
StateOpt = typer.Option(None, "--state-dir", help="State dir [default: /var/lib/burstd-testbed/NAME].")


def register(app: typer.Typer) -> None:
    tb = sub_app("A real Slurm test bed on this machine (root): up, down, status.")
    app.add_typer(tb, name="testbed")

    @tb.command("up")
    def up(
        name: str = NameOpt,
        slot: int = typer.Option(None, "--slot", help="Picks subnet 10.(77+N).0.0/24 and ports 6817+100N... "
                                                      "[default: $BURSTD_BED_SLOT, else 0]"),
        subnet: str = typer.Option(None, "--subnet", help="Bed network [default: 10.(77+slot).0.0/24]"),
        ctld_port: int = typer.Option(None, "--ctld-port", help="slurmctld port [default: 6817+100*slot]"),
        rest_port: int = typer.Option(None, "--rest-port", help="slurmrestd port [default: 6820+100*slot]"),
        state_dir: str = StateOpt,
        hooks: str = typer.Option(None, "--hooks",
                                  help="Power-saving hooks: stub (log), bare, burstd [default: stub]."),
        cloud_nodes: int = typer.Option(None, "--cloud-nodes", help="CLOUD nodes in the cloud partition [default: 4]."),
        onprem_nodes: int = typer.Option(None, "--onprem-nodes", help="On-prem nodes [default: 2]."),
        suspend_time: int = typer.Option(None, "--suspend-time", help="SuspendTime in seconds [default: 30]."),
        burstd_config: str = typer.Option(None, "--burstd-config",
                                          help="BURSTD_CONFIG for burstd hooks [default: the bed's own burstd.toml]."),
        slurm_release: str = typer.Option(None, "--slurm-release",
                                          help="22.05 (the host's), 24.11 or 26.05 (Debian chroots the bed "
                                               "builds once) [env BURSTD_BED_SLURM_RELEASE; default the host's]"),
        cloud_image: str = typer.Option(None, "--cloud-image",
                                        help="Boot the cloud VMs from this node image (a DIR of `burstctl image "
                                             "build --provider local --out DIR`; 'default': the bed's release, "
                                             "built once and cached) [env BURSTD_BED_CLOUD_IMAGE; default: they "
                                             "share the head's files]"),
        data_store: bool = typer.Option(None, "--data-store",
                                        help="Start a local S3 store behind a metered link; the cloud pool stages "
                                             "burst jobs' declared data through it, slurm.conf gets the data "
                                             "Prolog/Epilog (docs/data.md) [env BURSTD_BED_DATA_STORE]"),
        no_install: bool = typer.Option(False, "--no-install", help="Fail instead of installing Slurm."),
        as_json: bool = JsonFlag,
    ) -> None:
        """Bring the bed up (idempotent). Installs Slurm first when it is missing."""
        from burstd.testbed.bed import Bed, BedError

        cfg = _config(name, slot, subnet, ctld_port, rest_port, state_dir, hooks, cloud_nodes, onprem_nodes,
                      suspend_time, burstd_config, slurm_release,
                      cloud_image if cloud_image in (None, "default") else str(Path(cloud_image).resolve()),
                      data_store)
        bed = Bed(cfg)
        try:
            bed.up(install=not no_install)
        except BedError as exc:
            fail(str(exc))
        st = bed.status()
        if as_json:
            print_json(st)
            return
        console.print(f"[green]bed {bed.name} is up[/]: Slurm {st['slurm_version']}  SLURM_CONF={bed.conf_path}  "
                      f"rest {bed.rest_url}  hooks {st['hooks']}  accounting {'on' if st['accounting'] else 'off'}")
        for line in next_steps(bed, st["hooks"]):
            console.print(line, highlight=False, soft_wrap=True)

    @tb.command("down")
    def down(name: str = NameOpt, state_dir: str = StateOpt, slot: int = SlotOpt,
             as_json: bool = JsonFlag) -> None:
        """Stop everything the bed started; remove its namespaces, bridge and state (logs are kept)."""
        from burstd.testbed.bed import BedError

        bed = _load(name, state_dir, slot)
        try:
            result = bed.down()
        except BedError as exc:
            fail(str(exc))
        if as_json:
            print_json({"name": bed.name, **result})
            return
        console.print(f"bed {bed.name} is down (removed {len(result['namespaces'])} namespaces)")

    @tb.command("hooks")
    def hooks(mode: str = typer.Argument(..., help="stub | bare | burstd"), name: str = NameOpt,
              state_dir: str = StateOpt) -> None:
        """Switch the power-saving hooks of a running bed (the scripts are rewritten in place)."""
        from burstd.testbed.bed import BedError

        bed = _load(name, state_dir)
        if not bed.is_up():
            fail(f"bed {bed.name} is not up")
        try:
            bed.set_hooks(mode)
        except BedError as exc:
            fail(str(exc), 2)
        console.print(f"bed {bed.name}: hooks {mode}")

    @tb.command("status")
    def status(name: str = NameOpt, state_dir: str = StateOpt,
               as_json: bool = JsonFlag) -> None:
        """Show whether the bed is up, its daemons, nodes and namespace VMs. Exit 3 when it is down."""
        bed = _load(name, state_dir)
        st = bed.status()
        if as_json:
            print_json(st)
        else:
            from rich.table import Table

            console.print(f"bed [bold]{st['name']}[/]: {'[green]up' if st['up'] else '[red]down'}[/]  "
                          f"state {st['state_dir']}  hooks {st['hooks']}")
            console.print(f"  slurmctld pid {st['slurmctld']['pid']} on {st['slurmctld']['addr']}:"
                          f"{st['slurmctld']['port']}  slurmrestd pid {st['slurmrestd']['pid']} "
                          f"{st['slurmrestd']['url']}", highlight=False)
            table = Table("node", "partitions", "state", "address", "reason")
            for node, info in st["nodes"].items():
                table.add_row(node, ",".join(info["partitions"]), info["state"], info["address"],
                              info["reason"])
            if st["nodes"]:
                console.print(table)
            console.print(f"  namespaces: {', '.join(st['namespaces']) or 'none'}")
        if not st["up"]:
            raise typer.Exit(3)


    @tb.command("image")
    def image(slurm_release: str = typer.Option("22.05", "--slurm-release", help="22.05, 24.11 or 26.05"),
              as_json: bool = JsonFlag) -> None:
        """Build the bed's default cloud image of a release into the image cache, unless it is there (minutes the
        first time; CI runs it once: scripts/build-bed-images.sh). Prints the folder `--cloud-image` takes."""
        from burstd.image import cache
        from burstd.image.recipe import ImageBuildFailed, ImageError
        from burstd.testbed.cloud_image import default_spec
        from burstd.testbed.host import BedError

        from burstd.image.spec import DEBIAN_SUITES

        if slurm_release not in DEBIAN_SUITES:
            fail(f"--slurm-release {slurm_release!r}: one of {', '.join(DEBIAN_SUITES)}", 2)
        try:
            spec = default_spec(slurm_release)
            was_built = cache.is_built(cache.image_dir(spec, slurm_release))
            folder = cache.ensure(spec, slurm_release)
        except (ValueError, ImageError, ImageBuildFailed, BedError, RuntimeError) as exc:
            fail(str(exc))
        if as_json:
            print_json({"slurm_release": slurm_release, "image": str(folder), "built_now": not was_built})
        else:
            typer.echo(str(folder))


    @tb.command("chroot")
    def chroot(slurm_release: str = typer.Option(..., "--slurm-release", help="24.11 or 26.05"),
               as_json: bool = JsonFlag) -> None:
        """Build the Debian chroot a bed of a newer release runs its Slurm from, unless it is there (root; about
        a minute each, mostly the mirror), ahead of the first bed of that release, which builds it otherwise.
        Prints the chroot's folder."""
        import os

        from burstd.testbed import release
        from burstd.testbed.host import BedError

        if slurm_release not in release.CHROOT_RELEASES:
            fail(f"--slurm-release {slurm_release!r}: one of {', '.join(release.CHROOT_RELEASES)} "
                 "(22.05 is the host's own Slurm, no chroot)", 2)
        if os.geteuid() != 0:
            fail("building a chroot needs root (debootstrap)")
        was_built = release.is_built(slurm_release)
        try:
            with release.build_lock(slurm_release):  # a bed of that release may be building it now
                root = release.ensure_chroot(slurm_release, release.CHROOT_ROOT / f"{slurm_release}-build.log")
        except BedError as exc:
            fail(str(exc))
        if as_json:
            print_json({"slurm_release": slurm_release, "chroot": str(root), "built_now": not was_built})
        else:
            typer.echo(str(root))


def next_steps(bed, hooks: str) -> list[str]:
    """What to type next: Slurm's environment, then the daemon in the foreground and burstctl against it."""
    import shlex

    cfg = shlex.quote(str(bed.burstd_config))
    lines = ["next:", f"  export SLURM_CONF={shlex.quote(str(bed.conf_path))}"]
    if hooks != "burstd":
        lines.append(f"  burstctl testbed hooks burstd --name {shlex.quote(bed.name)}"
                     "   # let Slurm's hooks call burstd")
    lines += [f"  burstd --config {cfg} --foreground   # the daemon, outside systemd (Ctrl-C stops it)",
              f"  burstctl status -c {cfg}              # in another shell",
              f"  burstctl testbed down --name {shlex.quote(bed.name)}      # when done"]
    return lines


def _load(name: str | None, state_dir: str | None, slot: int | None = None):
    """The named bed as it was brought up. ``slot`` (``--slot``, else ``BURSTD_BED_SLOT``), the same as ``up``
    took: a bed never brought up gets that slot's layout (so ``down`` cleans that slot's leftovers, never
    slot 0's), and a bed up in another slot is refused."""
    import os

    from burstd.testbed.bed import Bed
    from burstd.testbed.config import BedConfig

    name = name or os.environ.get("BURSTD_BED_NAME") or "burstd"
    if slot is None and os.environ.get("BURSTD_BED_SLOT", "").strip():
        try:
            slot = int(os.environ["BURSTD_BED_SLOT"])
        except ValueError:
            fail(f"BURSTD_BED_SLOT must be an integer, got {os.environ['BURSTD_BED_SLOT']!r}", 2)
    bed = Bed.load(name, state_dir)
    if slot is None or bed.config.slot == slot:
        return bed
    if (bed.state_dir / "bed.json").exists():
        fail(f"bed {name} is up in slot {bed.config.slot}, not slot {slot}", 2)
    try:
        return Bed(BedConfig.model_validate({"name": name, "state_dir": state_dir, "slot": slot}))
    except ValueError as exc:
        fail(f"bad test bed settings: {exc}", 2)
