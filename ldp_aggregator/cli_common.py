"""Conventions shared by the two command lines, ``ldp-aggregator`` and ``ldp-sim`` (issue 13).

One module so that both behave alike without copied code; ``simulations.cli`` imports it (simulations may
import ldp_aggregator, never the reverse). What it fixes:

Exit codes (printed at the end of both ``--help`` texts and in the README):

    0  success
    1  internal error: a bug; one line on stderr (set LDP_DEBUG=1 to see the traceback)
    2  bad input: an option, argument, file or database that cannot be used (the line names it, the value
       and what is allowed); also a request the server refused as invalid (INVALID_ARGUMENT)
    3  the server refused the request: not found, already exists, closed, no or wrong access token
       (UNAUTHENTICATED, PERMISSION_DENIED), rate limited, or failed on its side
    4  unavailable: the server cannot be reached or did not answer in time, or the database is held or
       cannot be written

Errors are one line on stderr, ``error: ...``. ``--json`` prints one JSON document on stdout and nothing
else there (tables and notes are then not printed; notes go to stderr). JSON has no NaN or infinity:
non-finite numbers are written as the strings ``"inf"``, ``"-inf"`` and ``"nan"`` (for example
``epsilon_inf`` of rr and grr, which have no longitudinal bound, is ``"inf"``), so every document is strict
JSON. ``--version`` prints the program and the installed ``ldp-collect`` version. Help texts use rich
markup and show every default.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import math
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.text import Text
from typer.core import TyperGroup

from ldp_aggregator.client_access import ENV_TLS_CA, ENV_TLS_CERT, ENV_TLS_KEY, ENV_TOKEN
from ldp_client.errors import (
    CampaignClosedError,
    CampaignExistsError,
    CampaignNotFoundError,
    LdpError,
    StoreUnavailableError,
)

__all__ = [
    "EXIT_CODES_EPILOG",
    "EXIT_INTERNAL",
    "EXIT_OK",
    "EXIT_REFUSED",
    "EXIT_UNAVAILABLE",
    "EXIT_USAGE",
    "ConventionGroup",
    "TlsCaOpt",
    "TlsCertOpt",
    "TlsKeyOpt",
    "exit_code_for_error",
    "exit_code_for_status",
    "fail",
    "json_safe",
    "json_text",
    "new_app",
    "param_error_text",
    "print_error",
    "print_json",
    "token_option",
    "version_option",
    "version_text",
]

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_USAGE = 2
EXIT_REFUSED = 3
EXIT_UNAVAILABLE = 4

#: The exit codes as the end of every ``--help`` (rich markup; one line per code).
EXIT_CODES_EPILOG = (
    "[bold]Exit codes[/bold]: 0 success · 2 bad input (the message names the option, the value and what is "
    "allowed) · 3 the server refused the request (not found, exists, closed, access token missing or "
    "without the role, rate limited) · 4 unavailable (server unreachable or not answering, database "
    "busy) · 1 internal error (a bug; LDP_DEBUG=1 shows the traceback). "
    '[bold]--json[/bold] prints one strict JSON document on stdout (non-finite numbers as "inf", '
    '"-inf", "nan").'
)

# gRPC status name -> exit code; every other status (NOT_FOUND, ALREADY_EXISTS, FAILED_PRECONDITION,
# UNAUTHENTICATED, PERMISSION_DENIED, RESOURCE_EXHAUSTED, INTERNAL, ...) is a refusal (3).
# The client options of both command lines (ldp_aggregator.client_access reads them): same names, same
# environment variables, same help.
TlsCaOpt = Annotated[
    Path | None, typer.Option("--tls-ca", envvar=ENV_TLS_CA, help="Use TLS, trusting this CA (PEM).")
]
TlsCertOpt = Annotated[
    Path | None,
    typer.Option("--tls-cert", envvar=ENV_TLS_CERT, help="Client certificate (PEM), for mutual TLS."),
]
TlsKeyOpt = Annotated[
    Path | None, typer.Option("--tls-key", envvar=ENV_TLS_KEY, help="Key of --tls-cert (PEM).")
]


def token_option(help_text: str, name: str = "--token", envvar: str = ENV_TOKEN) -> Any:
    """An access-token option (its value never shown as a default)."""
    return typer.Option(name, envvar=envvar, help=help_text, show_default=False)


_EXIT_BY_STATUS: Mapping[str, int] = {
    "INVALID_ARGUMENT": EXIT_USAGE,
    "OUT_OF_RANGE": EXIT_USAGE,
    "UNAVAILABLE": EXIT_UNAVAILABLE,
    "DEADLINE_EXCEEDED": EXIT_UNAVAILABLE,
}
_MAX_MESSAGE_CHARS = 2000  # an error line stays readable even when a server echoes a huge value

_err = Console(stderr=True, soft_wrap=True, highlight=False)  # soft_wrap: error lines stay whole


def exit_code_for_status(status: str) -> int:
    """The exit code for a gRPC status, by name (``grpc.StatusCode.X.name``; ``"OK"`` is 0)."""
    if status == "OK":
        return EXIT_OK
    return _EXIT_BY_STATUS.get(status, EXIT_REFUSED)


def _one_line(message: str) -> str:
    line = " ".join(part.strip() for part in message.splitlines() if part.strip())
    if len(line) > _MAX_MESSAGE_CHARS:
        line = line[: _MAX_MESSAGE_CHARS - 1] + "…"
    return line


def print_error(message: str, *, label: str = "error") -> None:
    """``error: message`` as one line on stderr (the message is plain text, never rich markup)."""
    _err.print(Text.assemble((f"{label}:", "bold red"), " ", _one_line(message)))


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    """Print ``error: message`` on stderr and end the command with exit ``code``."""
    print_error(message)
    raise typer.Exit(code=code)


def json_safe(obj: Any) -> Any:
    """``obj`` as plain JSON values: numpy scalars and arrays made plain, non-finite floats as strings.

    Infinities and NaN become ``"inf"``, ``"-inf"`` and ``"nan"`` (JSON has no such numbers; the strings are
    the convention of both command lines), paths become strings, tuples lists.
    """
    if isinstance(obj, bool | str) or obj is None:
        return obj
    if isinstance(obj, int):
        return obj
    if isinstance(obj, float):
        if math.isfinite(obj):
            return obj
        return "nan" if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    if isinstance(obj, Mapping):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [json_safe(x) for x in obj]
    if isinstance(obj, Path):
        return str(obj)
    # numpy without importing it: its scalars have .item() (bool_, integer, floating), arrays .tolist().
    if hasattr(obj, "tolist") and hasattr(obj, "dtype"):
        return json_safe(obj.tolist())
    raise TypeError(f"cannot write {type(obj).__name__} as JSON")


def json_text(doc: Any) -> str:
    """``doc`` as strict, indented JSON (see :func:`json_safe`)."""
    return json.dumps(json_safe(doc), indent=2, allow_nan=False)


def print_json(doc: Any) -> None:
    """``--json``: the document on stdout, nothing else."""
    sys.stdout.write(json_text(doc) + "\n")
    sys.stdout.flush()


def version_text(prog: str) -> str:
    """``PROG VERSION`` of the installed ``ldp-collect`` distribution."""
    try:
        version = metadata.version("ldp-collect")
    except metadata.PackageNotFoundError:  # running from a source tree without an install
        version = "unknown (not installed)"
    return f"{prog} {version}"


def _version_callback(prog: str) -> Callable[[bool], None]:
    def show(value: bool) -> None:
        if value:
            sys.stdout.write(version_text(prog) + "\n")
            raise typer.Exit(EXIT_OK)

    return show


def exit_code_for_error(exc: LdpError) -> int:
    """The exit code of a project error met locally (e.g. reading ``--db``), as if a server had answered."""
    if isinstance(exc, StoreUnavailableError):
        return EXIT_UNAVAILABLE
    if isinstance(exc, CampaignNotFoundError | CampaignExistsError | CampaignClosedError):
        return EXIT_REFUSED
    return EXIT_USAGE


_PYTHON_F_ZERO_OPT_IN = "allow_f_zero=True"


def param_error_text(exc: LdpError) -> str:
    """A parameter error as a command line says it: the opt-in to RAPPOR f = 0 as the option it takes.

    The parameter classes word the opt-in for Python (``allow_f_zero=True``); on a command line it is
    ``--param allow_f_zero=true`` (``--param first.allow_f_zero=true`` for a side of a paired campaign).
    """
    text = str(exc)
    field, value = getattr(exc, "field", ""), getattr(exc, "value", None)
    if field == "params" and isinstance(value, str):  # ldp-sim names a --param as params='NAME=VALUE'
        field = value.partition("=")[0]
    if _PYTHON_F_ZERO_OPT_IN not in text or not isinstance(field, str):
        return text
    if field != "f" and not field.endswith(".f"):
        return text
    side = field[: -len("f")]  # "" or "first." / "second."
    return text.replace(_PYTHON_F_ZERO_OPT_IN, f"--param {side}allow_f_zero=true")


def _describe(exc: BaseException) -> tuple[int, str]:
    """Exit code and message for an exception that reached the command line unhandled."""
    import grpc

    if isinstance(exc, grpc.RpcError) and hasattr(exc, "code"):
        status = exc.code()
        details = exc.details() if hasattr(exc, "details") else str(exc)
        return exit_code_for_status(status.name), f"{status.name}: {details}"
    if isinstance(exc, LdpError):
        return exit_code_for_error(exc), str(exc)
    if isinstance(exc, OSError) and exc.filename is not None:
        return EXIT_USAGE, f"{exc.filename}: {exc.strerror or exc}"
    return EXIT_INTERNAL, (
        f"internal error: {type(exc).__name__}: {exc} (a bug; LDP_DEBUG=1 shows the traceback)"
    )


def _is_cli_control(exc: BaseException) -> bool:
    """Exit, Abort and usage errors: the command-line library reports those itself."""
    if isinstance(exc, typer.Exit | typer.Abort | BrokenPipeError):
        return True  # a closed pipe (ldp-sim --help | head) ends quietly, as the library does
    # Usage errors (ClickException and its subclasses) carry an exit code and know how to show themselves.
    return hasattr(exc, "exit_code") and hasattr(exc, "show")


def _reflow(text: str) -> str:
    """Docstring paragraphs as single lines (the help renderer keeps a docstring's line breaks, which then
    break mid-sentence); indented blocks such as examples keep theirs."""
    paragraphs = inspect.cleandoc(text).split("\n\n")
    return "\n\n".join(
        p if any(line[:1].isspace() for line in p.splitlines()) else " ".join(p.split("\n"))
        for p in paragraphs
    )


def _reflow_help(group: Any) -> None:
    """Reflow the help of every command under ``group`` (the root's own help is written line by line)."""
    for command in getattr(group, "commands", {}).values():
        if command.help:
            command.help = _reflow(command.help)
        _reflow_help(command)


def _usage_message(exc: Any) -> str:
    """A usage error's message, with the value that was refused when the library kept it aside."""
    message = str(exc.format_message()).rstrip(".")
    errors = getattr(exc.__cause__, "errors", None)  # a type check failure keeps the input there
    if callable(errors):
        with contextlib.suppress(Exception):
            value = str(errors()[0]["input"])
            shown = value if len(value) <= 80 else value[:77] + "..."
            message += f" (value given: {shown!r})"
    ctx = getattr(exc, "ctx", None)
    return message + (f"; see: {ctx.command_path} --help" if ctx is not None else "")


class ConventionGroup(TyperGroup):
    """The root command group of both command lines: anything a command did not handle ends as one line.

    A gRPC error gets the exit code of its status, a project error 2 (3 or 4 for a refusal or an
    unavailable store), anything else 1 ("internal error"). ``LDP_DEBUG=1`` re-raises instead, for the
    traceback.
    """

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        """Run the command line; a usage error (unknown option, missing value, wrong type) is one line too.

        The library would draw a boxed panel; the convention is one ``error:`` line naming the option and
        the value, then the command's ``--help`` to see what is allowed, and exit 2.
        """
        _reflow_help(self)
        run = functools.partial(
            super().main, args, prog_name, complete_var, windows_expand_args=windows_expand_args, **extra
        )
        if not standalone_mode:
            return run(standalone_mode=False)
        try:
            code = run(standalone_mode=False)
        except Exception as exc:
            if not (hasattr(exc, "exit_code") and hasattr(exc, "format_message")):
                raise
            if type(exc).__name__ != "NoArgsIsHelpError":  # that one has printed the help already
                print_error(_usage_message(exc))
            sys.exit(exc.exit_code)
        except typer.Abort:
            print_error("aborted")
            sys.exit(EXIT_INTERNAL)
        sys.exit(code if isinstance(code, int) else EXIT_OK)

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except Exception as exc:
            if _is_cli_control(exc) or os.environ.get("LDP_DEBUG"):
                raise
            code, message = _describe(exc)
            print_error(message)
            raise typer.Exit(code) from None


def new_app(*, help_text: str, epilog: str = "") -> typer.Typer:
    """A root Typer app with the shared conventions: rich help ending with the exit codes, errors as one line.

    ``help_text`` and ``epilog`` are rich markup (no reST); the exit codes are appended to the epilog. The
    app's callback adds ``--version`` with :func:`version_option`.
    """
    return typer.Typer(
        cls=ConventionGroup,
        add_completion=False,
        no_args_is_help=True,
        rich_markup_mode="rich",
        help=help_text,
        epilog=(epilog + "\n\n" if epilog else "") + EXIT_CODES_EPILOG,
        pretty_exceptions_enable=False,
    )


def version_option(prog: str) -> Any:
    """The ``--version`` option of a root callback: prints ``PROG VERSION`` and exits 0."""
    return typer.Option(
        "--version",
        callback=_version_callback(prog),
        is_eager=True,
        help="Print the version and exit.",
    )
