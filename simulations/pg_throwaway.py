"""A throwaway PostgreSQL cluster: initdb in a temporary directory, a free loopback port, a unix socket in
the same directory, password logins over TCP; stopped and removed afterwards.

``make demo-cluster`` (:mod:`simulations.demo_cluster`), the PostgreSQL tests (through
``tests/ldp_aggregator/pg_cluster.py``) and the PostgreSQL benchmarks run on one of these, never on a
server of the machine's own.

``initdb`` refuses to run as root: as root, every server command runs as the unprivileged ``postgres`` user
(``runuser -u postgres --``), which owns the directory. The binaries are looked up in ``$PG_BINDIR``, then
``/usr/lib/postgresql/<newest>/bin``, then ``PATH``; :func:`missing_reason` says in one line why none can
be started (Debian's ``postgresql`` package installs them; the service need not run).

The server commands run in a session of their own, so a Ctrl-C in the terminal reaches only the program
that started the cluster, which then stops it in order (:meth:`PgCluster.destroy`).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Final
from urllib.parse import quote

__all__ = ["INSTALL_HINT", "PgCluster", "bindir", "missing_reason"]

#: How a newcomer gets the binaries (Debian, Ubuntu).
INSTALL_HINT: Final = "install Debian's `postgresql` package (sudo apt-get install postgresql)"
_UNPRIVILEGED: Final = "postgres"
#: Ports tried by a cluster's first start (see :meth:`PgCluster.start`).
_PORT_TRIES: Final = 3


def bindir() -> Path | None:
    """The directory holding initdb, pg_ctl and postgres, or None."""
    env = os.environ.get("PG_BINDIR")
    candidates = [Path(env)] if env else []
    base = Path("/usr/lib/postgresql")
    if base.is_dir():
        versions = sorted(
            (p for p in base.iterdir() if p.name.isdigit()), key=lambda p: int(p.name), reverse=True
        )
        candidates += [p / "bin" for p in versions]
    which = shutil.which("initdb")
    if which:
        candidates.append(Path(which).parent)
    for path in candidates:
        if (path / "initdb").is_file() and (path / "pg_ctl").is_file():
            return path
    return None


def missing_reason() -> str | None:
    """Why a throwaway cluster cannot be started here (None when it can)."""
    if bindir() is None:
        return (
            "no PostgreSQL binaries (initdb, pg_ctl) in $PG_BINDIR, /usr/lib/postgresql/*/bin or PATH:"
            f" {INSTALL_HINT}"
        )
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(_UNPRIVILEGED)
        except KeyError:
            who = _UNPRIVILEGED
            return f"running as root and no {who!r} user to run initdb as ({INSTALL_HINT} creates it)"
        if shutil.which("runuser") is None:
            return "running as root and no runuser to run initdb as the postgres user"
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PgCluster:
    """One PostgreSQL server of our own (``start``/``stop``/``restart``/``destroy``), superuser ``postgres``.

    The constructor runs initdb (raising RuntimeError with the tool's message if it fails, after removing
    the directory); :meth:`running` starts it and always destroys it.

    Args:
        fsync: Keep PostgreSQL's fsync on (durable commits, as in production).
        settings: More ``-c name=value`` server settings.
    """

    def __init__(self, *, fsync: bool = True, settings: dict[str, str] | None = None) -> None:
        bin_path = bindir()
        if bin_path is None:
            raise RuntimeError(missing_reason() or "no PostgreSQL binaries")
        self.bin = bin_path
        self.password = secrets.token_hex(12)
        self.port = _free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="ldp-pg-"))
        self.data = self.dir / "data"
        self.log = self.dir / "server.log"
        self._as_root = os.geteuid() == 0
        self._started = False
        self.settings = {
            "listen_addresses": "127.0.0.1",
            "port": str(self.port),
            "unix_socket_directories": str(self.dir),
            "max_connections": "200",
            "fsync": "on" if fsync else "off",
            **(settings or {}),
        }
        try:
            self._initdb()
        except BaseException:
            shutil.rmtree(self.dir, ignore_errors=True)
            raise

    def _initdb(self) -> None:
        if self._as_root:
            user = pwd.getpwnam(_UNPRIVILEGED)
            os.chown(self.dir, user.pw_uid, user.pw_gid)
        pwfile = self.dir / "pwfile"
        pwfile.write_text(self.password + "\n")
        if self._as_root:
            os.chown(pwfile, pwd.getpwnam(_UNPRIVILEGED).pw_uid, -1)
        self._run(
            "initdb",
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "--auth-local=trust",
            "--auth-host=scram-sha-256",
            f"--pwfile={pwfile}",
            "-E",
            "UTF8",
            "--no-sync",
        )
        pwfile.unlink()

    def _cmd(self, tool: str, *args: str) -> list[str]:
        cmd = [str(self.bin / tool), *args]
        return ["runuser", "-u", _UNPRIVILEGED, "--", *cmd] if self._as_root else cmd

    def _run(self, tool: str, *args: str) -> None:
        proc = subprocess.run(
            self._cmd(tool, *args),
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
            start_new_session=True,  # the server too: a Ctrl-C meant for our caller does not reach it
        )
        if proc.returncode != 0:
            output = proc.stderr.strip() or proc.stdout.strip()
            raise RuntimeError(f"{tool} failed ({proc.returncode}): {output}")

    @property
    def url(self) -> str:
        """The superuser's URL over TCP (password login) to the ``postgres`` database."""
        return f"postgresql://postgres:{quote(self.password)}@127.0.0.1:{self.port}/postgres"

    def start(self) -> None:
        """Start the server. Its port was free when the cluster was made, but another program (a parallel
        test worker's server, say) may have bound it during initdb: then, on the first start only (later ones
        keep the port their clients know), once more on a new free port."""
        for attempt in range(_PORT_TRIES):
            log_size = self.log.stat().st_size if self.log.exists() else 0
            try:
                self._pg_ctl_start()
                self._started = True
                return
            except RuntimeError:
                if self._started or attempt == _PORT_TRIES - 1 or not self._port_was_taken(log_size):
                    raise
                self.port = _free_port()
                self.settings["port"] = str(self.port)

    def _pg_ctl_start(self) -> None:
        options = " ".join(f"-c {k}={v}" for k, v in self.settings.items())
        data, log = str(self.data), str(self.log)
        self._run("pg_ctl", "-D", data, "-l", log, "-o", options, "-w", "-t", "60", "start")

    def _port_was_taken(self, log_from: int) -> bool:
        """The server's log since ``log_from`` says its TCP port was in use."""
        try:
            with self.log.open("rb") as f:
                f.seek(log_from)
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return False
        return "could not bind" in text and "Address already in use" in text

    def stop(self, mode: str = "fast") -> None:
        """``pg_ctl stop -m MODE``: ``fast`` (clean) or ``immediate`` (as a crash: recovery at next start)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")

    def restart(self, mode: str = "fast") -> None:
        self.stop(mode)
        self.start()

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.data / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def destroy(self) -> None:
        """Stop the server (immediately) and remove its directory."""
        pid = self.postmaster_pid()
        if pid is not None:
            with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                self.stop("immediate")
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 0)
                time.sleep(0.5)
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.dir, ignore_errors=True)

    @classmethod
    @contextlib.contextmanager
    def running(cls, **kwargs: object) -> Iterator[PgCluster]:
        cluster = cls(**kwargs)  # type: ignore[arg-type]
        try:
            cluster.start()
            yield cluster
        finally:
            cluster.destroy()
