"""The example's start: the deterministic flag set without loading torch.compile's stack (docs/testbed.md, round ten),
and the collector paused over a rank's and torchrun's imports, on again for their work (round thirteen)."""

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


def test_a_rank_imports_torch_without_the_collector_and_trains_with_it(tmp_path):
    """The example as torchrun runs it (``-m``, so ``__main__``): torch imported while the collector is paused,
    every optimizer step with it on again and the start's objects frozen (burstd.start_up)."""
    _run(f"""
        import gc, runpy, sys

        seen = {{}}

        class WatchTorchImport:  # notes the collector's state when the example first imports torch
            def find_spec(self, name, path=None, target=None):
                if name == "torch" and "torch" not in seen:
                    seen["torch"] = gc.isenabled()
                return None

        sys.meta_path.insert(0, WatchTorchImport())
        steps = []

        class WatchSteps:  # each step's line: the collector's state and how much is frozen
            def __init__(self, out):
                self.out = out

            def write(self, text):
                if text.startswith("rank=0 step="):
                    steps.append((gc.isenabled(), gc.get_freeze_count()))
                return self.out.write(text)

            def __getattr__(self, name):
                return getattr(self.out, name)

        sys.stdout = WatchSteps(sys.stdout)
        sys.argv = ["example", "--steps", "3", "--ckpt-every", "0", "--ckpt-dir", "{tmp_path / 'ckpt'}",
                    "--out", "{tmp_path / 'final.pt'}"]
        try:
            runpy.run_module("burstd.train.example", run_name="__main__", alter_sys=True)
        except SystemExit as stop:
            assert stop.code == 0, stop.code
        assert seen["torch"] is False, "torch was imported with the collector on"
        assert len(steps) == 3, steps
        assert all(on for on, _ in steps), "a step ran with the collector off"
        assert all(frozen > 100_000 for _, frozen in steps), steps
    """)


def test_the_quiet_torchrun_imports_torch_without_the_collector_and_runs_with_it():
    """``python -m burstd.train.launch``: torchrun's imports paused, the collector on again before it runs."""
    _run("""
        import contextlib, gc, io, sys

        seen = {}

        class WatchTorchImport:
            def find_spec(self, name, path=None, target=None):
                if name == "torch" and "torch" not in seen:
                    seen["torch"] = gc.isenabled()
                return None

        sys.meta_path.insert(0, WatchTorchImport())
        from burstd.train.launch import main
        with contextlib.redirect_stdout(io.StringIO()) as out:
            try:
                main(["--help"])  # torchrun's own parser: it runs after the imports, and exits
            except SystemExit as stop:
                assert stop.code == 0, stop.code
        assert "--nproc-per-node" in out.getvalue()
        assert seen["torch"] is False, "torch was imported with the collector on"
        assert gc.isenabled(), "torchrun ran with the collector off"
    """)
