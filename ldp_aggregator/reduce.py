"""Analysis of a report archive on Dask: map archive files to accumulators, merge them, estimate.

The accumulators are mergeable sums, so scale-out is the server's own ingest run as map-and-merge by an
existing engine (dask.distributed), never a second implementation:

* **map** (:func:`file_accumulator`, one task per archive file, on a worker): the file is read and checked
  (:func:`ldp_aggregator.archive.read_file`: checksum, metadata, the campaign's parameters), each payload is
  decoded by the wire facade exactly as the service decodes a submission (:func:`payload_columns`:
  ``wire.batch_from_proto``, or ``wire.report_from_proto`` for a single report) and added with
  :func:`ldp_aggregator.accumulators.add_columns` to the campaign's empty accumulator
  (``accumulator_for``); the task returns the accumulator's checksummed byte form (``to_bytes``);
* **merge** (:func:`merge_accumulators`, a binary tree of tasks on the workers): ``accumulator_from_bytes``
  of both, ``+``, ``to_bytes``;
* **answer** (on the caller): the merged accumulator goes to the functions the Analyst service calls
  (:func:`ldp_aggregator.analysis.estimate_campaign`, :func:`ldp_aggregator.rappor_decode.decode_campaign`,
  :func:`ldp_aggregator.association.associate_campaign`), so the answers equal the server's for the same
  reports: the merged accumulator is byte-for-byte the store's when the archive holds every committed
  report (integer sums do not depend on the order of addition).

The cluster is a ``LocalCluster`` started here (:func:`dask_client`) or an existing scheduler; its workers
must be able to read the archive's paths (same machine, or a shared file system).
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from ldp_aggregator.accumulators import (
    Accumulator,
    accumulator_for,
    accumulator_from_bytes,
    add_columns,
    check_matches,
)
from ldp_aggregator.archive import ArchiveError, archive_files, campaign_info, read_file, read_metadata
from ldp_client import wire
from ldp_client._proto.ldp.v1 import reports_pb2
from ldp_client.errors import LdpError, shown

if TYPE_CHECKING:
    from distributed import Client

    from ldp_client.params import MechanismParams

__all__ = [
    "CONNECT_TIMEOUT_S",
    "DEFAULT_WORKERS",
    "ClusterError",
    "ReduceResult",
    "dask_client",
    "file_accumulator",
    "merge_accumulators",
    "payload_columns",
    "reduce_archive",
    "tree_merge",
]

#: Workers of the LocalCluster started when no scheduler is named (one thread each: the map is numpy-bound).
DEFAULT_WORKERS: Final = 2
#: Seconds to wait for a named scheduler before giving up with one line.
CONNECT_TIMEOUT_S = 10.0


class ClusterError(LdpError):
    """No Dask cluster to run on: dask.distributed is missing, or the named scheduler cannot be reached."""


def payload_columns(params: MechanismParams, campaign_id: str, raw: bytes) -> Any:
    """The decoded columns of one retained payload (a ``ReportBatch``, or a single ``Report``).

    The same wire functions the service ingests with, which check every field again.
    """
    batch = reports_pb2.ReportBatch.FromString(raw)
    if batch.count:
        return wire.batch_from_proto(batch, params, campaign_id=campaign_id)
    # Collector.SubmitReport's reports are retained as their Report message (a batch never has count 0).
    return wire.report_from_proto(reports_pb2.Report.FromString(raw), params, campaign_id=campaign_id)


def _blob_digest(blob: bytes) -> str:
    return hashlib.sha256(blob).hexdigest()


def file_accumulator(path: str, campaign_id: str, campaign_digest: str) -> bytes:
    """Map task: one archive file's payloads summed into the campaign's accumulator, as ``to_bytes``.

    Raises:
        ArchiveError: the file fails its checks, or belongs to another campaign or other parameters.
        InvalidReportError: a payload does not decode for the campaign.
    """
    content = read_file(Path(path))
    if (
        content.meta["ldp.campaign_id"] != campaign_id
        or _blob_digest(content.campaign_blob) != campaign_digest
    ):
        raise ArchiveError(
            f"{path}: campaign {shown(content.meta['ldp.campaign_id'])} with parameters other than those of"
            f" the archive's campaign {shown(campaign_id)}: a foreign file"
        )
    info = campaign_info(content.campaign_blob, path)
    acc = accumulator_for(info.params)
    for raw in content.payloads:
        add_columns(acc, info.params, payload_columns(info.params, campaign_id, raw))
    return acc.to_bytes()


def merge_accumulators(first: bytes, second: bytes) -> bytes:
    """Merge task: the sum of two accumulators in their byte form (each checked by its checksum)."""
    return (accumulator_from_bytes(first) + accumulator_from_bytes(second)).to_bytes()


def tree_merge(client: Client, futures: Sequence[Any]) -> bytes:
    """Merge accumulator futures pairwise on the workers (a tree of depth log2 n); the result's bytes."""
    level = list(futures)
    if not level:
        raise ArchiveError("nothing to merge: no archive files")
    while len(level) > 1:
        merged = [
            client.submit(merge_accumulators, a, b, pure=False)
            for a, b in zip(level[::2], level[1::2], strict=False)
        ]
        if len(level) % 2:
            merged.append(level[-1])
        level = merged
    result: bytes = level[0].result()
    return result


