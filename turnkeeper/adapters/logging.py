"""structlog set-up: JSON lines in production, key-value lines on a terminal.

``log.level`` and ``log.format`` choose the level and the format (`configure_from_settings`);
``log.format = "auto"``, the default, writes key-value lines on a terminal and JSON lines
otherwise.

Every record carries ``timestamp`` (RFC 3339 UTC), ``level``, ``logger`` and, inside an
HTTP request, the ``correlation_id`` bound in `structlog.contextvars`. Records of the
standard library (uvicorn, Litestar) go through the same processors, so one process
writes one format. Secrets and message text never reach a log line: `redact_secrets`
replaces them wherever they appear in a record, and an exception is written as its
outline (`exception_outline`: the classes and the frames, never its message, which may
quote data such as the failing row of a database error).

A record of structlog is rendered at the end of structlog's own chain and handed to the
standard library as its finished line (`LineFormatter` writes it as it is): one
``LogRecord`` per line instead of two, and no caller lookup, which the format never
shows. The request log line of every HTTP request goes this way (ADR 0021).

A line written once per request can skip even that: `write_direct` runs the same shared
processors and the same renderer and writes the line to the same handler's stream, but
without structlog's bound logger and without a standard library record (ADR 0028). It does
so only while the configuration is the one `configure_logging` installed; after any other
(a test's `structlog.testing.capture_logs`, another handler on the root logger) it
declines and the caller logs the usual way. Every other structlog line skips the record
the same way: the chain's last processor writes the line itself when the record would
reach the installed handler alone (ADR 0028, amended).
"""

from __future__ import annotations

import logging
import sys
import traceback
from types import TracebackType
from typing import Any, TextIO

import attrs
import msgspec
import structlog
from structlog.typing import EventDict, ExcInfo, Processor, WrappedLogger

from turnkeeper.application.logs import (
    REDACTED,
    REDACTED_KEYS,
    redact_secrets,
)
from turnkeeper.application.settings import Settings

#: The attribute of a standard library record that holds a line structlog rendered.
RENDERED_ATTRIBUTE = "turnkeeper_rendered"


#: structlog's JSON renderer (``json.dumps``), for the records `render_json` passes on.
_json_dumps = structlog.processors.JSONRenderer()
_json_encoder = msgspec.json.Encoder()
#: Types msgspec writes exactly as ``json.dumps`` does (floats: see `_plain_float`).
_PLAIN_TYPES = frozenset({str, int, bool, type(None)})
#: Floats ``repr`` writes without an exponent, where msgspec's digits are ``repr``'s.
_FIXED_FLOATS = (1e-4, 1e16)
_DEL = b"\x7f"


def _plain_float(value: float) -> bool:
    low, high = _FIXED_FLOATS
    return value == 0 or low <= abs(value) < high


def render_json(logger: WrappedLogger, method_name: str, event_dict: EventDict) -> str:
    """Render a record as one JSON line, the line structlog's `JSONRenderer` writes.

    A record of plain members (text, numbers, booleans, none, as the request line and
    most lines have) is encoded by msgspec and spaced as ``json.dumps`` spaces it, at a
    third of the cost (ADR 0028, second amendment); any other record (a nested value, an
    object, text beyond ASCII that ``json.dumps`` escapes, a lone surrogate, a float it
    writes with an exponent) is rendered by structlog's `JSONRenderer`. Both give the
    same text.

    Args:
        logger: the wrapped logger (unused).
        method_name: the log method.
        event_dict: the record.

    Returns:
        The line, without its line break.
    """
    for value in event_dict.values():
        kind = type(value)
        if kind not in _PLAIN_TYPES and not (kind is float and _plain_float(value)):
            return str(_json_dumps(logger, method_name, event_dict))
    try:
        compact = _json_encoder.encode(event_dict)
    except UnicodeEncodeError:
        # A lone surrogate (a Python string can hold one; an embedding program may log
        # it in a client message id), which msgspec cannot write and json.dumps escapes.
        return str(_json_dumps(logger, method_name, event_dict))
    # json.dumps escapes DEL as well as every byte beyond ASCII.
    if not compact.isascii() or _DEL in compact:
        return str(_json_dumps(logger, method_name, event_dict))
    return msgspec.json.format(compact, indent=0).decode("ascii")


