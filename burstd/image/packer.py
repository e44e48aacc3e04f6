"""Packer templates (HCL2 in its JSON syntax, ``image.pkr.json``) for the AWS and GCP images.

Both start from Debian's own cloud image of the release's suite, upload the staged files (``files/``: install.sh,
node-bootstrap.sh, burstd-agent.service, the burstd wheel) and run install.sh, the same script the local rootfs
runs. What differs per account (region, subnet, project, zone) is a Packer variable the admin passes::

    packer init DIR/image.pkr.json
    packer build -var region=eu-west-1 DIR/image.pkr.json                   # AWS
    packer build -var project_id=my-proj -var zone=europe-west1-b DIR/image.pkr.json   # GCP

Nothing secret is in a template: the build VM's temporary SSH key is Packer's, and the image's authorized_keys are
emptied at the end so the build key does not outlive the build.
"""

from __future__ import annotations

from burstd.image.recipe import STAGE_IN_IMAGE, ImageError, Target, spec_digest
from burstd.image.spec import ImageSpec

# Debian's official cloud images, by suite (sid has none: build 26.05 with --provider local)
AWS_DEBIAN_OWNER = "136693071363"
AWS_AMI_NAMES = {"bookworm": "debian-12-amd64-*", "trixie": "debian-13-amd64-*"}
GCP_IMAGE_FAMILIES = {"bookworm": "debian-12", "trixie": "debian-13"}
_STAMP = '${formatdate("YYYYMMDDhhmmss", timestamp())}'
_PLUGINS = {
    "amazon-ebs": ("amazon", {"source": "github.com/hashicorp/amazon", "version": ">= 1.3.0"}),
    "googlecompute": ("googlecompute", {"source": "github.com/hashicorp/googlecompute", "version": ">= 1.1.0"}),
}


def _provisioners(ssh_user_home: str) -> list[dict]:
    return [
        {"shell": {"inline": [f"mkdir -p {STAGE_IN_IMAGE}"]}},
        # a source ending in "/" uploads the folder's contents into the destination
        {"file": {"source": "${path.root}/files/", "destination": STAGE_IN_IMAGE}},
        {"shell": {"inline": [
            f"sudo bash {STAGE_IN_IMAGE}/install.sh {STAGE_IN_IMAGE}",
            f"sudo rm -rf {STAGE_IN_IMAGE}",
            # the build's SSH key must not let anyone into the nodes made from this image
            f"sudo sh -c 'rm -f /root/.ssh/authorized_keys {ssh_user_home}/.ssh/authorized_keys'",
        ]}},
    ]


def _template(builder: str, source: dict, variables: dict, ssh_user_home: str) -> dict:
    plugin, requirement = _PLUGINS[builder]
    return {
        "packer": {"required_plugins": {plugin: requirement}},
        "variable": variables,
        "source": {builder: {"burstd-node": source}},
        "build": {"sources": [f"source.{builder}.burstd-node"], "provisioner": _provisioners(ssh_user_home)},
    }


def _release_slug(tgt: Target) -> str:
    return tgt.slurm_release.replace(".", "-")


def aws_template(spec: ImageSpec, tgt: Target) -> dict:
    if tgt.suite not in AWS_AMI_NAMES:
        raise ImageError(f"Slurm {tgt.slurm_release} comes from Debian {tgt.suite}, which has no official AMI: "
                         "build it with --provider local")
    source = {
        "region": "${var.region}",
        "subnet_id": "${var.subnet_id}",
        "instance_type": spec.aws.instance_type,
        "source_ami_filter": {
            "filters": {"name": AWS_AMI_NAMES[tgt.suite], "architecture": "x86_64", "root-device-type": "ebs",
                        "virtualization-type": "hvm"},
            "owners": [AWS_DEBIAN_OWNER],
            "most_recent": True,
        },
        "ssh_username": "admin",
        "ami_name": f"{spec.name}-slurm-{_release_slug(tgt)}-{_STAMP}",
        "imds_support": "v2.0",  # nodes from this AMI default to IMDSv2 (the bootstrap and agent use it)
        "launch_block_device_mappings": [{"device_name": "/dev/xvda", "volume_size": spec.aws.volume_gb,
                                          "volume_type": "gp3", "delete_on_termination": True}],
        "tags": {"burstd:image": spec.name, "burstd:slurm-release": tgt.slurm_release,
                 "burstd:spec-digest": spec_digest(spec, tgt)},
    }
    variables = {"region": {"type": "string"},
                 "subnet_id": {"type": "string", "default": "", "description": "empty: the default VPC"}}
    return _template("amazon-ebs", source, variables, "/home/admin")


def gcp_template(spec: ImageSpec, tgt: Target) -> dict:
    if tgt.suite not in GCP_IMAGE_FAMILIES:
        raise ImageError(f"Slurm {tgt.slurm_release} comes from Debian {tgt.suite}, which has no official GCE "
                         "image: build it with --provider local")
    slug = _release_slug(tgt)
    source = {
        "project_id": "${var.project_id}",
        "zone": "${var.zone}",
        "source_image_family": GCP_IMAGE_FAMILIES[tgt.suite],
        "source_image_project_id": ["debian-cloud"],
        "machine_type": spec.gcp.machine_type,
        "disk_size": spec.gcp.disk_gb,
        "ssh_username": "packer",
        "image_name": f"{spec.name}-slurm-{slug}-{_STAMP}",
        "image_family": f"{spec.name}-slurm-{slug}",
        "image_labels": {"burstd-image": spec.name, "burstd-slurm-release": slug,
                         "burstd-spec-digest": spec_digest(spec, tgt)},
    }
    variables = {"project_id": {"type": "string"}, "zone": {"type": "string"}}
    return _template("googlecompute", source, variables, "/home/packer")


def template(spec: ImageSpec, tgt: Target) -> dict:
    if tgt.provider == "aws":
        return aws_template(spec, tgt)
    if tgt.provider == "gcp":
        return gcp_template(spec, tgt)
    raise ImageError(f"no Packer template for provider {tgt.provider!r}")