@contextlib.contextmanager
def dask_client(
    scheduler: str | None = None, *, workers: int = DEFAULT_WORKERS, processes: bool = True
) -> Iterator[Client]:
    """A Dask client: of the scheduler at ``scheduler`` (``tcp://HOST:PORT``), or of a LocalCluster.

    The LocalCluster has ``workers`` single-threaded workers (processes, or threads of this process with
    ``processes=False``), no dashboard, and is closed on exit.

    Raises:
        ClusterError: dask.distributed is not installed, or the scheduler cannot be reached.
    """
    try:
        from distributed import Client, LocalCluster
    except ModuleNotFoundError as exc:
        raise ClusterError(
            f"analysis on Dask needs dask.distributed ({exc.name} is not installed):"
            " pip install 'ldp-collect[cluster]'"
        ) from None
    if scheduler is not None:
        try:
            client = Client(scheduler, timeout=CONNECT_TIMEOUT_S)  # type: ignore[no-untyped-call]
        except (OSError, TimeoutError, ValueError) as exc:
            raise ClusterError(
                f"--scheduler {shown(scheduler)}: cannot reach a Dask scheduler there ({exc}); allowed the"
                " address of a running dask scheduler, e.g. tcp://10.0.0.5:8786"
            ) from None
        with client:
            yield client
        return
    if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= 1024:
        raise ClusterError(f"--workers {shown(workers)}: allowed an integer in [1, 1024]")
    with (
        LocalCluster(  # type: ignore[no-untyped-call]
            n_workers=workers,
            threads_per_worker=1,
            processes=processes,
            dashboard_address=":0",
            silence_logs=40,  # logging.ERROR: the command's output stays its own
        ) as cluster,
        Client(cluster) as client,  # type: ignore[no-untyped-call]
    ):
        yield client


@dataclass(frozen=True, kw_only=True)
class ReduceResult:
    """A campaign's archive reduced to one accumulator.

    Attributes:
        info: the campaign (from the archive's metadata).
        accumulator: the merged accumulator.
        files: archive files read.
        rows: payloads (submissions) read.
        seconds: wall-clock time of the map and merge.
    """

    info: wire.CampaignInfo
    accumulator: Accumulator
    files: int
    rows: int
    seconds: float


def reduce_archive(client: Client, archive: Path, campaign_id: str) -> ReduceResult:
    """Map every archive file of the campaign to an accumulator on the cluster and merge them.

    The files' parameters are checked on the caller first (metadata only): every file must carry the
    same campaign message. Each task then checks its whole file (checksum included).

    Raises:
        ArchiveError: no files for the campaign, a file fails its checks, or files disagree on the
            campaign's parameters (the message names the file).
    """
    files = archive_files(archive, campaign_id)
    if not files:
        raise ArchiveError(
            f"archive {archive}: no files for campaign {shown(campaign_id)} (run ldp-aggregator archive"
            " export first, or check the campaign id)"
        )
    _, blob = read_metadata(files[0].path)
    rows = 0
    for f in files:
        meta, this = read_metadata(f.path)
        if meta["ldp.campaign_id"] != campaign_id:
            raise ArchiveError(
                f"{f.path}: holds campaign {shown(meta['ldp.campaign_id'])}, not {shown(campaign_id)}"
            )
        if this != blob:
            raise ArchiveError(
                f"{f.path}: campaign parameters differ from those of {files[0].path}: a foreign file"
            )
        rows += int(meta["ldp.rows"])
    info = campaign_info(blob, str(files[0].path))
    digest = _blob_digest(blob)
    start = time.perf_counter()
    futures = client.map(
        file_accumulator,
        [str(f.path) for f in files],
        campaign_id=campaign_id,
        campaign_digest=digest,
        pure=False,
    )
    merged = accumulator_from_bytes(tree_merge(client, futures))
    seconds = time.perf_counter() - start
    check_matches(merged, info.params)
    return ReduceResult(info=info, accumulator=merged, files=len(files), rows=rows, seconds=seconds)
