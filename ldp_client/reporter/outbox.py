"""The outbox on disk (package docstring: "Durable outbox"): its file names, the journal's
records, durable writes, and the :class:`Outbox` directory of one campaign (lock, sealed batches,
``rejected/``, the campaign cache).

Only randomized reports are ever written here: journal rows and sealed ``ReportBatch`` messages, never a
true value.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import struct
import sys
import time
import uuid
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from google.protobuf.message import DecodeError

from ldp_client import _journal_rows, wire
from ldp_client._proto.ldp.v1 import campaign_pb2, reports_pb2
from ldp_client.errors import InvalidReportError, StateFileError
from ldp_client.params import MechanismParams

if sys.platform != "win32":
    import fcntl

# The reporter's logger: one name for the whole package, as apps configure it.
logger = logging.getLogger("ldp_client.reporter")

JOURNAL: Final = "journal"
LOCK: Final = "lock"
REJECTED: Final = "rejected"
CAMPAIGN_CACHE: Final = "campaign.pb"
BATCH_SUFFIX: Final = ".batch"
TMP_PREFIX: Final = ".tmp-"
RECORD_HEADER: Final = struct.Struct("<II")  # payload length, crc32(payload)
KIND_SEGMENT: Final = 0x01
KIND_REPORTS: Final = 0x02
REPORTS_PREFIX: Final = bytes([KIND_REPORTS])


@dataclass(slots=True)
class Batch:
    """A sealed batch file waiting in the send queue."""

    path: Path
    batch_id: str
    count: int
    fresh: int  # reports of this run, for flush accounting (0 for recovered batches)
    ambiguous: bool  # may already be committed: recovered, or an attempt ended without a definite answer
    fingerprint: (
        str | None
    )  # of the parameters its reports were encoded with (None: a file of an old version)
    limited_failures: int = 0


@dataclass(slots=True)
class Segment:
    """The open segment: the batch being journaled (its rows also kept in memory for sealing)."""

    batch_id: str
    chunks: list[bytes]  # journal rows, as written
    count: int
    started: float  # time.monotonic() of its first report
    fd: int


def new_batch_id() -> str:
    # uuid4 from the OS CSPRNG explicitly (uuid.uuid4 also uses os.urandom; this makes it visible).
    return uuid.UUID(bytes=os.urandom(16), version=4).hex


def params_fingerprint(params: MechanismParams) -> str:
    """16 hex digits identifying ``params`` (the oneof member and its deterministic serialization)."""
    field, message = wire.params_to_proto(params)
    data = field.encode("ascii") + b"\x00" + message.SerializeToString(deterministic=True)
    return hashlib.sha256(data).hexdigest()[:16]


def batch_name(batch_id: str, fingerprint: str) -> str:
    return f"{time.time_ns():020d}-{batch_id}.{fingerprint}{BATCH_SUFFIX}"


def parse_batch_name(name: str) -> tuple[str, str | None]:
    """(batch id, parameters fingerprint or None) of a sealed batch's file name (package docstring)."""
    stem = name[21 : -len(BATCH_SUFFIX)]
    batch_id, dot, fingerprint = stem.partition(".")
    return batch_id, (fingerprint if dot else None)


def fsync_dir(d: Path) -> None:
    # Durability of a rename or new entry; unsupported on some platforms (Windows), hence best effort.
    with contextlib.suppress(OSError, AttributeError):
        fd = os.open(d, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def write_durable(directory: Path, name: str, data: bytes) -> Path:
    """Write ``directory/name`` atomically and durably: temp file, fsync, rename, fsync the directory."""
    final = directory / name
    tmp = directory / f"{TMP_PREFIX}{name}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o600)
    try:
        write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, final)
    fsync_dir(directory)
    return final


def record(payload: bytes) -> bytes:
    return RECORD_HEADER.pack(len(payload), zlib.crc32(payload)) + payload


def read_records(data: bytes) -> tuple[list[bytes], int]:
    """Complete, checksummed records of a journal, and the number of trailing bytes ignored (torn tail)."""
    records: list[bytes] = []
    pos = 0
    size = len(data)
    while pos + RECORD_HEADER.size <= size:
        length, crc = RECORD_HEADER.unpack_from(data, pos)
        start = pos + RECORD_HEADER.size
        end = start + length
        if length == 0 or end > size:
            break
        payload = data[start:end]
        if zlib.crc32(payload) != crc:
            break
        records.append(payload)
        pos = end
    return records, size - pos


def segment_header(campaign_id: str, batch_id: str, params: MechanismParams) -> bytes:
    bid = batch_id.encode("ascii")
    campaign = wire.campaign_to_proto(campaign_id=campaign_id, params=params).SerializeToString()
    return bytes([KIND_SEGMENT, len(bid)]) + bid + campaign


