"""Tests of the client secret: creation, permissions, reuse, races, redaction, PRF and cohort."""

from __future__ import annotations

import copy
import errno
import hmac
import multiprocessing
import os
import pickle
import stat
from pathlib import Path

import pytest

from ldp_client import secret as secret_mod
from ldp_client.errors import InvalidParameterError, StateFileError
from ldp_client.secret import COHORT_LABEL, SECRET_BYTES, ClientSecret, default_secret_path

GOLDEN_KEY = bytes(range(32))


def _fingerprint(s: ClientSecret) -> bytes:
    return s.prf(b"fingerprint")


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


# ------------------------------------------------------------------------------------------ in memory


def test_prf_is_hmac_sha256() -> None:
    for key in (GOLDEN_KEY, bytes(32), b"\xff" * 32, os.urandom(32)):
        s = ClientSecret.from_bytes(key)
        for msg in (b"", b"a", b"x" * 55, b"y" * 64, b"z" * 200, os.urandom(1000)):
            assert s.prf(msg) == hmac.digest(key, msg, "sha256")


def test_generate_gives_distinct_secrets() -> None:
    assert _fingerprint(ClientSecret.generate()) != _fingerprint(ClientSecret())


def test_cohort_golden_values() -> None:
    s = ClientSecret.from_bytes(GOLDEN_KEY)
    assert hmac.digest(GOLDEN_KEY, COHORT_LABEL, "sha256")[:8].hex() == "21bcc190ae5095f9"
    assert [s.cohort(m) for m in (1, 2, 64, 128, 1000, 65536)] == [0, 1, 57, 121, 465, 38393]


@pytest.mark.parametrize("m", [0, -1, 65537, True, 2.0, "64"])
def test_cohort_rejects_bad_m(m: object) -> None:
    with pytest.raises(InvalidParameterError, match="m="):
        ClientSecret.from_bytes(GOLDEN_KEY).cohort(m)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [b"", bytes(31), bytes(33), "x" * 32, 12, None])
def test_from_bytes_requires_exactly_32_bytes(bad: object) -> None:
    with pytest.raises(InvalidParameterError, match="secret="):
        ClientSecret.from_bytes(bad)  # type: ignore[arg-type]


def test_repr_never_shows_the_bytes() -> None:
    key = bytes(range(100, 132))
    s = ClientSecret.from_bytes(key)
    text = repr(s) + str(s)
    assert "redacted" in text
    for rendering in (key.hex(), repr(key), str(list(key)), key.hex().upper()):
        assert rendering not in text


def test_secret_cannot_be_pickled_or_copied() -> None:
    s = ClientSecret.from_bytes(GOLDEN_KEY)
    with pytest.raises(TypeError):
        pickle.dumps(s)
    with pytest.raises(TypeError):
        copy.copy(s)
    with pytest.raises(TypeError):
        copy.deepcopy(s)
    assert not hasattr(s, "__dict__")


# -------------------------------------------------------------------------------------------- on disk


def test_created_0600_in_0700_dir_and_reused(tmp_path: Path) -> None:
    path = tmp_path / "state" / "nested" / "secret"
    first = ClientSecret.load_or_create(path)
    assert path.stat().st_size == SECRET_BYTES
    assert _mode(path) == 0o600
    assert _mode(path.parent) == 0o700
    again = ClientSecret.load_or_create(str(path))
    assert _fingerprint(again) == _fingerprint(first)
    assert ClientSecret.from_bytes(path.read_bytes()).prf(b"fingerprint") == _fingerprint(first)
    # No temporary files are left behind.
    assert sorted(p.name for p in path.parent.iterdir()) == ["secret"]


def test_default_path_uses_state_dir_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LDP_CLIENT_STATE_DIR", str(tmp_path / "ldp"))
    assert default_secret_path() == tmp_path / "ldp" / "secret"
    s = ClientSecret.load_or_create()
    assert _fingerprint(ClientSecret.load_or_create(tmp_path / "ldp" / "secret")) == _fingerprint(s)


