"""One spec renders every provider's image build: golden files pin the AWS and GCP Packer inputs, nothing secret
reaches any of them, and what the site writes is quoted word by word.

Regenerate the goldens after an intended change: BURSTD_UPDATE_GOLDEN=1 pytest tests/unit/image/test_image_recipe.py
"""

from __future__ import annotations

import base64
import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest

from burstd.config import ConfigError, parse_config, read_toml, validate_model
from burstd.image.build import render
from burstd.image.packer import template
from burstd.image.recipe import ImageError, render_install, stage_files, target
from burstd.image.spec import ImageFile, ImageSpec

ROOT = Path(__file__).resolve().parents[3]
GOLDEN = ROOT / "tests" / "golden" / "image"

SITE_SPEC = ImageSpec.model_validate({
    "slurm_release": "22.05",
    "python_packages": ["numpy==1.26.4", "fsspec>=2024.2"],
    "torch_version": "2.5.1",
    "apt_packages": ["libopenmpi3", "lmod"],
    "commands": [["ldconfig"], ["sh", "-c", "echo site > /etc/site-image"]],
})


@pytest.mark.parametrize("provider", ["aws", "gcp"])
def test_rendered_packer_inputs_match_golden(provider):
    files = render(SITE_SPEC, target(SITE_SPEC, provider, None))
    # copied as they are, not rendered: pinned by their own tests, not here
    assert files.pop("files/node-bootstrap.sh") == (ROOT / "scripts" / "node-bootstrap.sh").read_text()
    assert files.pop("files/burstd-agent.service") == (ROOT / "systemd" / "burstd-agent.service").read_text()
    folder = GOLDEN / provider
    if os.environ.get("BURSTD_UPDATE_GOLDEN"):
        for name, text in files.items():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_text(text)
    on_disk = {str(p.relative_to(folder)): p.read_text() for p in sorted(folder.rglob("*")) if p.is_file()}
    assert files == on_disk


def test_every_provider_runs_the_same_recipe_but_for_the_key_fetching_tool():
    local, aws, gcp = (render_install(SITE_SPEC, target(SITE_SPEC, p, None)) for p in ("local", "aws", "gcp"))
    assert " awscli" in aws and " awscli" not in gcp and " awscli" not in local

    def strip(text: str, provider: str) -> str:
        for word in (" awscli", f"provider {provider}", f'"provider": "{provider}"'):
            text = text.replace(word, "")
        return text.split('"spec_digest"')[0]

    assert strip(local, "local") == strip(aws, "aws") == strip(gcp, "gcp")


def test_no_long_lived_secret_reaches_any_rendered_file(tmp_path):
    """The site config names the admin token and the munge key secret; neither the token, nor any key bytes,
    nor a read of them ends up in what a build renders."""
    token = "ADMIN-TOKEN-SENTINEL-" + base64.b16encode(os.urandom(8)).decode()
    (tmp_path / "admin.token").write_text(token)
    key = os.urandom(32) + b"MUNGE-KEY-SENTINEL"
    (tmp_path / "munge.key").write_bytes(key)
    cfg = parse_config({
        "api": {"token_file": str(tmp_path / "admin.token")},
        "image": SITE_SPEC.model_dump(mode="json"),
    })
    rendered = {}
    for provider in ("aws", "gcp"):
        rendered.update({f"{provider}/{k}": v for k, v in render(cfg.image, target(cfg.image, provider, None)).items()})
    rendered.update({f"local/{k}": v for k, v in stage_files(cfg.image, target(cfg.image, "local", None)).items()})
    needles = [token, "SENTINEL", base64.b64encode(key).decode(), str(tmp_path)]
    for name, text in rendered.items():
        for needle in needles:
            assert needle not in text, f"{needle!r} leaked into {name}"
        assert "BEGIN" not in text and "PRIVATE KEY" not in text, name
    for provider in ("local", "aws", "gcp"):
        install = rendered[f"{provider}/files/install.sh" if provider != "local" else "local/install.sh"]
        # munge's package creates a key of its own: the recipe deletes it before the image is sealed
        munge_lines = [line for line in install.splitlines() if "munge.key" in line and not line.startswith("#")]
        assert munge_lines and all(line.startswith("rm -f /etc/munge/munge.key") for line in munge_lines)


