"""The node image spec (``[image]``) and the parity gate's settings (``[parity]``).

Both live in the site config (``/etc/burstd/burstd.toml``) or in a TOML file of their own that holds just these
two tables (``burstctl image build --spec FILE``)::

    [image]
    slurm_release = "22.05"                       # the on-prem nodes' release; --slurm-release overrides
    python_packages = ["numpy==1.26.4"]           # the job environment (a venv at job_env)
    torch_version = "2.5.1"                       # torch for the templates (CPU wheels unless torch_index_url)
    apt_packages = ["libopenmpi3"]                # the site's own additions from Debian
    commands = [["ldconfig"]]                     # the site's own build steps: argv lists, run as root, no shell

    [parity]
    reference_file = "/var/lib/burstd/parity-reference.json"   # `burstctl image fingerprint` on an on-prem node
    allow = ["python.package.pip", "check.kernel"]             # differences the site accepts (fnmatch on keys)
    checks = [{name = "lustre", argv = ["lfs", "--version"]}]  # the site's own facts: first line of stdout

Everything here lands in a generated script or template, so every string is held to a narrow character set;
commands are argv lists that the recipe quotes word by word.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

# release -> the Debian suite whose packages carry it (the bed's chroots use the same table for 24.11/26.05)
DEBIAN_SUITES = {"22.05": "bookworm", "24.11": "trixie", "26.05": "sid"}
SlurmRelease = Literal["22.05", "24.11", "26.05"]

AptPackage = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9+.-]{0,99}(=[A-Za-z0-9.+:~-]{1,64})?$")]
# a pip requirement: name[extras] and an optional version clause, no URLs, no markers
PipRequirement = Annotated[str, Field(
    pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}(\[[A-Za-z0-9._,-]{1,100}\])?"
            r"((==|>=|<=|~=|!=|<|>)[A-Za-z0-9.*+!-]{1,64}(,(==|>=|<=|~=|!=|<|>)[A-Za-z0-9.*+!-]{1,64})*)?$")]
Version = Annotated[str, Field(pattern=r"^[0-9][A-Za-z0-9.+!-]{0,63}$")]
AbsPath = Annotated[str, Field(pattern=r"^/[A-Za-z0-9_./-]{0,254}$")]
HttpsUrl = Annotated[str, Field(pattern=r"^https://[A-Za-z0-9._~:/?#@!$&'()*+,;=%-]{1,500}$")]
Word = Annotated[str, Field(min_length=1, max_length=500)]
CheckName = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,62}$")]
KeyPattern = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.*?+-]{1,200}$")]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _printable_argv(argv: list[str]) -> list[str]:
    for word in argv:
        if not word.isprintable():
            raise ValueError(f"argument {word!r} has a newline or another control character")
    return argv


class AwsImageSettings(_Section):
    instance_type: Annotated[str, Field(pattern=r"^[a-z0-9]+\.[a-z0-9]+$")] = "t3.large"  # the build VM
    volume_gb: int = Field(default=20, ge=8, le=16384)


class GcpImageSettings(_Section):
    machine_type: Annotated[str, Field(pattern=r"^[a-z0-9-]{1,63}$")] = "e2-standard-2"  # the build VM
    disk_gb: int = Field(default=20, ge=10, le=65536)


class ImageSpec(_Section):
    name: Annotated[str, Field(pattern=r"^[a-z][a-z0-9-]{0,39}$")] = "burstd-node"  # image name prefix
    slurm_release: SlurmRelease | None = None  # None: --slurm-release must say
    job_env: AbsPath = "/opt/burstd/jobenv"  # the jobs' Python (a venv of the suite's python3)
    python_packages: list[PipRequirement] = []
    torch: bool = True  # the templates (sbatch_templates/) need it
    torch_version: Version | None = None  # None: the newest the index offers (pin it: the gate compares it)
    torch_index_url: HttpsUrl | None = "https://download.pytorch.org/whl/cpu"  # None: PyPI's default
    apt_packages: list[AptPackage] = []
    commands: list[Annotated[list[Word], Field(min_length=1, max_length=100)]] = []
    aws: AwsImageSettings = AwsImageSettings()
    gcp: GcpImageSettings = GcpImageSettings()

    @field_validator("commands")
    @classmethod
    def _printable(cls, value: list[list[str]]) -> list[list[str]]:
        for argv in value:
            _printable_argv(argv)
        return value


class ParityCheck(_Section):
    name: CheckName  # the fact is check.<name>
    argv: list[Word] = Field(min_length=1, max_length=100)
    timeout_s: float = Field(default=10.0, gt=0, le=300, allow_inf_nan=False)

    @field_validator("argv")
    @classmethod
    def _printable(cls, value: list[str]) -> list[str]:
        return _printable_argv(value)


class ParityConfig(_Section):
    reference_file: AbsPath | None = None  # the on-prem fingerprint (JSON); None: no gate
    job_python: AbsPath = "/usr/bin/python3"  # the job environment's interpreter, on both sides
    allow: list[KeyPattern] = []
    checks: list[ParityCheck] = []

    @field_validator("checks")
    @classmethod
    def _unique_names(cls, value: list[ParityCheck]) -> list[ParityCheck]:
        names = [c.name for c in value]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"check names must be unique, repeated: {', '.join(dup)}")
        return value


class ImageFile(_Section):
    """A TOML file of its own (``--spec FILE``): the two tables, nothing else."""

    image: ImageSpec = ImageSpec()
    parity: ParityConfig = ParityConfig()
