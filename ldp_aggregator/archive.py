"""Report archives in Parquet: the retained raw reports, append-only, partitioned by campaign and day.

An archive is a directory that ``ldp-aggregator archive export`` fills from a store's retained raw reports
(``retain_raw``: each committed batch exactly as the device sent it, already randomized on the device)
and that analysts re-read later (``ldp-aggregator archive estimate|decode|associate``, on Dask:
:mod:`ldp_aggregator.reduce`), long after the store purged them. Layout::

    ARCHIVE/campaign=<id, percent-encoded>/day=<YYYY-MM-DD>/part-<first position>-<last position>.parquet

Each file holds two columns, ``position`` (int64: the row's position in the store, strictly increasing)
and ``payload`` (binary: a serialized ``ReportBatch``, or a ``Report`` for a single-report submission),
and carries in its Parquet key-value metadata (:data:`META_KEYS`): the format, the campaign id, the
campaign as stored (its serialized ``Campaign`` message, base64: mechanism, parameters, candidates), the
day, the row count, the first and last positions, and a SHA-256 checksum over all of these and every row
(:func:`_checksum`). Nothing else is written: no batch id, no receive time, nothing about a device.

The day is the UTC day on which the export appended the rows. Reading goes through one store method,
``iter_raw_batches(campaign_id, after_position)`` (SQLite: :meth:`ldp_aggregator.store.Store
.iter_raw_batches`), which yields ``(position, payload)`` in ingest order; run the export daily and a
report lands in the partition of the day after it arrived at the latest.

Append-only: an export reads the highest archived position of each campaign from the files' metadata and
appends only rows after it, as new files; an existing file is never opened for writing, replaced or
removed (a new file is written under a temporary name, synced, then hard-linked to its final name, which
fails rather than overwrite). A lock file keeps two exports off one archive at once. A crash leaves at most
a temporary file, which readers ignore and the next export removes. Files of a campaign whose parameters
differ from the store's campaign of that id are refused before anything is written.

:func:`verify_archive` checks every file: its checksum, its metadata against its path and its rows
(count, positions strictly increasing and within the range the name states), the campaign parameters
(parsable, and identical across the campaign's files and, given a store, to the store's), and that files
of one campaign do not overlap. It names each bad file.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import fcntl
import hashlib
import itertools
import os
import re
import struct
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol

from ldp_client import wire
from ldp_client._proto.ldp.v1 import campaign_pb2
from ldp_client.errors import LdpError, shown

if TYPE_CHECKING:
    import pyarrow as pa

    from ldp_aggregator.store import CampaignRecord

__all__ = [
    "ARCHIVE_FORMAT",
    "META_KEYS",
    "ArchiveError",
    "ArchiveFile",
    "ExportSummary",
    "RawReportSource",
    "VerifyProblem",
    "archive_files",
    "campaign_dir",
    "campaign_info",
    "export_archive",
    "iter_payloads",
    "read_file",
    "read_metadata",
    "verify_archive",
]

#: Written to every file's metadata; a reader refuses files of another format.
ARCHIVE_FORMAT: Final = "ldp-archive/1"
#: The Parquet key-value metadata of a file.
META_KEYS: Final = (
    "ldp.format",
    "ldp.campaign_id",
    "ldp.campaign",
    "ldp.day",
    "ldp.rows",
    "ldp.first_position",
    "ldp.last_position",
    "ldp.checksum",
)
# Files are cut at whichever limit comes first: rows (one per batch), or payload bytes. Row groups are cut
# at fewer bytes so that reading one never needs a large contiguous buffer.
DEFAULT_MAX_FILE_ROWS: Final = 1_000_000
DEFAULT_MAX_FILE_BYTES: Final = 256 * 1024 * 1024
_ROW_GROUP_BYTES: Final = 32 * 1024 * 1024
_LOCK_NAME: Final = ".export.lock"
_TMP_SUFFIX: Final = ".tmp"
_PART_RE: Final = re.compile(r"^part-(\d{20})-(\d{20})\.parquet$")
_DAY_RE: Final = re.compile(r"^day=(\d{4}-\d{2}-\d{2})$")
_CAMPAIGN_PREFIX: Final = "campaign="
# A directory name must stay well below the usual 255-byte limit; longer ids are named by their digest.
_MAX_DIR_NAME: Final = 200
_U64: Final = struct.Struct("<QQ")


class ArchiveError(LdpError):
    """An archive cannot be used: a file fails its checks, or its campaign's parameters are foreign."""


