"""fsGroup ownership cannot be redirected: a container that swaps an entry of its volume for
a symlink to a host file while the agent walks the volume gets nothing outside changed."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from kubelet_sim.volumes.plugins import set_volume_ownership

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
    from kubelet_sim.paths import bind_target_problem

    assert bind_target_problem("/data") is None
    assert bind_target_problem("data") == "must be an absolute path"
    assert bind_target_problem("/data:rw,rshared") == "must not contain ':'"