def parse_segment_header(payload: bytes) -> tuple[str, wire.CampaignInfo]:
    """(batch id, campaign) of a journal's first record; InvalidReportError/InvalidParameterError if bad."""
    if len(payload) < 2 or payload[0] != KIND_SEGMENT or len(payload) < 2 + payload[1]:
        raise InvalidReportError("journal header", payload[:2].hex(), "a segment header record")
    n = payload[1]
    try:
        batch_id = payload[2 : 2 + n].decode("ascii")
        msg = campaign_pb2.Campaign.FromString(payload[2 + n :])
    except (UnicodeDecodeError, DecodeError) as exc:
        raise InvalidReportError("journal header", f"<{len(payload)} bytes>", "a segment header") from exc
    if not 1 <= len(batch_id) <= wire.MAX_ID_LENGTH:
        raise InvalidReportError("journal batch id", batch_id, f"1 to {wire.MAX_ID_LENGTH} characters")
    return batch_id, wire.campaign_from_proto(msg)


class Outbox:
    """One campaign's outbox directory, ``<state_dir>/outbox/<sha256(campaign_id)[:32]>/``: its lock, sealed
    batch files, ``rejected/`` and the campaign cache (the journal itself is written by the reporter)."""

    def __init__(self, state_dir: Path, campaign_id: str) -> None:
        self.campaign_id = campaign_id
        self.state_dir = state_dir
        self.digest = hashlib.sha256(campaign_id.encode("utf-8")).hexdigest()[:32]
        self.directory = state_dir / "outbox" / self.digest
        self.rejected_dir = self.directory / REJECTED

    def lock(self) -> int | None:
        """Create the directories (mode 0700) and take the exclusive lock; its descriptor (None: no flock)."""
        try:
            for d in (self.state_dir, self.state_dir / "outbox", self.directory, self.rejected_dir):
                d.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise StateFileError(
                f"outbox directory {str(self.directory)!r} cannot be created ({exc}): allowed a writable "
                "directory"
            ) from exc
        if sys.platform == "win32":  # pragma: no cover - no flock; one reporter per outbox is up to the app
            return None
        path = self.directory / LOCK
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
        except OSError as exc:
            raise StateFileError(f"outbox lock {str(path)!r} cannot be opened ({exc})") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            raise StateFileError(
                f"outbox {str(self.directory)!r} is in use by another Reporter for campaign_id="
                f"{self.campaign_id!r}: allowed one reporter per campaign and state_dir"
            ) from exc
        return fd

    def reject_file(self, path: Path, reason: str, *, name: str | None = None) -> None:
        """Move a batch (or journal) file to rejected/ with a note; never retried again."""
        name = name or path.name
        try:
            os.replace(path, self.rejected_dir / name)
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)
            note = os.open(self.rejected_dir / (name + ".error"), flags, 0o600)
            try:
                write_all(note, (reason + "\n").encode("utf-8"))
            finally:
                os.close(note)
            fsync_dir(self.directory)
            fsync_dir(self.rejected_dir)
        except OSError:
            logger.exception("ldp reporter %r: cannot move %s to rejected/", self.campaign_id, path.name)
        logger.error("ldp reporter %r: %s rejected: %s", self.campaign_id, name, reason)

    def seal_rows(
        self, batch_id: str, params: MechanismParams, rows: bytes, *, fresh: bool, fingerprint: str
    ) -> Batch:
        """Write journal rows as a sealed batch file (durably); ``fresh``: reports of this run."""
        msg = _journal_rows.batch_from_rows(
            campaign_id=self.campaign_id, batch_id=batch_id, params=params, rows=rows
        )
        return self.write_batch(
            msg, fresh=msg.count if fresh else 0, ambiguous=not fresh, fingerprint=fingerprint
        )

    def write_batch(
        self, msg: reports_pb2.ReportBatch, *, fresh: int, ambiguous: bool, fingerprint: str
    ) -> Batch:
        """Write ``msg`` as a sealed batch file (temp file, fsync, rename, fsync the directory)."""
        path = write_durable(self.directory, batch_name(msg.batch_id, fingerprint), msg.SerializeToString())
        return Batch(
            path=path,
            batch_id=msg.batch_id,
            count=msg.count,
            fresh=fresh,
            ambiguous=ambiguous,
            fingerprint=fingerprint,
        )

    def write_cache(self, msg: campaign_pb2.Campaign) -> None:
        """Keep the server's campaign for the next start (an optimisation: failures are only logged)."""
        data = msg.SerializeToString()
        path = self.directory / CAMPAIGN_CACHE
        try:
            if path.exists() and path.read_bytes() == data:
                return
            write_durable(self.directory, CAMPAIGN_CACHE, data)
        except OSError as exc:
            logger.warning("ldp reporter %r: cannot cache the campaign (%s)", self.campaign_id, exc)