def test_default_path_under_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LDP_CLIENT_STATE_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_secret_path() == tmp_path / ".local" / "state" / "ldp-client" / "secret"
    ClientSecret.load_or_create()
    assert (tmp_path / ".local" / "state" / "ldp-client" / "secret").stat().st_size == SECRET_BYTES


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660, 0o602])
def test_refuses_group_or_other_permissions(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "secret"
    ClientSecret.load_or_create(path)
    before = path.read_bytes()
    os.chmod(path, mode)
    with pytest.raises(StateFileError, match=r"mode .*allowed no group/other permissions"):
        ClientSecret.load_or_create(path)
    assert path.read_bytes() == before  # never replaced


@pytest.mark.parametrize("length", [0, 16, 31, 33, 64])
def test_refuses_wrong_length(tmp_path: Path, length: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(secret_mod, "_SHORT_READ_RETRY_SECONDS", 0.05)
    path = tmp_path / "secret"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, b"\x01" * length)
    os.close(fd)
    shown = str(length) if length < SECRET_BYTES else f"more than {SECRET_BYTES}"
    with pytest.raises(StateFileError, match=f"length {shown} bytes"):
        ClientSecret.load_or_create(path)
    assert path.read_bytes() == b"\x01" * length


def test_refuses_directory_and_symlink(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    with pytest.raises(StateFileError, match="secret file"):
        ClientSecret.load_or_create(tmp_path / "dir")
    real = tmp_path / "real"
    ClientSecret.load_or_create(real)
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(StateFileError, match="symbolic link"):
        ClientSecret.load_or_create(tmp_path / "link")


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root can read mode-000 files")
def test_refuses_unreadable(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    ClientSecret.load_or_create(path)
    os.chmod(path, 0o000)
    try:
        with pytest.raises(StateFileError, match="unreadable"):
            ClientSecret.load_or_create(path)
    finally:
        os.chmod(path, 0o600)


def test_unreadable_via_os_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Same as above but works as root: opening fails with EACCES."""
    path = tmp_path / "secret"
    ClientSecret.load_or_create(path)
    real_open = os.open

    def deny(p: object, flags: int, *args: int) -> int:
        if Path(str(p)) == path:
            raise PermissionError(errno.EACCES, "Permission denied", str(p))
        return real_open(p, flags, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", deny)
    with pytest.raises(StateFileError, match="unreadable"):
        ClientSecret.load_or_create(path)


def test_uncreatable_directory(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_bytes(b"")
    with pytest.raises(StateFileError, match=r"secret file .*(unreadable|cannot be created)"):
        ClientSecret.load_or_create(blocker / "sub" / "secret")
    with pytest.raises(StateFileError, match=r"state directory .*cannot be created"):
        secret_mod._make_private_dir(blocker / "sub")


def test_lost_race_uses_the_winners_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another process links its file first: link raises FileExistsError and we load the winner's."""
    path = tmp_path / "secret"
    winner = bytes(range(50, 82))
    real_link = os.link

    def link_after_winner(src: object, dst: object) -> None:
        fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # type: ignore[arg-type]
        os.write(fd, winner)
        os.close(fd)
        real_link(src, dst)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "link", link_after_winner)
    s = ClientSecret.load_or_create(path)
    assert _fingerprint(s) == _fingerprint(ClientSecret.from_bytes(winner))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["secret"]


def test_fallback_without_hard_links(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_link(src: object, dst: object) -> None:
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_link)
    path = tmp_path / "secret"
    s = ClientSecret.load_or_create(path)
    assert _mode(path) == 0o600
    assert path.stat().st_size == SECRET_BYTES
    assert _fingerprint(ClientSecret.load_or_create(path)) == _fingerprint(s)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["secret"]


def _race_worker(path: str, barrier: multiprocessing.synchronize.Barrier, out: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    barrier.wait()
    try:
        out.put(ClientSecret.load_or_create(path).prf(b"fingerprint").hex())
    except Exception as exc:  # reported to the parent, which fails the test
        out.put(f"error: {exc!r}")


@pytest.mark.parametrize("hard_links", [True, False])
def test_concurrent_create_race(tmp_path: Path, hard_links: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Processes released together all end up with the same secret, and one file of 32 bytes."""
    if not hard_links:

        def no_link(src: object, dst: object) -> None:
            raise OSError(errno.EPERM, "Operation not permitted")

        monkeypatch.setattr(os, "link", no_link)  # inherited by the forked children
    ctx = multiprocessing.get_context("fork")
    n = 8
    path = str(tmp_path / "state" / "secret")
    barrier = ctx.Barrier(n)
    out = ctx.Queue()
    procs = [ctx.Process(target=_race_worker, args=(path, barrier, out)) for _ in range(n)]
    for p in procs:
        p.start()
    results = [out.get(timeout=60) for _ in range(n)]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert len(set(results)) == 1, results
    assert not results[0].startswith("error")
    assert results[0] == ClientSecret.load_or_create(path).prf(b"fingerprint").hex()
    assert sorted(p.name for p in (tmp_path / "state").iterdir()) == ["secret"]
    assert _mode(Path(path)) == 0o600