#: The line between an exception and the one it caused, as Python writes it.
_CAUSE_LINE = "The above exception was the direct cause of the following exception:"
#: The line between an exception and one raised while it was handled.
_CONTEXT_LINE = "During handling of the above exception, another exception occurred:"
#: Members of an exception group shown, and groups within groups (as `traceback`'s).
_GROUP_WIDTH = 15
_GROUP_DEPTH = 10
#: Times the same frame is shown in a row before the rest are counted (as `traceback`).
_REPEATS_SHOWN = 3
#: Modules whose classes are named without them (as `traceback` names them).
_UNNAMED_MODULES = frozenset({"builtins", "__main__"})


def exception_outline(error: BaseException) -> str:
    """An exception as Python's traceback shows it, without any of its text.

    The frames (file, line, function) and the qualified class of the exception and of
    every exception chained to it (its cause, or the one it was raised while handling,
    and the members of a group), in Python's order and with Python's separating lines.
    Never the message, the arguments or the notes of any of them, nor the source lines:
    a message may quote data (psycopg's ``DETAIL:  Failing row contains (...)`` holds
    the row, message content included). The tracing adapter records exceptions by class
    alone for the same reason.

    Args:
        error: the exception.

    Returns:
        The outline, lines without a final line break; only the class for an exception
        that was never raised.

    Example:
        >>> exception_outline(KeyError("a secret"))
        'KeyError'
    """
    return "\n".join(_outline(error, 0))


def _outline(error: BaseException, depth: int) -> list[str]:
    # Each exception with the line that leads from it to the one before it in `chain`.
    chain: list[tuple[BaseException, str | None]] = []
    seen: set[int] = set()
    current: BaseException | None = error
    link: str | None = None
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        chain.append((current, link))
        if current.__cause__ is not None:
            current, link = current.__cause__, _CAUSE_LINE
        elif current.__context__ is not None and not current.__suppress_context__:
            current, link = current.__context__, _CONTEXT_LINE
        else:
            current = None
    lines: list[str] = []
    # Python writes the first cause first.
    for exception, leads_on in reversed(chain):
        if exception.__traceback__ is not None:
            lines.append("Traceback (most recent call last):")
            lines.extend(_frames(exception.__traceback__))
        lines.append(_class_name(type(exception)))
        if isinstance(exception, BaseExceptionGroup):
            lines.extend(_members(exception, depth))
        if leads_on is not None:
            lines.extend(("", leads_on, ""))
    return lines


def _frames(trace: TracebackType) -> list[str]:
    """The frames of a traceback: file, line and function (no source line)."""
    lines: list[str] = []
    last, count = "", 0
    for frame, line_number in traceback.walk_tb(trace):
        code = frame.f_code
        line = f'  File "{code.co_filename}", line {line_number}, in {code.co_name}'
        if line == last:
            count += 1
        else:
            lines.extend(_repeated(count))
            last, count = line, 1
        if count <= _REPEATS_SHOWN:
            lines.append(line)
    lines.extend(_repeated(count))
    return lines


def _repeated(count: int) -> list[str]:
    more = count - _REPEATS_SHOWN
    if more <= 0:
        return []
    return [f"  [Previous line repeated {more} more time{'s' if more > 1 else ''}]"]


def _members(group: BaseExceptionGroup[BaseException], depth: int) -> list[str]:
    if depth >= _GROUP_DEPTH:
        return ["+-- ... (groups nested too deep)"]
    lines: list[str] = []
    for number, member in enumerate(group.exceptions[:_GROUP_WIDTH], start=1):
        lines.append(f"+-- {number} --")
        lines.extend(f"| {line}" if line else "|" for line in _outline(member, depth + 1))
    hidden = len(group.exceptions) - _GROUP_WIDTH
    if hidden > 0:
        lines.append(f"+-- and {hidden} more")
    return lines


def _class_name(kind: type[BaseException]) -> str:
    module = kind.__module__
    if module in _UNNAMED_MODULES:
        return kind.__qualname__
    return f"{module}.{kind.__qualname__}"


