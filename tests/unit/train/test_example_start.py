"""The example's start: the deterministic flag set without loading torch.compile's stack (docs/testbed.md, round ten)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = [pytest.mark.torch]


def _run(code: str) -> None:
    # a fresh interpreter: whether a module is loaded is a property of the whole process
    subprocess.run([sys.executable, "-c", textwrap.dedent(code)], check=True, timeout=120)


def test_the_flag_is_set_and_inductor_is_never_imported():
    _run("""
        import sys, torch
        from burstd.train.example import deterministic_algorithms
        assert not torch.are_deterministic_algorithms_enabled()
        deterministic_algorithms()
        assert torch.are_deterministic_algorithms_enabled()
        assert "torch._inductor" not in sys.modules, "the public call's import of inductor came back"
    """)


def test_where_inductor_is_loaded_its_setting_follows_too():
    _run("""
        import torch, torch._inductor.config as inductor_config
        from burstd.train.example import deterministic_algorithms
        deterministic_algorithms()
        assert torch.are_deterministic_algorithms_enabled()
        assert inductor_config.deterministic is True
    """)