def test_install_script_is_valid_bash_and_fails_on_the_first_error():
    text = render_install(SITE_SPEC, target(SITE_SPEC, "aws", None))
    subprocess.run(["bash", "-n"], input=text, text=True, check=True)
    assert "set -euo pipefail" in text


def test_site_commands_and_packages_reach_the_script_as_quoted_words():
    evil = ["echo", "$(touch /tmp/pwned)", "a;b", "`id`"]
    spec = ImageSpec(slurm_release="24.11", commands=[evil])
    text = render_install(spec, target(spec, "local", None))
    line = next(l for l in text.splitlines() if l.startswith("echo "))
    assert shlex.split(line) == evil  # each word one literal argument: no substitution, no second command
    out = subprocess.run(["bash", "-c", line], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "$(touch /tmp/pwned) a;b `id`"


@pytest.mark.parametrize(("section", "value", "key"), [
    ("python_packages", ["numpy; rm -rf /"], "image.python_packages.0"),
    ("apt_packages", ["libfoo\nbar"], "image.apt_packages.0"),
    ("commands", [["echo", "two\nlines"]], "image.commands"),
    ("slurm_release", "23.02", "image.slurm_release"),
    ("torch_index_url", "http://insecure.example/whl", "image.torch_index_url"),
    ("job_env", "relative/env", "image.job_env"),
])
def test_a_bad_spec_names_the_file_and_the_key(tmp_path, section, value, key):
    path = tmp_path / "image.toml"
    path.write_text(f"[image]\n{section} = {json.dumps(value)}\n")
    with pytest.raises(ConfigError) as err:
        validate_model(ImageFile, read_toml(path), str(path))
    line = str(err.value)
    assert line.startswith(f"{path}: ") and key.replace(".0", "[0]") in line


def test_unknown_keys_and_duplicate_checks_are_refused(tmp_path):
    path = tmp_path / "image.toml"
    path.write_text('[image]\npython_pakages = ["numpy"]\n[parity]\n'
                    'checks = [{name = "a", argv = ["true"]}, {name = "a", argv = ["false"]}]\n')
    with pytest.raises(ConfigError) as err:
        validate_model(ImageFile, read_toml(path), str(path))
    assert f"{path}: image.python_pakages: Extra inputs are not permitted" in str(err.value)
    assert f"{path}: parity.checks: check names must be unique, repeated: a" in str(err.value)


def test_the_release_comes_from_the_option_or_the_spec_and_must_be_buildable():
    assert target(ImageSpec(slurm_release="22.05"), "aws", "24.11").suite == "trixie"
    assert target(ImageSpec(slurm_release="22.05"), "gcp", None).suite == "bookworm"
    with pytest.raises(ImageError, match="--slurm-release"):
        target(ImageSpec(), "aws", None)
    with pytest.raises(ImageError, match="23.02"):
        target(ImageSpec(), "aws", "23.02")
    with pytest.raises(ImageError, match="--provider"):
        target(ImageSpec(), "azure", "22.05")
    for provider in ("aws", "gcp"):  # sid has no official cloud image
        with pytest.raises(ImageError, match="--provider local"):
            template(ImageSpec(), target(ImageSpec(), provider, "26.05"))


def test_templates_start_from_the_suites_debian_image_and_tag_the_release():
    spec = ImageSpec(slurm_release="24.11")
    aws = template(spec, target(spec, "aws", None))["source"]["amazon-ebs"]["burstd-node"]
    assert aws["source_ami_filter"]["filters"]["name"] == "debian-13-amd64-*"
    assert aws["tags"]["burstd:slurm-release"] == "24.11"
    gcp = template(spec, target(spec, "gcp", None))["source"]["googlecompute"]["burstd-node"]
    assert gcp["source_image_family"] == "debian-13" and gcp["image_family"] == "burstd-node-slurm-24-11"
