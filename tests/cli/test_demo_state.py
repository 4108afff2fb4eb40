"""The demo's state directory: it removes only what a demo made there."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubelet_sim.demo.state_dir import MARKER, DemoRunning, DemoState


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