class RawReportSource(Protocol):
    """What the export reads from a store (the SQLite ``Store``; the PostgreSQL store offers the same)."""

    def get_campaign(self, campaign_id: str) -> CampaignRecord: ...

    def list_campaigns(self) -> list[CampaignRecord]: ...

    def iter_raw_batches(self, campaign_id: str, after_position: int) -> Iterator[tuple[int, bytes]]: ...


def _pa() -> tuple[Any, Any]:
    """pyarrow and pyarrow.parquet, imported when an archive is used (the ``cluster`` extra)."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ModuleNotFoundError as exc:
        raise ArchiveError(
            f"report archives need pyarrow ({exc.name} is not installed): pip install 'ldp-collect[cluster]'"
        ) from None
    return pa, pq


# ------------------------------------------------------------------------------------------------ layout


def campaign_dir(archive: Path, campaign_id: str) -> Path:
    """The directory of a campaign's files: ``campaign=<percent-encoded id>`` (a digest for very long ids)."""
    quoted = urllib.parse.quote(campaign_id, safe="")
    if len(_CAMPAIGN_PREFIX) + len(quoted) > _MAX_DIR_NAME:
        quoted = "sha256-" + hashlib.sha256(campaign_id.encode("utf-8")).hexdigest()
    return archive / f"{_CAMPAIGN_PREFIX}{quoted}"


def _part_name(first: int, last: int) -> str:
    return f"part-{first:020d}-{last:020d}.parquet"


@dataclass(frozen=True, slots=True)
class ArchiveFile:
    """One file of an archive, as its path names it (its metadata is read by :func:`read_file`)."""

    path: Path
    day: str
    first_position: int
    last_position: int


def archive_files(archive: Path, campaign_id: str) -> list[ArchiveFile]:
    """The campaign's files in position order (temporary files of an interrupted export are not listed)."""
    base = campaign_dir(archive, campaign_id)
    found: list[ArchiveFile] = []
    if not base.is_dir():
        return found
    for day_dir in base.iterdir():
        day = _DAY_RE.match(day_dir.name)
        if day is None or not day_dir.is_dir():
            continue
        for path in day_dir.iterdir():
            part = _PART_RE.match(path.name)
            if part is not None:
                found.append(ArchiveFile(path, day.group(1), int(part.group(1)), int(part.group(2))))
    found.sort(key=lambda f: (f.first_position, f.last_position, str(f.path)))
    return found


# -------------------------------------------------------------------------------------------- checksums


def _hasher(campaign_id: str, campaign_blob: bytes, day: str) -> Any:
    """SHA-256 fed with the format, campaign id, day and campaign message; rows follow (:func:`_hash_row`)."""
    digest = hashlib.sha256()
    for data in (ARCHIVE_FORMAT.encode(), campaign_id.encode("utf-8"), day.encode(), campaign_blob):
        digest.update(len(data).to_bytes(8, "little") + data)
    return digest


def _hash_row(digest: Any, position: int, payload: bytes) -> None:
    digest.update(_U64.pack(position, len(payload)))
    digest.update(payload)


def _checksum(campaign_id: str, campaign_blob: bytes, day: str, rows: Iterable[tuple[int, bytes]]) -> str:
    """SHA-256 over the format, campaign id, day, campaign message and every (position, payload) row."""
    digest = _hasher(campaign_id, campaign_blob, day)
    for position, payload in rows:
        _hash_row(digest, position, payload)
    return f"sha256:{digest.hexdigest()}"


# -------------------------------------------------------------------------------------------- reading