def _outline_of(exc_info: ExcInfo) -> str:
    kind, error, _ = exc_info
    return exception_outline(error) if error is not None else _class_name(kind)


#: The processor that writes a record's ``exc_info`` (an exception, a tuple, or True for
#: the one being handled) as ``exception``, its outline (structlog's `format_exc_info`
#: would write the messages).
format_exc_outline: Processor = structlog.processors.ExceptionRenderer(_outline_of)


def shared_processors() -> list[Processor]:
    """The processors every record passes, structlog's and the standard library's.

    Returns:
        contextvars, level, logger name, UTC timestamp, the exception's outline
        (`format_exc_outline`) and redaction, in that order.
    """
    return [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        format_exc_outline,
        redact_secrets,
    ]


def configure_logging(
    *, level: int | str = logging.INFO, json: bool | None = None, stream: TextIO | None = None
) -> None:
    """Configure structlog and the standard library's root logger once per process.

    Args:
        level: the lowest level written.
        json: JSON lines when True, key-value console lines when False; when None,
            console lines on a terminal and JSON otherwise.
        stream: where lines go (standard error when None).
    """
    out = stream if stream is not None else sys.stderr
    as_json = json if json is not None else not out.isatty()
    renderer: Processor = render_json if as_json else structlog.dev.ConsoleRenderer(colors=False)
    shared = shared_processors()
    # The format shows no source file, line, process or thread: not looked up per record
    # (the standard library's documented switches, see "Optimization" in its logging HOWTO).
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *shared,
            _rendered_for_stdlib(renderer),
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        # Not cached: tests reconfigure logging, and a cached logger would keep the old set-up.
        cache_logger_on_first_use=False,
    )
    formatter = LineFormatter(
        foreign_pre_chain=shared,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
    )
    handler = logging.StreamHandler(out)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    global _installed
    _installed = _Chain(
        processors=list(structlog.get_config()["processors"]),
        shared=tuple(shared),
        renderer=renderer,
        handler=handler,
    )
    # uvicorn installs its own handlers; route its records through ours instead.
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        named = logging.getLogger(name)
        named.handlers.clear()
        named.propagate = True
    # Access lines would duplicate the request log of the HTTP adapter.
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING)


@attrs.frozen(eq=False)
class _Chain:
    """What `configure_logging` installed, for `write_direct` to recognise and follow."""

    # A copy of structlog's processor list: `structlog.testing.capture_logs` changes the
    # configured list in place, so its identity proves nothing.
    processors: list[Processor]
    shared: tuple[Processor, ...]
    renderer: Processor
    handler: logging.StreamHandler[TextIO]


_installed: _Chain | None = None


def write_direct(logger: logging.Logger, method_name: str, event: str, fields: EventDict) -> bool:
    """Write one record's line as the installed chain would, without its per-record objects.

    The line is the one ``structlog.get_logger(logger.name).<method_name>(event,
    **fields)`` writes: the same shared processors, context variables and redaction, the
    same renderer, the same stream. Nothing is written when the level is not enabled.

    Args:
        logger: the standard library logger the record belongs to (its name and level).
        method_name: ``debug``, ``info`` or ``warning``.
        event: the record's event name.
        fields: its members (taken over: the caller must not use the mapping again).

    Returns:
        False, having written nothing, when the configuration is no longer the one
        `configure_logging` installed (structlog or the root logger reconfigured, the
        logger with filters of its own, or it or a parent below the root with handlers
        or without propagation): then log the usual way.
    """
    chain = _installed
    if (
        chain is None
        or structlog.get_config()["processors"] != chain.processors
        or _direct_handler(chain, logger) is None
    ):
        return False
    # The mapping structlog's `filter_by_level` decides by, so both paths agree.
    level = structlog.processors.NAME_TO_LEVEL[method_name]
    if not logger.isEnabledFor(level) or level < chain.handler.level:
        return True
    fields["event"] = event
    record: Any = fields
    for processor in chain.shared:
        record = processor(logger, method_name, record)
    _write_line(chain.handler, str(chain.renderer(logger, method_name, record)), event, level)
    return True


