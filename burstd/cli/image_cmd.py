"""``burstctl image build | fingerprint | check``: node images from one recipe, and the parity gate's facts.

    burstctl image build --provider aws --slurm-release 22.05 --out img-aws   # Packer template + first-boot files
    burstctl image build --provider local --slurm-release 24.11 --out img     # a Debian rootfs (root, minutes)
    burstctl image fingerprint > /var/lib/burstd/parity-reference.json        # on an on-prem compute node
    burstctl image check --reference /var/lib/burstd/parity-reference.json    # this machine against it

The spec and the gate's settings come from ``--spec FILE`` (a TOML file with [image] and [parity]), else from the
site config (``--config``, $BURSTD_CONFIG, /etc/burstd/burstd.toml) when it exists, else the defaults.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from burstd.cli.common import ConfigOption, JsonFlag, err_console, fail, print_json, sub_app
from burstd.config import ConfigError, config_path, load_config, read_toml, validate_model
from burstd.image.spec import ImageFile

SpecOption = typer.Option(None, "--spec", help="TOML file with [image] and [parity] (instead of the site config)")


def load_image_file(spec: str | None, config: str | None) -> tuple[ImageFile, str]:
    """The spec and gate settings, and where they came from; exit 2 naming file and key on a bad one."""
    try:
        if spec:
            return validate_model(ImageFile, read_toml(Path(spec)), spec), spec
        path = config_path(config)
        if config or path.exists():
            cfg = load_config(path)
            return ImageFile(image=cfg.image, parity=cfg.parity), str(path)
    except ConfigError as exc:
        fail(str(exc), 2)
    return ImageFile(), "the built-in defaults"


def _read_facts(path: str) -> dict[str, str]:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        fail(f"{path}: not a fingerprint (JSON object of fact -> value): {exc}", 2)
    if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
        fail(f"{path}: not a fingerprint (JSON object of fact -> value, every value a string)", 2)
    return data


def register(app: typer.Typer) -> None:
    image_app = sub_app("Build node images from one spec; fingerprint a machine for the parity gate.")
    app.add_typer(image_app, name="image")

    @image_app.command("build")
    def build(
        provider: str = typer.Option(..., "--provider", help="local (a Debian rootfs), aws or gcp (Packer inputs)"),
        slurm_release: str = typer.Option(None, "--slurm-release", help="22.05, 24.11 or 26.05 "
                                                                         "[default: image.slurm_release]"),
        out: Path = typer.Option(..., "--out", help="Folder to build or render into"),
        agent_wheel: Path = typer.Option(None, "--agent-wheel", help="burstd wheel for the image's agent "
                                                                     "[default: built from this burstd]"),
        spec: str = SpecOption,
        config: str = ConfigOption,
    ) -> None:
        """Build the local provider's rootfs into OUT, or render the AWS / GCP Packer template and first-boot
        files into OUT. No cluster secret goes into any of them."""
        from burstd.image.build import build_image
        from burstd.image.recipe import ImageBuildFailed, ImageError, target
        from burstd.testbed.host import BedError

        image_file, source = load_image_file(spec, config)
        try:
            tgt = target(image_file.image, provider, slurm_release)
            made = build_image(image_file.image, tgt, out, agent_wheel)
        except ImageError as exc:  # the spec or the options
            fail(str(exc), 2)
        except (ImageBuildFailed, BedError) as exc:  # a build step (BedError: the bed's debootstrap / chroot run)
            fail(str(exc), 1)
        err_console.print(f"spec: {source}; Slurm {tgt.slurm_release} (Debian {tgt.suite}), provider {provider}")
        for path in made:
            typer.echo(str(path))

    @image_app.command("fingerprint")
    def fingerprint(
        job_python: str = typer.Option(None, "--job-python", help="The job environment's Python "
                                                                  "[default: parity.job_python]"),
        spec: str = SpecOption,
        config: str = ConfigOption,
    ) -> None:
        """Print this machine's fingerprint as JSON (run on an on-prem compute node, it is the reference)."""
        from burstd.agent.fingerprint import fingerprint as measure

        parity = load_image_file(spec, config)[0].parity
        print_json(measure(job_python=job_python or parity.job_python, checks=parity.checks))

    @image_app.command("check")
    def check(
        reference: str = typer.Option(None, "--reference", help="The on-prem fingerprint [default: "
                                                                "parity.reference_file]"),
        facts: str = typer.Option(None, "--facts", help="A fingerprint to check [default: this machine's]"),
        as_json: bool = JsonFlag,
        spec: str = SpecOption,
        config: str = ConfigOption,
    ) -> None:
        """Compare this machine (or --facts) with the reference: exit 0 when it matches, 1 naming each
        difference the site does not allow."""
        from burstd.agent.fingerprint import fingerprint as measure
        from burstd.domain.parity import compare

        parity = load_image_file(spec, config)[0].parity
        ref_path = reference or parity.reference_file
        if not ref_path:
            fail("no reference: pass --reference or set parity.reference_file", 2)
        node = _read_facts(facts) if facts else measure(job_python=parity.job_python, checks=parity.checks)
        diffs = compare(_read_facts(ref_path), node, parity.allow)
        if as_json:
            print_json([{"key": d.key, "reference": d.reference, "node": d.node, "message": d.message}
                        for d in diffs])
        else:
            for d in diffs:
                typer.echo(d.message)
        if diffs:
            raise typer.Exit(1)