def _metadata(path: Path) -> dict[str, str]:
    """A file's ``ldp.*`` metadata, or ArchiveError naming the file (not Parquet, other format, missing)."""
    _, pq = _pa()
    try:
        raw = pq.read_metadata(path).metadata or {}
    except (OSError, ValueError) as exc:
        raise ArchiveError(f"{path}: not a readable Parquet file ({exc})") from None
    meta = {k.decode("utf-8", "replace"): v.decode("utf-8", "replace") for k, v in raw.items()}
    missing = [k for k in META_KEYS if k not in meta]
    if missing:
        raise ArchiveError(
            f"{path}: metadata {', '.join(missing)} missing: not a file of an ldp report archive"
        )
    if meta["ldp.format"] != ARCHIVE_FORMAT:
        raise ArchiveError(f"{path}: ldp.format={shown(meta['ldp.format'])}; allowed {ARCHIVE_FORMAT!r}")
    return meta


def _campaign_blob(path: Path, meta: dict[str, str]) -> bytes:
    try:
        return base64.b64decode(meta["ldp.campaign"], validate=True)
    except ValueError:
        raise ArchiveError(f"{path}: ldp.campaign is not base64") from None


def read_metadata(path: Path) -> tuple[dict[str, str], bytes]:
    """A file's ``ldp.*`` metadata and its campaign message, from the footer only (no rows read)."""
    meta = _metadata(path)
    return meta, _campaign_blob(path, meta)


def campaign_info(blob: bytes, where: str) -> wire.CampaignInfo:
    """The campaign a stored ``Campaign`` message describes (validated by :mod:`ldp_client.wire`)."""
    try:
        return wire.campaign_from_proto(campaign_pb2.Campaign.FromString(blob))
    except LdpError as exc:
        raise ArchiveError(f"{where}: the campaign parameters are not valid: {exc}") from None
    except Exception as exc:  # protobuf's DecodeError: bytes that are no Campaign message
        raise ArchiveError(f"{where}: the campaign parameters do not parse ({exc})") from None


@dataclass(frozen=True, slots=True)
class _FileContent:
    meta: dict[str, str]
    campaign_blob: bytes
    positions: list[int]
    payloads: list[bytes]


def read_file(path: Path, *, check: bool = True) -> _FileContent:
    """A file's metadata and rows; with ``check``, ArchiveError unless it passes :func:`_check_content`."""
    _, pq = _pa()
    meta = _metadata(path)
    blob = _campaign_blob(path, meta)
    try:
        table = pq.read_table(path, columns=["position", "payload"])
    except (OSError, ValueError, KeyError) as exc:
        raise ArchiveError(f"{path}: cannot read its rows ({exc})") from None
    positions = table.column("position").to_pylist()
    payloads = table.column("payload").to_pylist()
    content = _FileContent(meta, blob, positions, payloads)
    if check:
        problem = _check_content(path, content)
        if problem is not None:
            raise ArchiveError(problem)
    return content


def _check_content(path: Path, content: _FileContent) -> str | None:
    """What is wrong with one file on its own (metadata against rows, path and checksum), or None."""
    meta, positions = content.meta, content.positions
    try:
        rows, first, last = (int(meta[k]) for k in ("ldp.rows", "ldp.first_position", "ldp.last_position"))
    except ValueError:
        return f"{path}: ldp.rows/ldp.first_position/ldp.last_position are not integers"
    if rows != len(positions):
        return f"{path}: {len(positions)} rows, but its metadata says ldp.rows={rows}"
    if positions and (positions[0] != first or positions[-1] != last):
        return f"{path}: positions {positions[0]}..{positions[-1]}, but its metadata says {first}..{last}"
    if any(b <= a for a, b in itertools.pairwise(positions)):
        return f"{path}: positions are not strictly increasing"
    if path.name != _part_name(first, last):
        return f"{path}: its name does not match its metadata (positions {first}..{last})"
    if path.parent.name != f"day={meta['ldp.day']}":
        return f"{path}: in {path.parent.name} but its metadata says ldp.day={shown(meta['ldp.day'])}"
    found = _checksum(
        meta["ldp.campaign_id"],
        content.campaign_blob,
        meta["ldp.day"],
        zip(positions, content.payloads, strict=True),
    )
    if found != meta["ldp.checksum"]:
        return f"{path}: checksum mismatch (metadata {meta['ldp.checksum'][:23]}..., content {found[:23]}...)"
    return None


