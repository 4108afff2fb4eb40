"""What every command shares: how it fails, how it stops on a signal, its Typer app."""

from __future__ import annotations

import signal
import sys
import threading
from enum import StrEnum
from types import FrameType
from typing import NoReturn

import typer

from kubelet_sim.logs import get_logger


def typer_app() -> typer.Typer:
    return typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None)


def fail(message: str, code: int = 1) -> NoReturn:
    typer.echo(f"kubelet-sim: error: {message}", err=True)
    raise SystemExit(code)


def stop_on_signals() -> threading.Event:
    """SIGTERM and SIGINT set an event every loop waits on; a second signal exits at once."""
    stop = threading.Event()

    def handle(signum: int, _frame: FrameType | None) -> None:
        if stop.is_set():
            sys.exit(128 + signum)
        get_logger("kubelet_sim.cli").info("signal received", signal=signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)
    return stop


class OutputChoice(StrEnum):
    text = "text"
    json = "json"
