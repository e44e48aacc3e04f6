"""Whether the job user can reach a file: the way to a symlink counts as much as the way to its target."""

from __future__ import annotations

from pathlib import Path

from burstd.testbed.jobenv import reachable_by_others


def _file(path: Path, mode: int = 0o644) -> Path:
    path.write_text("x")
    path.chmod(mode)
    return path


def test_a_public_file_in_public_folders_is_reachable_and_an_unreadable_one_is_not(open_dir):
    assert reachable_by_others(_file(open_dir / "public"))
    assert not reachable_by_others(_file(open_dir / "owner-only", 0o600))


def test_a_link_in_a_private_folder_to_a_public_file_is_out_of_reach(open_dir):
    """A venv's bin/python under a mode-700 folder points at /usr/bin/python3: the job user cannot get to the
    link, so it cannot run it (the check once resolved the link first and said yes)."""
    target = _file(open_dir / "public")
    private = open_dir / "private"
    private.mkdir(mode=0o700)
    (private / "python").symlink_to(target)
    assert not reachable_by_others(private / "python")
    private.chmod(0o755)
    assert reachable_by_others(private / "python")


def test_a_public_link_into_a_private_folder_is_out_of_reach(open_dir):
    private = open_dir / "private"
    private.mkdir(mode=0o700)
    target = _file(private / "python")
    (open_dir / "python").symlink_to(target)
    assert not reachable_by_others(open_dir / "python")
    (open_dir / "relative").symlink_to("private/python")  # relative links resolve from the link's folder
    assert not reachable_by_others(open_dir / "relative")
    private.chmod(0o755)
    assert reachable_by_others(open_dir / "python") and reachable_by_others(open_dir / "relative")


def test_a_loop_of_links_is_not_reachable(open_dir):
    (open_dir / "a").symlink_to(open_dir / "b")
    (open_dir / "b").symlink_to(open_dir / "a")
    assert not reachable_by_others(open_dir / "a")