def _direct_handler(chain: _Chain, logger: logging.Logger) -> logging.StreamHandler[TextIO] | None:
    """The installed handler when a record of `logger` would reach it and it alone."""
    if (
        logging.root.handlers != [chain.handler]
        or logger.disabled
        or logger.filters
        or chain.handler.filters
        or not _reaches_root_alone(logger)
    ):
        return None
    return chain.handler


def _write_line(handler: logging.StreamHandler[TextIO], line: str, event: Any, level: int) -> None:
    # StreamHandler.emit without its record: write, flush, never raise into the caller.
    handler.acquire()
    try:
        # The line as LineFormatter.format gives a line structlog rendered.
        handler.stream.write(line + handler.terminator)
        handler.flush()
    except Exception:  # a log line must not fail the request (as StreamHandler.emit)
        handler.handleError(logging.makeLogRecord({"msg": event, "levelno": level}))
    finally:
        handler.release()


def _reaches_root_alone(logger: logging.Logger) -> bool:
    """True when a record of `logger` meets no handler before the root's (propagation).

    A `logging.NullHandler` does nothing with a record, so it does not count: the package
    logger has one (`turnkeeper.application.logs`), so that a program without logging
    sees none of the library's warnings.
    """
    current: logging.Logger | None = logger
    while current is not None and current is not logging.root:
        if not current.propagate or any(
            not isinstance(handler, logging.NullHandler) for handler in current.handlers
        ):
            return False
        current = current.parent
    return True


def _rendered_for_stdlib(renderer: Processor) -> Processor:
    """The last processor of structlog's chain: the finished line, marked as such."""

    def render(
        logger: WrappedLogger, method_name: str, event_dict: EventDict
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        event = event_dict.get("event")
        line = renderer(logger, method_name, event_dict)
        chain = _installed
        level = structlog.processors.NAME_TO_LEVEL.get(method_name)
        if chain is not None and level is not None and isinstance(logger, logging.Logger):
            handler = _direct_handler(chain, logger)
            if handler is not None:
                # The record would reach the installed handler alone: write the line
                # there as `write_direct` does, without a standard library record
                # (filter_by_level already passed it), and end structlog's call.
                if level >= handler.level:
                    _write_line(handler, str(line), event, level)
                raise structlog.DropEvent
        # The standard library's call: logger.info(line, extra=...), no caller lookup.
        return (line,), {"extra": {RENDERED_ATTRIBUTE: True}}

    return render


class LineFormatter(structlog.stdlib.ProcessorFormatter):
    """Writes structlog's finished lines as they are; formats other records as before.

    Records of the standard library itself (uvicorn, Litestar) still pass the shared
    processors and the renderer (``foreign_pre_chain``), so one process writes one format.
    """

    def format(self, record: logging.LogRecord) -> str:
        """The line of a record.

        Args:
            record: a standard library record.

        Returns:
            The line structlog rendered, or the foreign record rendered.
        """
        if getattr(record, RENDERED_ATTRIBUTE, False):
            return str(record.msg)
        return super().format(record)


#: ``log.format`` -> the ``json`` argument of `configure_logging` (None: by terminal).
_JSON_BY_FORMAT: dict[str, bool | None] = {"json": True, "console": False, "auto": None}


def configure_from_settings(settings: Settings, *, stream: TextIO | None = None) -> None:
    """Configure logging from ``log.level`` and ``log.format``.

    Args:
        settings: the configuration.
        stream: where lines go (standard error when None).
    """
    configure_logging(
        level=settings.log_level.upper(), json=_JSON_BY_FORMAT[settings.log_format], stream=stream
    )


def bind_correlation_id(correlation_id: str) -> None:
    """Attach a correlation id to every record of the current context (request).

    Args:
        correlation_id: the id echoed in ``X-Correlation-Id``.
    """
    structlog.contextvars.bind_contextvars(correlation_id=correlation_id)


def clear_context() -> None:
    """Forget everything bound to the current context."""
    structlog.contextvars.clear_contextvars()


__all__ = [
    "REDACTED",
    "REDACTED_KEYS",
    "bind_correlation_id",
    "clear_context",
    "configure_from_settings",
    "configure_logging",
    "exception_outline",
    "format_exc_outline",
    "redact_secrets",
    "shared_processors",
    "write_direct",
]
