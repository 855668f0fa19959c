"""PostgreSQL for tests and benchmarks: a throwaway cluster (:class:`simulations.pg_throwaway.PgCluster`:
initdb in a temporary directory, a free loopback port, removed afterwards; as root its commands run as the
``postgres`` user), or an external server named by ``LDP_TEST_POSTGRES_DSN`` (tests then get a fresh schema
of it each, never a cluster of their own, and skip what needs one).

Without binaries (and no external server) :func:`unavailable_reason` says why; the tests skip with that
reason, except under CI (``CI=true``), where they fail: a CI machine must have PostgreSQL (Debian's
``postgresql`` package).
"""

from __future__ import annotations

import os
import secrets
from typing import Final
from urllib.parse import quote

from simulations.pg_throwaway import INSTALL_HINT, PgCluster, bindir, missing_reason

__all__ = [
    "EXTERNAL_DSN_VAR",
    "PgCluster",
    "bindir",
    "new_schema_url",
    "unavailable_reason",
]

EXTERNAL_DSN_VAR: Final = "LDP_TEST_POSTGRES_DSN"


def unavailable_reason() -> str | None:
    """Why no PostgreSQL can be had here (None when a cluster can be started or a DSN is given)."""
    if os.environ.get(EXTERNAL_DSN_VAR):
        return None
    if bindir() is None:
        return (
            "no PostgreSQL binaries (initdb, pg_ctl) in $PG_BINDIR, /usr/lib/postgresql/*/bin or PATH, and no"
            f" {EXTERNAL_DSN_VAR}: {INSTALL_HINT}"
        )
    return missing_reason()


def new_schema_url(base_url: str, name: str | None = None) -> str:
    """A fresh schema in the database of ``base_url``, and a URL whose ``search_path`` is that schema only,
    so every test (or replica set) gets tables of its own in one server."""
    import psycopg

    schema = name or f"t_{secrets.token_hex(6)}"
    with psycopg.connect(base_url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    sep = "&" if "?" in base_url else "?"
    return f"{base_url}{sep}options={quote(f'-csearch_path={schema}')}"
