"""CPU and memory of the agent process, read from /proc (psutil is not a dependency).

The agent runs in its own process, so its cost is measured from outside: utime+stime of the
whole process (all threads) and VmHWM/VmRSS, the numbers `top` and the OOM killer look at.
"""

from __future__ import annotations

import contextlib
import os
import threading
from dataclasses import dataclass
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime+stime of every thread of `pid` so far (field 14 and 15 of /proc/<pid>/stat)."""
    raw = Path(f"/proc/{pid}/stat").read_text()
    fields = raw[raw.rindex(")") + 2 :].split()  # the command name may contain spaces
    return (int(fields[11]) + int(fields[12])) / _TICKS


def memory_kib(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak RSS) of `pid` in KiB."""
    found: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            found[key] = int(rest.split()[0])
    return found


def threads(pid: int) -> int:
    """The process's thread count (`Threads` of /proc/<pid>/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    return 0


def reset_peak(pid: int) -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0), so each run reports its own peak."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


@dataclass
class Usage:
    cpu_seconds: float
    wall_seconds: float
    peak_rss_mib: float
    rss_mib: float

    @property
    def cpu_percent(self) -> float:
        """CPU as a percentage of one core over the window."""
        return 100.0 * self.cpu_seconds / self.wall_seconds if self.wall_seconds else 0.0


class UsageWindow:
    """CPU used and peak RSS between `start` and `stop`; samples RSS too in case VmHWM can't
    be reset (then the sampled peak is the honest one)."""

    def __init__(self, pid: int, clock: float, interval: float = 0.2) -> None:
        self.pid = pid
        self._interval = interval
        self._cpu0 = cpu_seconds(pid)
        self._t0 = clock
        self._hwm_reset = reset_peak(pid)
        self._peak = memory_kib(pid).get("VmRSS", 0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(self._interval):
            with contextlib.suppress(OSError):
                self._peak = max(self._peak, memory_kib(self.pid).get("VmRSS", 0))

    def stop(self, clock: float) -> Usage:
        self._stop.set()
        self._thread.join(2)
        mem = memory_kib(self.pid)
        peak = max(self._peak, mem.get("VmRSS", 0))
        if self._hwm_reset:
            peak = max(peak, mem.get("VmHWM", 0))
        return Usage(
            cpu_seconds=cpu_seconds(self.pid) - self._cpu0,
            wall_seconds=clock - self._t0,
            peak_rss_mib=peak / 1024,
            rss_mib=mem.get("VmRSS", 0) / 1024,
        )


def pids_named(*names: str) -> list[int]:
    """Processes whose comm is one of `names` (e.g. the Docker engine's dockerd, containerd)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if (entry / "comm").read_text().strip() in names:
                    found.append(int(entry.name))
    return found


class EngineCpu:
    """CPU used by the container engine's daemons over a window: shows whether Docker, not the
    agent, is the bottleneck (per-container shims come and go and are not counted)."""

    NAMES = ("dockerd", "containerd")

    def __init__(self) -> None:
        self.pids = pids_named(*self.NAMES)
        self._start = self._total()

    def _total(self) -> float:
        total = 0.0
        for pid in self.pids:
            with contextlib.suppress(OSError):
                total += cpu_seconds(pid)
        return total

    def seconds(self) -> float:
        return self._total() - self._start


def machine_jiffies(stat_text: str) -> tuple[int, int]:
    """(busy, total) clock ticks of all cores from /proc/stat's `cpu` line: total is user
    through steal (guest time is inside user already), busy is total less idle and iowait."""
    for line in stat_text.splitlines():
        parts = line.split()
        if parts and parts[0] == "cpu":
            ticks = [int(x) for x in parts[1:9]]
            total = sum(ticks)
            return total - ticks[3] - ticks[4], total
    raise ValueError("no cpu line in /proc/stat")


class MachineCpu:
    """The whole machine's CPU over a window, busy % of all cores: with the agent and the
    control plane on the same cores, whether the machine itself was the limit."""

    def __init__(self) -> None:
        self._start = machine_jiffies(Path("/proc/stat").read_text())

    def busy_percent(self) -> float | None:
        busy, total = machine_jiffies(Path("/proc/stat").read_text())
        spent = total - self._start[1]
        return 100.0 * (busy - self._start[0]) / spent if spent > 0 else None


class ProcessesCpu:
    """CPU of named processes (the control plane's) over a window, % of one core each."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = dict(pids)
        self._start = {name: self._cpu(pid) for name, pid in self.pids.items()}

    @staticmethod
    def _cpu(pid: int) -> float | None:
        try:
            return cpu_seconds(pid)
        except (OSError, ValueError, IndexError):
            return None

    def percent(self, wall_seconds: float) -> dict[str, float]:
        out = {}
        for name, pid in self.pids.items():
            now, then = self._cpu(pid), self._start.get(name)
            if now is not None and then is not None and wall_seconds > 0:
                out[name] = round(100.0 * (now - then) / wall_seconds, 1)
        return out
