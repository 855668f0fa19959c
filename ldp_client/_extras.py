"""Console entry points that name the missing extra instead of failing with a traceback (no numpy).

``pip install ldp-collect`` installs the client only; ``ldp-aggregator`` and ``ldp-sim`` need the
``aggregator`` and ``sim`` extras. Their entry modules (:mod:`ldp_aggregator.entry`,
:mod:`simulations.entry`) import the real command line through :func:`run_command`, which turns an
ImportError of one of the extra's third-party packages into one line on stderr and exit status 1.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable
from typing import cast

__all__ = ["EXIT_MISSING_EXTRA", "run_command"]

EXIT_MISSING_EXTRA = 1
"""Exit status of a console command whose extra is not installed."""


def run_command(command: str, extra: str, module: str, packages: Iterable[str]) -> None:
    """Import ``module`` and call its ``main()``; if a package of ``extra`` is missing, say so and exit.

    Args:
        command: the console command's name (``ldp-aggregator``).
        extra: the extra that provides its dependencies (``aggregator``).
        module: the module with the ``main()`` to run (``ldp_aggregator.cli``).
        packages: top-level names of the extra's third-party packages; a missing module of any other
            name is a real error and propagates.
    """
    known = set(packages)
    try:
        main = cast(Callable[[], None], importlib.import_module(module).main)
    except ImportError as exc:
        missing = (exc.name or "").partition(".")[0]
        if missing not in known:
            raise
        print(f"{command} needs the {extra!r} extra: pip install 'ldp-collect[{extra}]'", file=sys.stderr)
        raise SystemExit(EXIT_MISSING_EXTRA) from None
    main()
