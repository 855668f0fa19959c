"""Durable storage of campaigns, batch ids, raw reports and accumulators: the only package touching the DB.

The store is mechanism-agnostic. A campaign is kept as opaque serialized parameters (protobuf bytes) plus a
few columns; a campaign's running aggregate is any object satisfying the small :class:`Accumulator`
protocol (a mergeable sum with ``+`` and ``to_bytes``), decoded and created through two callables the
caller supplies. That keeps the store free of mechanism knowledge and lets the same code store RR, GRR
and RAPPOR sums.

Nothing here stores an IP address, a client identifier or any other per-device metadata: a batch row is
(campaign, client-chosen batch id, report count, server receive time). Batch ids and report ids share one
namespace per campaign (the wire contract): a single report is stored under its report id, like a batch.

The modules, bottom up (each imports only those above it):

* :mod:`~ldp_aggregator.store.records`: the records, outcomes and counters, the two errors, and the
  ``Accumulator``/``BatchDelta`` protocols.
* :mod:`~ldp_aggregator.store.schema`: the tables, the version check and the in-place migration of
  schema 1 and 2 files (history in its docstring).
* :mod:`~ldp_aggregator.store.files`: private file modes, the exclusive lock file, the connections and
  the transaction rule.
* :mod:`~ldp_aggregator.store.writer`: the writer thread and group commit (the durability model).
* :mod:`~ldp_aggregator.store.maintenance` and :mod:`~ldp_aggregator.store.tokens`: short connections for
  the CLI while a server holds the file; access tokens and the persisted ``auth_required`` switch.
* :mod:`~ldp_aggregator.store.core`: :class:`Store` itself (open, campaigns, reads).
* :mod:`~ldp_aggregator.store.base`: :class:`CampaignStore`, the interface the service, the server and the
  command line use, which :class:`Store` and :class:`ldp_aggregator.store_pg.PostgresStore` (PostgreSQL,
  several replicas) both implement.

Import the public names from this package (``from ldp_aggregator.store import Store``).
"""

from __future__ import annotations

from ldp_aggregator.store.base import CampaignStore, is_postgres_url
from ldp_aggregator.store.core import Store
from ldp_aggregator.store.maintenance import purge_raw_file
from ldp_aggregator.store.records import (
    MAX_ID_LENGTH,
    Accumulator,
    BatchDelta,
    CampaignRecord,
    StoreLockedError,
    StoreSchemaError,
    StoreStats,
    SubmitOutcome,
    TokenRecord,
)
from ldp_aggregator.store.schema import SCHEMA_VERSION
from ldp_aggregator.store.tokens import add_token, auth_required_file, list_tokens, revoke_token

__all__ = [
    "MAX_ID_LENGTH",
    "SCHEMA_VERSION",
    "Accumulator",
    "BatchDelta",
    "CampaignRecord",
    "CampaignStore",
    "Store",
    "StoreLockedError",
    "StoreSchemaError",
    "StoreStats",
    "SubmitOutcome",
    "TokenRecord",
    "add_token",
    "auth_required_file",
    "is_postgres_url",
    "list_tokens",
    "purge_raw_file",
    "revoke_token",
]
