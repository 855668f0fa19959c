"""The aggregator's store on PostgreSQL: several replicas serving one deployment (``serve --store URL``).

:class:`PostgresStore` implements :class:`ldp_aggregator.store.CampaignStore`, as the SQLite
:class:`ldp_aggregator.store.Store` does; the service, the server and the command line use either
through that interface. psycopg 3 is imported only when a PostgreSQL store is opened.

The modules, bottom up (each imports only those above it):

* :mod:`~ldp_aggregator.store_pg.conninfo`: checking URLs, hiding passwords, connecting, and sorting
  failures into "fix the URL" (InvalidParameterError) and "retry later" (PostgresUnreachableError).
* :mod:`~ldp_aggregator.store_pg.schema`: the tables, their version, creation and migration under an
  advisory lock (replicas starting together create them once).
* :mod:`~ldp_aggregator.store_pg.pool`: reusable connections that are dropped once broken.
* :mod:`~ldp_aggregator.store_pg.admin`: tokens, ``auth_required`` and the raw purge, for the store and
  for the command line.
* :mod:`~ldp_aggregator.store_pg.writer`: the submission queue, the writer thread, group commit into
  accumulator shard rows, the raw-order lock.
* :mod:`~ldp_aggregator.store_pg.core`: :class:`PostgresStore` itself (open, campaigns, reads, raw
  batches, tokens), built on the writer.
"""

from __future__ import annotations

from ldp_aggregator.store_pg.admin import (
    add_token,
    list_tokens,
    prepare,
    purge_raw_url,
    revoke_token,
    url_auth_required,
)
from ldp_aggregator.store_pg.conninfo import PostgresUnreachableError, check_url, redact
from ldp_aggregator.store_pg.core import PostgresStore
from ldp_aggregator.store_pg.schema import PG_SCHEMA_VERSION

__all__ = [
    "PG_SCHEMA_VERSION",
    "PostgresStore",
    "PostgresUnreachableError",
    "add_token",
    "check_url",
    "list_tokens",
    "prepare",
    "purge_raw_url",
    "redact",
    "revoke_token",
    "url_auth_required",
]
