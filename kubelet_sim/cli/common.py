"""What every command shares: how it fails, how it stops on a signal, its Typer app."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import signal
import sys
import threading
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from types import FrameType
from typing import Annotated, Any, NoReturn, TypeVar

import typer

from kubelet_sim.logs import configure_logging, get_logger


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


# The options of the commands that look at a node from beside it (watch, trace, ui).
KubeconfigOption = Annotated[
    str | None, typer.Option(envvar="KUBELET_SIM_KUBECONFIG", help="Kubeconfig file.")
]
ContextOption = Annotated[
    str | None, typer.Option(envvar="KUBELET_SIM_CONTEXT", help="Kubeconfig context.")
]
JournalRootDirOption = Annotated[
    Path | None,
    typer.Option(envvar="KUBELET_SIM_ROOT_DIR", help="The agent's --root-dir (its journal)."),
]


class OutputChoice(StrEnum):
    text = "text"
    json = "json"


OutputOption = Annotated[
    OutputChoice,
    typer.Option(help="`text` for people (lines or a table), `json` for programs."),
]


def log_as_tool(output: OutputChoice = OutputChoice.text) -> None:
    """A tool's logging (watch, trace, compare, join-token, ui): warnings only, on stderr, so
    its stdout is its output; JSON when that is."""
    configure_logging("json" if output is OutputChoice.json else "auto", "warning")


R = TypeVar("R")


def with_options_of(options: type, param: str) -> Callable[[Callable[..., R]], Callable[..., R]]:
    """A decorator: the command's own parameters, minus `param`, plus every field of the
    dataclass `options` as an option; the call gets them back as one `options` in `param`.
    One way for typer to take a group of options that several commands share."""
    names = [f.name for f in dataclasses.fields(options)]

    def decorate(command: Callable[..., R]) -> Callable[..., R]:
        own = list(inspect.signature(command, eval_str=True).parameters.values())
        resolved = inspect.get_annotations(options, eval_str=True)
        keyword = inspect.Parameter.KEYWORD_ONLY
        added = [
            inspect.Parameter(
                f.name,
                inspect.Parameter.KEYWORD_ONLY,
                default=f.default,
                annotation=resolved[f.name],
            )
            for f in dataclasses.fields(options)
        ]
        params = [p.replace(kind=keyword) for p in own if p.name != param]

        @functools.wraps(command)
        def wrapper(**kwargs: Any) -> R:
            group = options(**{name: kwargs.pop(name) for name in names})
            return command(**{param: group}, **kwargs)

        wrapper.__signature__ = inspect.Signature([*params, *added])  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in [*params, *added]}
        return wrapper

    return decorate
