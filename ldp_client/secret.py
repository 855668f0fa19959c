"""The client's long-lived secret: 32 random bytes that never leave the device.

RAPPOR derives two things from it (``docs/rappor-encoding.md``, v1):

* the client's cohort: ``int.from_bytes(HMAC-SHA256(secret, COHORT_LABEL)[:8], "big") % m``;
* the permanent randomized response of each (campaign, value): an HMAC-SHA256 counter-mode DRBG keyed by
  the secret, so the PRR is memoized without storing any value and survives restarts (as Chrome does with
  HMAC_DRBG; Erlingsson, Pihur, Korolova, "RAPPOR", CCS 2014, §3 "memoization").

The secret file is created once, atomically, with mode 0600 in a 0700 directory. Loading refuses a file
that other users could read or write, or whose length is wrong, rather than silently replacing it: a new
secret would give the user fresh permanent responses, and averaging old and new reports weakens the
longitudinal guarantee eps_inf.

There are deliberately no serialization helpers besides the file: the object refuses pickling and copying
and its ``repr`` never shows the bytes.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import stat
import time
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from ldp_client.errors import InvalidParameterError, StateFileError

if TYPE_CHECKING:
    from hashlib import _Hash

__all__ = [
    "COHORT_LABEL",
    "SECRET_BYTES",
    "STATE_DIR_ENV",
    "ClientSecret",
    "default_secret_path",
]

SECRET_BYTES = 32
STATE_DIR_ENV = "LDP_CLIENT_STATE_DIR"
# Fixed HMAC message for the cohort (spec v1). Changing it re-assigns every client's cohort: new version.
COHORT_LABEL = b"ldp-client/rappor/cohort/v1"
_MAX_COHORTS = 1 << 16
_SHA256_BLOCK = 64
# A concurrent creator on a filesystem without hard links (see _create) may briefly expose a short file;
# a short read is retried for this long before it is reported as corrupt.
_SHORT_READ_RETRY_SECONDS = 0.5
_SHORT_READ_RETRY_STEP = 0.02


def default_secret_path() -> Path:
    """``$LDP_CLIENT_STATE_DIR/secret`` if the variable is set and non-empty, else
    ``~/.local/state/ldp-client/secret``."""
    state_dir = os.environ.get(STATE_DIR_ENV)
    if state_dir:
        return Path(state_dir) / "secret"
    return Path.home() / ".local" / "state" / "ldp-client" / "secret"


class ClientSecret:
    """32 bytes from the OS CSPRNG (``os.urandom``), used only as an HMAC-SHA256 key.

    Use :meth:`load_or_create` in applications and :meth:`from_bytes` in tests and golden vectors. The key
    is exposed only through :meth:`prf` (HMAC-SHA256 of a message) and :meth:`cohort`.
    """

    __slots__ = ("_inner", "_key", "_outer")

    _key: bytes
    _inner: _Hash
    _outer: _Hash

    def __init__(self) -> None:
        self._set_key(os.urandom(SECRET_BYTES))

    def _set_key(self, key: bytes) -> None:
        self._key = key
        # HMAC (RFC 2104) with the padded-key hash states computed once: H((K^opad) || H((K^ipad) || m)).
        # Copying two precomputed SHA-256 states is about twice as fast as hmac.digest per call, and the
        # PRR derivation calls this once per new value. Tests check it equals hmac.digest.
        padded = key.ljust(_SHA256_BLOCK, b"\x00")
        self._inner = hashlib.sha256(bytes(b ^ 0x36 for b in padded))
        self._outer = hashlib.sha256(bytes(b ^ 0x5C for b in padded))

    @classmethod
    def generate(cls) -> ClientSecret:
        """A fresh secret from the OS CSPRNG (not persisted; see :meth:`load_or_create`)."""
        return cls()

    @classmethod
    def from_bytes(cls, key: bytes) -> ClientSecret:
        """A secret with the given 32 bytes (for tests and golden vectors; raises InvalidParameterError)."""
        if not isinstance(key, bytes | bytearray | memoryview):
            raise InvalidParameterError("secret", type(key).__name__, f"{SECRET_BYTES} bytes")
        raw = bytes(key)
        if len(raw) != SECRET_BYTES:
            raise InvalidParameterError("secret", f"<{len(raw)} bytes>", f"exactly {SECRET_BYTES} bytes")
        obj = cls.__new__(cls)
        obj._set_key(raw)
        return obj

    @classmethod
    def load_or_create(cls, path: str | os.PathLike[str] | None = None) -> ClientSecret:
        """Load the secret file, creating it on first use.

        Args:
            path: The file; default :func:`default_secret_path`.

        Creation is atomic and race-free: the bytes are written and fsynced to a private temporary file
        (``O_CREAT | O_EXCL``, mode 0600) which is then hard-linked to ``path``; ``link`` never replaces
        an existing file, so when two processes race exactly one wins and the other loads the winner's
        secret. A reader therefore never sees a partial file. Where hard links are unsupported the file
        is created directly with ``O_CREAT | O_EXCL`` and short reads are retried briefly.

        Raises:
            StateFileError: the file (or its directory) cannot be read or created, is not a regular file,
                grants any permission to group or others, or does not hold exactly 32 bytes.
        """
        p = Path(path) if path is not None else default_secret_path()
        try:
            return cls._read(p, retry_short=True)
        except FileNotFoundError:
            pass
        _make_private_dir(p.parent)
        key = os.urandom(SECRET_BYTES)
        if _create(p, key):
            obj = cls.__new__(cls)
            obj._set_key(key)
            return obj
        # Another process created the file first: use its secret.
        try:
            return cls._read(p, retry_short=True)
        except FileNotFoundError as exc:
            raise StateFileError(
                f"secret file {str(p)!r} vanished while it was being created: allowed a stable file"
            ) from exc

    @classmethod
    def _read(cls, p: Path, *, retry_short: bool) -> ClientSecret:
        deadline = time.monotonic() + (_SHORT_READ_RETRY_SECONDS if retry_short else 0.0)
        while True:
            raw = _read_secret_file(p)
            if len(raw) >= SECRET_BYTES or time.monotonic() >= deadline:
                break
            time.sleep(_SHORT_READ_RETRY_STEP)
        if len(raw) != SECRET_BYTES:
            length = str(len(raw)) if len(raw) < SECRET_BYTES else f"more than {SECRET_BYTES}"
            raise StateFileError(
                f"secret file {str(p)!r} has length {length} bytes: allowed exactly {SECRET_BYTES} "
                "(refusing to replace it; move it away to start with a new secret)"
            )
        obj = cls.__new__(cls)
        obj._set_key(raw)
        return obj

    def prf(self, message: bytes) -> bytes:
        """HMAC-SHA256(secret, message): the only way the key is used."""
        inner = self._inner.copy()
        inner.update(message)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.digest()

    def cohort(self, m: int) -> int:
        """The client's cohort in [0, m): first 8 bytes of HMAC-SHA256(secret, COHORT_LABEL), big-endian,
        mod m. The modulo bias is below m / 2**64 <= 2**-48, negligible.

        The cohort does not depend on the campaign, so one client stays in one cohort (for a given m), as
        in RAPPOR (CCS 2014, §3.1: cohorts fixed per client).
        """
        if isinstance(m, bool) or not isinstance(m, int) or not 1 <= m <= _MAX_COHORTS:
            raise InvalidParameterError("m", m, f"an integer in [1, {_MAX_COHORTS}]")
        return int.from_bytes(self.prf(COHORT_LABEL)[:8], "big") % m

    def __repr__(self) -> str:
        return "ClientSecret(<redacted>)"

    def __reduce__(self) -> NoReturn:
        raise TypeError("ClientSecret cannot be pickled or copied: the secret never leaves the device")

    def __copy__(self) -> NoReturn:
        raise TypeError("ClientSecret cannot be copied")

    def __deepcopy__(self, memo: object) -> NoReturn:
        raise TypeError("ClientSecret cannot be copied")


def _read_secret_file(p: Path) -> bytes:
    """Read the file after checking it is a regular file with no group/other permissions."""
    flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(p, flags)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise StateFileError(
                f"secret file {str(p)!r} is a symbolic link: allowed a regular file"
            ) from exc
        raise StateFileError(
            f"secret file {str(p)!r} is unreadable ({exc}): allowed a readable file"
        ) from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise StateFileError(f"secret file {str(p)!r} is not a regular file: allowed a regular file")
        perms = stat.S_IMODE(st.st_mode)
        if os.name == "posix" and perms & 0o077:
            raise StateFileError(
                f"secret file {str(p)!r} has mode {perms:#o}: allowed no group/other permissions "
                "(mode 0o600; run chmod 600 on it)"
            )
        chunks: list[bytes] = []
        # Read one byte past the expected length so an over-long file is detected.
        remaining = SECRET_BYTES + 1
        while remaining > 0:
            chunk = os.read(fd, remaining)
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
        return b"".join(chunks)
    except OSError as exc:
        raise StateFileError(
            f"secret file {str(p)!r} is unreadable ({exc}): allowed a readable file"
        ) from exc
    finally:
        os.close(fd)


def _make_private_dir(d: Path) -> None:
    try:
        existed = d.is_dir()
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not existed:
            # mkdir's mode is filtered by the umask; make the intent explicit.
            os.chmod(d, 0o700)
    except OSError as exc:
        raise StateFileError(
            f"state directory {str(d)!r} cannot be created ({exc}): allowed a writable directory"
        ) from exc


def _fsync_dir(d: Path) -> None:
    # Durability of the new directory entry; not supported everywhere (e.g. Windows), hence best effort.
    with contextlib.suppress(OSError, AttributeError):
        dfd = os.open(d, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def _write_new(p: Path, key: bytes) -> None:
    """Create ``p`` exclusively with mode 0600, write ``key`` and fsync (FileExistsError if it exists)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(p, flags, 0o600)
    try:
        view = memoryview(key)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)


def _create(p: Path, key: bytes) -> bool:
    """Atomically create the secret file; False if another process created it first."""
    tmp = p.with_name(f".{p.name}.{os.getpid()}.{os.urandom(8).hex()}.tmp")
    try:
        try:
            _write_new(tmp, key)
        except OSError as exc:
            raise StateFileError(
                f"secret file {str(p)!r} cannot be created ({exc}): allowed a writable directory"
            ) from exc
        try:
            os.link(tmp, p)
        except FileExistsError:
            return False
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV, errno.EMLINK):
                raise StateFileError(
                    f"secret file {str(p)!r} cannot be created ({exc}): allowed a writable directory"
                ) from exc
            # No hard links here: create the final file directly. A concurrent reader may see it short
            # for a moment, which _read retries.
            try:
                _write_new(p, key)
            except FileExistsError:
                return False
            except OSError as exc2:
                raise StateFileError(
                    f"secret file {str(p)!r} cannot be created ({exc2}): allowed a writable directory"
                ) from exc2
        _fsync_dir(p.parent)
        return True
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