def iter_payloads(archive: Path, campaign_id: str) -> Iterator[bytes]:
    """Every archived payload of a campaign, in position order, each file checked before it is read."""
    for f in archive_files(archive, campaign_id):
        yield from read_file(f.path).payloads


# -------------------------------------------------------------------------------------------- export


@dataclass(slots=True)
class ExportSummary:
    """What one export appended, per campaign: files, rows, and the last archived position."""

    campaigns: dict[str, dict[str, int]] = field(default_factory=dict)
    files: list[Path] = field(default_factory=list)

    @property
    def rows(self) -> int:
        return sum(c["rows"] for c in self.campaigns.values())


@contextlib.contextmanager
def _export_lock(archive: Path) -> Iterator[None]:
    """An exclusive lock on the archive for one export (a second export at once fails, not interleaves)."""
    fd = os.open(archive / _LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ArchiveError(
                f"archive {archive}: another export is running (it holds {_LOCK_NAME})"
            ) from None
        yield
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _archived_position(archive: Path, record: CampaignRecord) -> int:
    """The campaign's last archived position (0: none), refusing files with foreign parameters."""
    last = 0
    for f in archive_files(archive, record.campaign_id):
        meta = _metadata(f.path)
        blob = _campaign_blob(f.path, meta)
        if meta["ldp.campaign_id"] != record.campaign_id or blob != record.params_blob:
            raise ArchiveError(
                f"{f.path}: holds campaign {shown(meta['ldp.campaign_id'])} with other parameters than the"
                f" store's campaign {shown(record.campaign_id)}: a foreign archive; export into another"
                " directory"
            )
        last = max(last, int(meta["ldp.last_position"]))
    return last


class _PartWriter:
    """Writes one file under a temporary name; :meth:`finish` names it by its positions and syncs it."""

    def __init__(self, directory: Path, record: CampaignRecord, day: str, schema: pa.Schema) -> None:
        _, pq = _pa()
        self.directory = directory
        self.record = record
        self.day = day
        self.tmp = directory / f".part-{os.getpid()}-{id(self)}{_TMP_SUFFIX}"
        self.writer = pq.ParquetWriter(self.tmp, schema, compression="zstd")
        self.schema = schema
        self.positions: list[int] = []
        self.pending: list[bytes] = []
        self.pending_positions: list[int] = []
        self.pending_bytes = 0
        self.bytes = 0
        self.digest = _hasher(record.campaign_id, record.params_blob, day)

    def add(self, position: int, payload: bytes) -> None:
        self.pending_positions.append(position)
        self.pending.append(payload)
        self.positions.append(position)
        self.pending_bytes += len(payload)
        self.bytes += len(payload)
        if self.pending_bytes >= _ROW_GROUP_BYTES:
            self._flush()

    def _flush(self) -> None:
        pa, _ = _pa()
        if not self.pending:
            return
        table = pa.Table.from_arrays(
            [
                pa.array(self.pending_positions, type=pa.int64()),
                pa.array(self.pending, type=pa.large_binary()),
            ],
            schema=self.schema,
        )
        self.writer.write_table(table)
        for position, payload in zip(self.pending_positions, self.pending, strict=True):
            _hash_row(self.digest, position, payload)
        self.pending, self.pending_positions, self.pending_bytes = [], [], 0

    def finish(self) -> Path:
        self._flush()
        first, last = self.positions[0], self.positions[-1]
        checksum = f"sha256:{self.digest.hexdigest()}"
        self.writer.add_key_value_metadata(
            {
                "ldp.format": ARCHIVE_FORMAT,
                "ldp.campaign_id": self.record.campaign_id,
                "ldp.campaign": base64.b64encode(self.record.params_blob).decode("ascii"),
                "ldp.day": self.day,
                "ldp.rows": str(len(self.positions)),
                "ldp.first_position": str(first),
                "ldp.last_position": str(last),
                "ldp.checksum": checksum,
            }
        )
        self.writer.close()
        with open(self.tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        final = self.directory / _part_name(first, last)
        try:
            os.link(self.tmp, final)  # fails if the name exists: a file is never replaced
        finally:
            self.tmp.unlink()
        _fsync_dir(self.directory)
        return final

    def abort(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()
        self.tmp.unlink(missing_ok=True)


def _remove_stale_temporaries(base: Path) -> None:
    for tmp in base.glob(f"day=*/.part-*{_TMP_SUFFIX}"):
        tmp.unlink(missing_ok=True)


def _today_utc() -> str:
    return dt.datetime.now(dt.UTC).date().isoformat()


def export_archive(
    store: RawReportSource,
    archive: Path,
    *,
    campaign_ids: Iterable[str] | None = None,
    day: Callable[[], str] = _today_utc,
    max_file_rows: int = DEFAULT_MAX_FILE_ROWS,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
) -> ExportSummary:
    """Append the raw reports committed since the last export to ``archive`` (created if missing).

    Args:
        store: The store to read (:class:`RawReportSource`), e.g. a read-only SQLite snapshot.
        archive: The archive directory.
        campaign_ids: Campaigns to export (default: every campaign of the store).
        day: The partition day of the rows appended now (``YYYY-MM-DD``; default today, UTC).
        max_file_rows, max_file_bytes: Where files are cut.

    Raises:
        CampaignNotFoundError: A named campaign is not in the store (nothing is written).
        ArchiveError: The archive holds a campaign of that id with other parameters, or another export
            runs (nothing is written).
    """
    pa, _ = _pa()
    the_day = day()
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", the_day):
        raise ArchiveError(f"day={shown(the_day)} is invalid: allowed YYYY-MM-DD")
    records = (
        store.list_campaigns() if campaign_ids is None else [store.get_campaign(cid) for cid in campaign_ids]
    )
    try:
        archive.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ArchiveError(f"archive {archive}: cannot create it ({exc.strerror})") from None
    if not archive.is_dir():
        raise ArchiveError(f"archive {archive}: not a directory")
    schema = pa.schema([("position", pa.int64()), ("payload", pa.large_binary())])
    summary = ExportSummary()
    with _export_lock(archive):
        # Every campaign's parameters are checked before the first file is written.
        cursors = {r.campaign_id: _archived_position(archive, r) for r in records}
        for record in records:
            cid = record.campaign_id
            base = campaign_dir(archive, cid)
            if base.is_dir():
                _remove_stale_temporaries(base)
            stats = {"files": 0, "rows": 0, "last_position": cursors[cid]}
            writer: _PartWriter | None = None
            try:
                for position, payload in store.iter_raw_batches(cid, cursors[cid]):
                    if writer is None:
                        directory = base / f"day={the_day}"
                        directory.mkdir(parents=True, exist_ok=True)
                        writer = _PartWriter(directory, record, the_day, schema)
                    writer.add(position, payload)
                    stats["rows"] += 1
                    if len(writer.positions) >= max_file_rows or writer.bytes >= max_file_bytes:
                        summary.files.append(writer.finish())
                        stats["files"] += 1
                        stats["last_position"] = position
                        writer = None
                if writer is not None:
                    summary.files.append(writer.finish())
                    stats["files"] += 1
                    stats["last_position"] = writer.positions[-1]
                    writer = None
            finally:
                if writer is not None:
                    writer.abort()
            summary.campaigns[cid] = stats
    return summary


# -------------------------------------------------------------------------------------------- verify


@dataclass(frozen=True, slots=True)
class VerifyProblem:
    """One bad file (or campaign directory) and what is wrong with it (``message`` without the path)."""

    path: Path
    message: str

    @classmethod
    def of(cls, path: Path, message: str) -> VerifyProblem:
        """A problem whose message may start with the path (as ArchiveError's do): the path is cut off."""
        return cls(path, message.removeprefix(f"{path}: "))


@dataclass(slots=True)
class VerifyReport:
    """What :func:`verify_archive` checked and found."""

    files: int = 0
    rows: int = 0
    campaigns: dict[str, int] = field(default_factory=dict)
    problems: list[VerifyProblem] = field(default_factory=list)


def verify_archive(archive: Path, *, store: RawReportSource | None = None) -> VerifyReport:
    """Check every file of the archive (module docstring); with ``store``, parameters against the store's.

    Never raises for a bad file: each is a :class:`VerifyProblem` naming it. Raises ArchiveError only when
    ``archive`` is not a directory.
    """
    if not archive.is_dir():
        raise ArchiveError(f"archive {archive}: no such directory")
    report = VerifyReport()
    for base in sorted(p for p in archive.iterdir() if p.is_dir()):
        if not base.name.startswith(_CAMPAIGN_PREFIX):
            report.problems.append(VerifyProblem.of(base, "not a campaign directory (campaign=<id>)"))
            continue
        _verify_campaign_dir(archive, base, store, report)
    return report


def _verify_campaign_dir(
    archive: Path, base: Path, store: RawReportSource | None, report: VerifyReport
) -> None:
    paths = sorted(base.glob("*/*"))
    first_blob: tuple[Path, bytes] | None = None
    spans: list[tuple[int, int, Path]] = []
    for path in paths:
        if path.name.endswith(_TMP_SUFFIX):
            continue  # an interrupted export's temporary file: not part of the archive
        if _DAY_RE.match(path.parent.name) is None or _PART_RE.match(path.name) is None:
            report.problems.append(
                VerifyProblem.of(path, "not an archive file (day=YYYY-MM-DD/part-F-L.parquet)")
            )
            continue
        report.files += 1
        try:
            content = read_file(path, check=False)
        except ArchiveError as exc:
            report.problems.append(VerifyProblem.of(path, str(exc)))
            continue
        problem = _check_content(path, content)
        if problem is not None:
            report.problems.append(VerifyProblem.of(path, problem))
            continue
        cid = content.meta["ldp.campaign_id"]
        if campaign_dir(archive, cid) != base:
            report.problems.append(VerifyProblem.of(path, f"campaign {shown(cid)} is not this directory's"))
            continue
        try:
            campaign_info(content.campaign_blob, str(path))
        except ArchiveError as exc:
            report.problems.append(VerifyProblem.of(path, str(exc)))
            continue
        if first_blob is None:
            first_blob = (path, content.campaign_blob)
            if store is not None:
                problem = _store_mismatch(store, path, cid, content.campaign_blob)
                if problem is not None:
                    report.problems.append(VerifyProblem.of(path, problem))
                    continue
        elif content.campaign_blob != first_blob[1]:
            report.problems.append(
                VerifyProblem(path, f"campaign parameters differ from those of {first_blob[0]}: foreign file")
            )
            continue
        if content.positions:
            spans.append((content.positions[0], content.positions[-1], path))
        report.rows += len(content.positions)
        report.campaigns[cid] = report.campaigns.get(cid, 0) + len(content.positions)
    spans.sort()
    for (_, last, path_a), (first, _, path_b) in itertools.pairwise(spans):
        if first <= last:
            report.problems.append(VerifyProblem.of(path_b, f"positions overlap those of {path_a}"))


def _store_mismatch(store: RawReportSource, path: Path, campaign_id: str, blob: bytes) -> str | None:
    from ldp_client.errors import CampaignNotFoundError

    try:
        record = store.get_campaign(campaign_id)
    except CampaignNotFoundError:
        return f"campaign {shown(campaign_id)} is not in the store"
    if record.params_blob != blob:
        return f"campaign {shown(campaign_id)}: parameters differ from the store's: foreign file"
    return None
