"""Node images from one recipe: the spec (``spec``), the provisioning script every provider runs (``recipe``),
the Packer templates for AWS and GCP (``packer``) and the local provider's Debian root filesystem (``rootfs``).
The parity gate's comparison is ``burstd.domain.parity``; its probes are ``burstd.agent.fingerprint``."""
