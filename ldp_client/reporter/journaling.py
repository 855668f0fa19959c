"""The outbox's journal, sealed batches and recovery (package docstring: "Batching" and
"Durable outbox"): encoded reports are appended to the open segment's journal, sealed into a durable
batch file before the journal goes, and an earlier run's files are recovered on start.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Any

from google.protobuf.message import DecodeError

from ldp_client import _journal_rows
from ldp_client._proto.ldp.v1 import reports_pb2
from ldp_client.errors import InvalidParameterError, InvalidReportError
from ldp_client.params import MechanismParams
from ldp_client.reporter.base import ReporterState, logger
from ldp_client.reporter.outbox import (
    BATCH_SUFFIX,
    JOURNAL,
    KIND_REPORTS,
    REPORTS_PREFIX,
    TMP_PREFIX,
    Batch,
    Segment,
    fsync_dir,
    new_batch_id,
    params_fingerprint,
    parse_batch_name,
    parse_segment_header,
    read_records,
    record,
    segment_header,
    write_all,
)


class JournalingReporter(ReporterState):
    """The reporter's outbox layer: journal, seal, recover (its state: :class:`ReporterState`)."""

    def _recover(self) -> None:
        """Queue the sealed batches and the journal an earlier run left, oldest first, with their ids."""
        for tmp in self._dir.glob(TMP_PREFIX + "*"):
            # An interrupted seal: its reports are still in the journal, which is removed only after.
            with contextlib.suppress(OSError):
                tmp.unlink()
        batches: list[Batch] = []
        known_ids = {parse_batch_name(p.name)[0] for p in self._dir.glob("*" + BATCH_SUFFIX)}
        known_ids |= {parse_batch_name(p.name)[0] for p in self._rejected_dir.glob("*" + BATCH_SUFFIX)}
        journal = self._dir / JOURNAL
        if journal.exists():
            recovered = self._recover_journal(journal, known_ids)
            if recovered is not None:
                batches.append(recovered)
        lost = 0
        for path in sorted(self._dir.glob("*" + BATCH_SUFFIX)):
            if any(b.path == path for b in batches):
                continue
            try:
                msg = reports_pb2.ReportBatch.FromString(path.read_bytes())
            except (OSError, DecodeError) as exc:
                self._outbox.reject_file(path, f"unreadable sealed batch ({exc!r})")
                lost += 1  # its size is unknown: at least one report
                continue
            if msg.campaign_id != self.campaign_id or msg.count < 1 or not msg.batch_id:
                self._outbox.reject_file(
                    path, f"sealed batch of campaign_id={msg.campaign_id!r}, count={msg.count}"
                )
                lost += max(1, msg.count)
                continue
            fingerprint = parse_batch_name(path.name)[1]
            batches.append(
                Batch(
                    path=path,
                    batch_id=msg.batch_id,
                    count=msg.count,
                    fresh=0,
                    ambiguous=True,
                    fingerprint=fingerprint,
                )
            )
        batches.sort(key=lambda b: b.path.name)
        self._queue.extend(batches)
        with self._cond:
            n = sum(b.count for b in batches)
            self._c.recovered_batches += len(batches)
            self._c.recovered_reports += n
            self._c.queued_batches += len(batches)
            self._c.queued_reports += n
            self._c.rejected_reports += lost
            self._recovered_pending = len(batches)
            self._recovery_done = True
            self._cond.notify_all()
        self._discard("rejected", lost, "unreadable batch files left by an earlier run (moved to rejected/)")
        if batches:
            logger.info(
                "ldp reporter %r: recovered %d batches (%d reports) from the outbox",
                self.campaign_id,
                len(batches),
                n,
            )

    def _recover_journal(self, journal: Path, known_ids: set[str]) -> Batch | None:
        data = journal.read_bytes()
        records, torn = read_records(data)
        if torn:
            logger.warning(
                "ldp reporter %r: ignored a torn or corrupt journal tail of %d bytes", self.campaign_id, torn
            )
        if not records:
            journal.unlink()
            return None
        try:
            batch_id, info = parse_segment_header(records[0])
            if info.campaign_id != self.campaign_id:
                raise InvalidReportError("journal campaign_id", info.campaign_id, repr(self.campaign_id))
            for r in records[1:]:
                if r[:1] != bytes([KIND_REPORTS]):
                    raise InvalidReportError("journal record kind", r[:1].hex(), f"{KIND_REPORTS:#04x}")
            rows = b"".join(r[1:] for r in records[1:])
            if rows:
                # Every row against the server's rules before anything is decided (no numpy).
                _journal_rows.check_rows(info.params, self.campaign_id, rows)
        except (InvalidReportError, InvalidParameterError) as exc:
            self._outbox.reject_file(journal, f"unreadable journal ({exc})", name=f"journal-{time.time_ns()}")
            with self._cond:
                self._c.rejected_reports += max(1, len(records) - 1)
            self._discard("rejected", max(1, len(records) - 1), f"an unreadable journal ({exc})")
            return None
        if batch_id in known_ids or not rows:
            # Sealed before the crash (the journal is removed only after its batch file is durable).
            journal.unlink()
            return None
        batch = self._outbox.seal_rows(
            batch_id, info.params, rows, fresh=False, fingerprint=params_fingerprint(info.params)
        )
        journal.unlink()
        fsync_dir(self._dir)
        return batch

    def _final_drain(self) -> None:
        """On close: journal and seal what is left so that it is durable for the next reporter."""
        with self._cond:
            items = self._encoded
            self._encoded = []
        if items:
            self._append(items)
        if self._segment is not None:
            self._seal()

    def _append(self, items: list[Any]) -> None:
        """Journal encoded reports into the open segment, sealing it each time it is full; their charges
        are made durable in the device ledger first (:meth:`_persist_spend`)."""
        params = self._params
        if params is None:  # pragma: no cover - items exist only once the parameters are known
            return
        self._persist_spend(len(items))
        pack = self._pack
        pos = 0
        while pos < len(items):
            seg = self._segment
            if seg is None:
                seg = self._open_segment(params)
            take = min(len(items) - pos, self._cap - seg.count)
            # One record per group: its checksum covers the group, so a torn write loses only that group,
            # which was being written when the process died.
            rows = b"".join([pack(r) for r in items[pos : pos + take]])
            write_all(seg.fd, record(REPORTS_PREFIX + rows))
            seg.chunks.append(rows)
            seg.count += take
            pos += take
            with self._cond:
                self._c.journaled += take
                self._c.segment_reports += take
            if seg.count >= self._cap:
                self._seal()

    def _open_segment(self, params: MechanismParams) -> Segment:
        batch_id = new_batch_id()
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(self._dir / JOURNAL, flags, 0o600)
        write_all(fd, record(segment_header(self.campaign_id, batch_id, params)))
        self._segment = Segment(batch_id=batch_id, chunks=[], count=0, started=time.monotonic(), fd=fd)
        return self._segment

    def _seal(self) -> None:
        seg = self._segment
        if seg is None or self._params is None:
            return
        batch = self._outbox.seal_rows(
            seg.batch_id, self._params, b"".join(seg.chunks), fresh=True, fingerprint=self._fp
        )
        # Only now that the batch file is durable may the journal go (see the package docstring).
        os.close(seg.fd)
        self._segment = None
        os.unlink(self._dir / JOURNAL)
        self._queue.append(batch)
        with self._cond:
            self._c.sealed_batches += 1
            self._c.segment_reports -= batch.count
            self._c.queued_batches += 1
            self._c.queued_reports += batch.count
