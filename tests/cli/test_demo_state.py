"""The demo's state directory: it removes only what a demo made there, and trusts only a
directory nobody else could have planted things in (the demo often runs as root)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubelet_sim.demo.state_dir import MARKER, DemoRunning, DemoState
from kubelet_sim.linux.processes import ProcessMark
from kubelet_sim.node.host import can_mount
from kubelet_sim.volumes.hostmount import mount_points_under, mount_tmpfs
from tests.cluster import wait_for

NOBODY = 65534
SLEEPER = ["sleep", "600"]


def test_a_directory_with_data_no_demo_made_is_refused_and_kept(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "thesis.tex").write_text("years of work")
    (tmp_path / "kubeconfig").write_text("someone's")
    with pytest.raises(DemoRunning, match="no demo made"):
        DemoState(tmp_path).claim()
    assert (tmp_path / "data" / "thesis.tex").read_text() == "years of work"
    assert (tmp_path / "kubeconfig").read_text() == "someone's"
    assert not (tmp_path / MARKER).exists()


def test_a_new_directory_is_marked_and_left_empty_after_a_clean_exit(tmp_path: Path) -> None:
    state = DemoState(tmp_path / "s")
    state.claim()
    assert (tmp_path / "s" / MARKER).exists()
    state.data.mkdir()
    state.kubeconfig.write_text("the demo's")
    state.release(keep=False)
    assert list((tmp_path / "s").iterdir()) == []


def test_a_demos_own_kept_data_is_removed_by_the_next_demo(tmp_path: Path) -> None:
    state = DemoState(tmp_path)
    state.claim()
    state.data.mkdir()
    (state.data / "etcd").write_text("old")
    state.release(keep=True)
    assert (state.data / "etcd").exists()
    DemoState(tmp_path).claim()
    assert not state.data.exists()


@pytest.fixture
def sleepers() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes a planted record may name; whatever is left of them ends with the test."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        proc.kill()
        proc.wait(10)


def _sleeper(sleepers: list[subprocess.Popen[bytes]], user: int | None = None) -> int:
    proc = subprocess.Popen(SLEEPER, user=user)
    sleepers.append(proc)
    wait_for(lambda: ProcessMark.of(proc.pid), message=f"pid {proc.pid} in /proc")
    return proc.pid


def _plant(directory: Path, children: list[dict[str, object]]) -> None:
    """A marker and a record of a dead demo naming `children`, as someone may plant them."""
    directory.mkdir(exist_ok=True)
    (directory / MARKER).write_text("planted")
    record = {"pid": 999_999_999, "children": children, "labels": {}}
    (directory / "demo.json").write_text(json.dumps(record))


def _child(pid: int, started: str | None = None) -> dict[str, object]:
    """The record of a child as a demo writes it (`started` overrides its start time)."""
    mark = ProcessMark.of(pid)
    assert mark is not None
    if started is not None:
        mark = ProcessMark(mark.boot, mark.namespace, pid, started)
    return {"pid": pid, "argv": SLEEPER, "mark": str(mark)}


def _running(pid: int) -> bool:
    return ProcessMark.of(pid) is not None and "Z" not in Path(f"/proc/{pid}/stat").read_text()


@pytest.mark.skipif(os.geteuid() != 0, reason="plants a directory of another user: needs root")
@pytest.mark.parametrize("unsafe", ["owned by another user", "writable by others"])
def test_a_directory_someone_else_could_write_is_refused_and_no_process_it_names_is_signalled(
    tmp_path: Path, sleepers: list[subprocess.Popen[bytes]], unsafe: str
) -> None:
    victim = _sleeper(sleepers)
    planted = tmp_path / "planted"
    _plant(planted, [_child(victim)])
    if unsafe == "owned by another user":
        os.chown(planted, NOBODY, NOBODY)
    else:
        planted.chmod(0o777)
    with pytest.raises(DemoRunning, match="not safe to use"):
        DemoState(planted).claim()
    with pytest.raises(DemoRunning, match="not safe to use"):
        DemoState(planted).open_log()
    assert _running(victim), "root killed the process a planted record named"
    assert (planted / "demo.json").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="starts a process as another user: needs root")
def test_a_recorded_child_is_killed_only_if_it_is_the_same_process_and_ours(
    tmp_path: Path, sleepers: list[subprocess.Popen[bytes]]
) -> None:
    someone_elses, reused, own = (
        _sleeper(sleepers, user=NOBODY),
        _sleeper(sleepers),
        _sleeper(sleepers),
    )
    _plant(
        tmp_path / "state",
        [_child(someone_elses), _child(reused, started="1"), _child(own)],
    )
    leftovers = DemoState(tmp_path / "state").claim()
    assert leftovers is not None
    wait_for(lambda: not _running(own), message="the demo's own child ended")
    assert leftovers.processes == 1
    assert _running(someone_elses), "a process of another uid was signalled"
    assert _running(reused), "a process that only reused a recorded pid was signalled"


def test_files_in_the_state_directory_are_never_written_or_read_through_symlinks(
    tmp_path: Path,
) -> None:
    state, elsewhere = tmp_path / "state", tmp_path / "elsewhere"
    state.mkdir(mode=0o700)
    elsewhere.mkdir()
    targets = {name: elsewhere / name for name in ("record", "tmp", "log")}
    for target in targets.values():
        target.write_text("not the demo's")
    (state / "demo.json").symlink_to(targets["record"])
    (state / "demo.tmp").symlink_to(targets["tmp"])  # where the record used to be written
    (state / MARKER).symlink_to(elsewhere / "marker")  # dangling: a touch would create it
    (state / "demo.log").symlink_to(targets["log"])
    DemoState(state).claim()
    DemoState(state).write(children=[])
    assert {name: t.read_text() for name, t in targets.items()} == dict.fromkeys(
        targets, "not the demo's"
    )
    assert not (elsewhere / "marker").exists()
    assert not (state / "demo.json").is_symlink()
    assert json.loads((state / "demo.json").read_text())["pid"] == os.getpid()
    with pytest.raises(OSError, match="symbolic links"):
        DemoState(state).open_log().write("a line of the nodes' log")
    assert targets["log"].read_text() == "not the demo's"


@pytest.mark.skipif(not can_mount(), reason="mounts a tmpfs: needs CAP_SYS_ADMIN")
def test_a_symlinked_data_is_removed_as_a_link_and_nothing_below_its_target_unmounted(
    tmp_path: Path,
) -> None:
    victim = tmp_path / "victim"
    (victim / "mounted").mkdir(parents=True)
    mount_tmpfs(victim / "mounted", 1 << 20)
    (victim / "mounted" / "work").write_text("someone's")
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / MARKER).write_text("a demo's")
    (state / "data").symlink_to(victim)
    DemoState(state).claim()
    assert not os.path.lexists(state / "data")
    assert mount_points_under(victim) == [victim / "mounted"]
    assert (victim / "mounted" / "work").read_text() == "someone's"
