"""`burstctl testbed image`: the bed's default cloud image of a release, from the cache (built only when missing)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from burstd.cli.app import app
from burstd.image import cache
from burstd.image.recipe import MARK
from burstd.testbed.cloud_image import default_spec


def test_an_image_in_the_cache_is_named_and_not_built_again(tmp_path, monkeypatch):
    monkeypatch.setattr(cache, "IMAGES_ROOT", tmp_path)
    folder = cache.image_dir(default_spec("24.11"), "24.11")  # the base with this burstd
    assert folder.name.startswith(cache.base_dir(default_spec("24.11"), "24.11").name + ".burstd-")
    (folder / "rootfs" / "etc").mkdir(parents=True)
    (folder / "rootfs" / MARK.lstrip("/")).write_text("{}")
    r = CliRunner().invoke(app, ["testbed", "image", "--slurm-release", "24.11", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output) == {"slurm_release": "24.11", "image": str(folder), "built_now": False}
    r = CliRunner().invoke(app, ["testbed", "image", "--slurm-release", "24.11"])
    assert r.output.strip() == str(folder)


def test_a_release_burstd_builds_no_image_for_is_refused_naming_the_choices():
    r = CliRunner().invoke(app, ["testbed", "image", "--slurm-release", "9.9"])
    assert r.exit_code == 2 and "'9.9': one of 22.05, 24.11, 26.05" in r.output
