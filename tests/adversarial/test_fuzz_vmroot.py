"""An image VM's settings and the gate's answer it writes back (providers/local/vmroot.py), fed hostile input.

Settings end up in mount options (where ',' and ':' change the meaning) and in a boot script's arguments: each
is refused with VmRootError, or is a plain absolute path / user name. The gate's answer is written inside the
VM: reading it back gives None or bounded, printable text, whatever the VM wrote."""

from __future__ import annotations

import os
import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from burstd.providers.local import vmroot

EXAMPLES = int(os.environ.get("BURSTD_FUZZ_EXAMPLES", "150"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                               HealthCheck.function_scoped_fixture])
SAFE_PATH = re.compile(r"^/[A-Za-z0-9_./-]*$")
path_like = st.one_of(st.text(max_size=80), st.text(alphabet="/abc.,:= \n'\"$;-_", max_size=40).map(lambda t: "/" + t))


@FUZZ
@given(image=path_like, vm_dir=path_like, key=path_like, users=st.lists(st.text(max_size=20), max_size=3),
       dirs=st.lists(path_like, max_size=3))
def test_settings_are_refused_or_plain(image, vm_dir, key, users, dirs):
    try:
        root = vmroot.VmRoot(image=image, vm_dir=vm_dir, munge_key=key, users=tuple(users), make_dirs=tuple(dirs))
    except vmroot.VmRootError as exc:
        assert str(exc)
        return
    for p in (root.image, root.vm_dir, root.munge_key, *root.make_dirs):
        assert SAFE_PATH.fullmatch(p) and "/../" not in p + "/", p
    for u in root.users:
        assert re.fullmatch(r"[a-z_][a-z0-9_-]*", u), u


@FUZZ
@given(st.binary(max_size=10_000))
def test_the_gates_answer_reads_back_bounded_and_printable(tmp_path_factory, raw):
    vm_dir = tmp_path_factory.mktemp("vm")
    (vm_dir / "boot").mkdir()
    (vm_dir / "boot" / vmroot.GATE_OUT).write_bytes(raw)
    text = vmroot.gate_refusal(vm_dir)
    assert text is None or (0 < len(text) <= vmroot.GATE_OUT_MAX
                            and all(c.isprintable() or c == "\n" for c in text))
