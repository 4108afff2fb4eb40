"""One place that configures logging, so structlog and stdlib loggers render alike."""

from __future__ import annotations

import logging
import sys
from typing import Any, Literal, TextIO

import structlog

LogFormat = Literal["auto", "console", "json"]

# Libraries that log through stdlib logging; they are chatty at DEBUG and INFO.
_NOISY_LIBRARIES = ("urllib3", "kubernetes", "docker")


def configure_logging(
    log_format: LogFormat = "auto", level: str = "info", stream: TextIO | None = None
) -> None:
    """Route structlog and stdlib logging (urllib3, kubernetes, docker) through one renderer.

    Console lines on a tty, JSON lines otherwise, so that logs shipped from a pod parse.
    `stream` (default stderr) lets the demo keep its nodes' logs in a file.
    """
    out = stream or sys.stderr
    if log_format == "auto":
        log_format = "console" if out.isatty() else "json"
    numeric_level = logging.getLevelNamesMapping()[level.upper()]
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: Any = (
        structlog.dev.ConsoleRenderer(colors=out.isatty())
        if log_format == "console"
        else structlog.processors.JSONRenderer()
    )
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            renderer,
        ],
    )
    handler = logging.StreamHandler(out)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(numeric_level)
    library_level = logging.DEBUG if numeric_level <= logging.DEBUG else logging.WARNING
    for name in _NOISY_LIBRARIES:
        logging.getLogger(name).setLevel(library_level)


def get_logger(name: str, **context: Any) -> structlog.stdlib.BoundLogger:
    """A logger with bound context (node, pod, uid, container) that every line carries."""
    logger: structlog.stdlib.BoundLogger = structlog.get_logger(name)
    return logger.bind(**context) if context else logger
