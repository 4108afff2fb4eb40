"""fsGroup ownership cannot be redirected: a container that swaps an entry of its volume for
a symlink to a host file while the agent walks the volume gets nothing outside changed."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from kubelet_sim.linux.safe_paths import remove_tree
from kubelet_sim.volumes import ownership
from kubelet_sim.volumes.ownership import ON_ROOT_MISMATCH, set_volume_ownership

GROUP = 4242


@pytest.mark.skipif(os.geteuid() != 0, reason="changing a file's group to any gid needs root")
def test_the_walk_sets_group_and_modes(tmp_path: Path) -> None:
    volume = tmp_path / "v"
    (volume / "d").mkdir(parents=True)
    (volume / "d" / "f").write_text("x")
    (volume / "f").write_text("y")
    os.chmod(volume / "f", 0o600)
    (volume / "link").symlink_to("f")
    set_volume_ownership(volume, GROUP, read_only=False)
    for entry in (volume, volume / "d", volume / "d" / "f", volume / "f"):
        assert entry.stat().st_gid == GROUP
    assert stat.S_IMODE((volume / "f").stat().st_mode) == 0o660
    assert (volume / "d").stat().st_mode & stat.S_ISGID
    assert os.lstat(volume / "link").st_gid == GROUP


@pytest.mark.skipif(os.geteuid() != 0, reason="changing a file's group to any gid needs root")
def test_a_symlink_swapped_in_during_the_walk_changes_nothing_outside(tmp_path: Path) -> None:
    outside = tmp_path / "host-file"
    outside.write_text("the host's")
    os.chmod(outside, 0o600)
    before = os.stat(outside)
    volume = tmp_path / "v"
    volume.mkdir()
    for i in range(50):
        (volume / f"f{i}").write_text("x")
    stop = threading.Event()

    def swap() -> None:  # what a container would do, as fast as it can
        target = volume / "f7"
        while not stop.is_set():
            try:
                target.unlink()
                target.symlink_to(outside)
                target.unlink()
                target.write_text("x")
            except OSError:
                pass

    swapper = threading.Thread(target=swap)
    swapper.start()
    try:
        for _ in range(300):
            set_volume_ownership(volume, GROUP, read_only=False)
    finally:
        stop.set()
        swapper.join()
    after = os.stat(outside)
    assert (after.st_gid, after.st_mode) == (before.st_gid, before.st_mode)


def test_bind_targets_that_docker_would_misread_are_refused() -> None:
    from kubelet_sim.linux.safe_paths import bind_target_problem

    assert bind_target_problem("/data") is None
    assert bind_target_problem("data") == "must be an absolute path"
    assert bind_target_problem("/data:rw,rshared") == "must not contain ':'"


def _deep(root: Path, levels: int) -> Path:
    """A chain of `levels` directories under `root` (made relative to each other: a path of
    2,000 levels is longer than PATH_MAX), with a file at the bottom; the bottom's path."""
    root.mkdir()
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(levels):
            os.mkdir("d", dir_fd=fd)
            below = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = below
        os.close(os.open("f", os.O_CREAT | os.O_WRONLY, 0o600, dir_fd=fd))
        os.fchmod(fd, 0o700)
        return Path(f"/proc/self/fd/{fd}")  # the caller reads it, then closes
    except BaseException:
        os.close(fd)
        raise


@pytest.mark.skipif(os.geteuid() != 0, reason="changing a file's group to any gid needs root")
def test_a_tree_deeper_than_pythons_recursion_is_walked(tmp_path: Path) -> None:
    bottom = _deep(tmp_path / "v", 2000)
    fd = int(bottom.name)
    try:
        walked = set_volume_ownership(tmp_path / "v", GROUP, read_only=False)
        assert walked is not None
        assert walked.too_deep == []
        assert walked.entries == 1 + 2000 + 1
        assert os.fstat(fd).st_gid == GROUP
        assert os.stat("f", dir_fd=fd).st_gid == GROUP
    finally:
        os.close(fd)
        remove_tree(tmp_path / "v")  # pytest's own clean-up of old tmp dirs recurses per level


@pytest.mark.skipif(os.geteuid() != 0, reason="changing a file's group to any gid needs root")
def test_the_walk_holds_no_more_descriptors_than_its_depth_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ownership, "MAX_DEPTH", 10)
    bottom = _deep(tmp_path / "v", 30)
    fd = int(bottom.name)
    try:
        open_before = len(os.listdir("/proc/self/fd"))
        walked = set_volume_ownership(tmp_path / "v", GROUP, read_only=False)
        assert walked is not None
        assert walked.too_deep == ["d"], "one directory at the limit, owned but not entered"
        assert os.fstat(fd).st_gid != GROUP, "below the limit: untouched"
        assert len(os.listdir("/proc/self/fd")) == open_before, "every descriptor closed"
    finally:
        os.close(fd)


@pytest.mark.skipif(os.geteuid() != 0, reason="changing a file's group to any gid needs root")
def test_on_root_mismatch_walks_only_when_the_root_is_not_right(tmp_path: Path) -> None:
    volume = tmp_path / "v"
    volume.mkdir()
    (volume / "f").write_text("x")
    assert set_volume_ownership(volume, GROUP, False, ON_ROOT_MISMATCH) is not None
    os.chown(volume / "f", -1, 0)  # a container changed a file, not the root
    assert set_volume_ownership(volume, GROUP, False, ON_ROOT_MISMATCH) is None
    assert (volume / "f").stat().st_gid == 0, "the root was right: no walk"
    os.chmod(volume, 0o770)  # setgid gone
    assert set_volume_ownership(volume, GROUP, False, ON_ROOT_MISMATCH) is not None
    assert (volume / "f").stat().st_gid == GROUP
    assert set_volume_ownership(volume, GROUP, False) is not None, "Always: walks"
