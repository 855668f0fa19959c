"""The operator's documents work as written (issue 13): README.md's operator steps and docs/tls.md.

The README's operator block is parsed from README.md (the fenced block after the ``operator-steps``
marker) and run in order in a fresh directory laid out like a clone (``examples/`` copied, the TLS
recipe of docs/tls.md run first), against real server processes: ``serve`` lines start one (stopping the
previous one with SIGINT, the README's Ctrl-C) and wait for its "ready on port" line; the other
``ldp-aggregator`` commands run in process through the Typer app (fast, same code as the console
script); ``examples/devices.py`` runs through its ``main``. The README's fixed ports (50051, 9464) are
replaced by free ones so that parallel test runs do not collide, and ``LDP_SERVER`` points the commands
that rely on the default ``--server`` at the free port; nothing else is changed.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import select
import shlex
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ldp_aggregator.cli import app
from ldp_aggregator.server import BackgroundServer, ServerConfig

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
TLS_DOC = ROOT / "docs" / "tls.md"
MARKER = "<!-- operator-steps:"
AGGREGATOR = ".venv/bin/ldp-aggregator"
DEVICES = [".venv/bin/python", "examples/devices.py"]

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="the TLS recipe needs openssl")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _logical_lines(block: str) -> list[str]:
    """Shell lines of a fenced block: continuations joined, comment-only and blank lines dropped."""
    lines: list[str] = []
    pending = ""
    for raw in block.splitlines():
        if raw.rstrip().endswith("\\"):
            pending += raw.rstrip()[:-1] + " "
            continue
        line = (pending + raw).strip()
        pending = ""
        if line and not line.startswith("#"):
            lines.append(line)
    return lines


def readme_operator_commands() -> list[str]:
    """The commands of README.md's operator block, in order."""
    text = README.read_text(encoding="utf-8")
    assert MARKER in text, "README.md lost its operator-steps marker (the block this test runs)"
    match = re.search(r"```bash\n(.*?)```", text[text.index(MARKER) :], re.S)
    assert match is not None
    return _logical_lines(match.group(1))


def tls_recipe() -> str:
    """docs/tls.md's certificate commands (every bash block that runs openssl), as one script."""
    blocks = re.findall(r"```bash\n(.*?)```", TLS_DOC.read_text(encoding="utf-8"), re.S)
    recipe = [b for b in blocks if "openssl " in b]
    assert len(recipe) == 2, "docs/tls.md: expected the CA/server block and the client block"
    return "\n".join(recipe)


def run_tls_recipe(cwd: Path) -> None:
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", tls_recipe()],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr


class _Server:
    """One ``ldp-aggregator serve`` process (the README's terminal 1)."""

    def __init__(self, argv: list[str], cwd: Path, log: Path) -> None:
        self.log = log
        with log.open("a", encoding="utf-8") as log_file:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "ldp_aggregator", *argv],
                cwd=cwd,
                stdout=subprocess.PIPE,
                stderr=log_file,
                text=True,
            )
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], 60)
        line = self.proc.stdout.readline() if ready else ""
        if "ready on port" not in line:
            self.proc.kill()
            self.proc.wait()
            pytest.fail(
                f"serve {argv} did not start: {line!r}; log: {log.read_text(encoding='utf-8')[-2000:]}"
            )

    def stop(self) -> None:
        """Ctrl-C: SIGINT, then a clean exit (0) after draining."""
        self.proc.send_signal(signal.SIGINT)
        code = self.proc.wait(timeout=60)
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        assert code == 0, f"serve exited {code}; log: {self.log.read_text(encoding='utf-8')[-2000:]}"


def _load_devices(path: Path) -> Callable[[list[str]], int]:
    spec = importlib.util.spec_from_file_location("ldp_example_devices", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    main: Callable[[list[str]], int] = module.main
    return main


@contextlib.contextmanager
def _clone_like(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh directory laid out like a clone: examples/ copied, tls/ from docs/tls.md, cwd there."""
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    run_tls_recipe(tmp_path)
    monkeypatch.chdir(tmp_path)
    for var in ("LDP_TOKEN", "LDP_SERVER", "LDP_TLS_CA", "LDP_TLS_CERT", "LDP_TLS_KEY"):
        monkeypatch.delenv(var, raising=False)
    yield tmp_path


@pytest.mark.timeout(240)
def test_readme_operator_steps_run_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    commands = readme_operator_commands()
    ports = {"50051": str(_free_port()), "9464": str(_free_port())}
    runner = CliRunner()
    server: _Server | None = None
    ran: list[str] = []
    with _clone_like(tmp_path, monkeypatch) as cwd:
        monkeypatch.setenv("LDP_SERVER", f"127.0.0.1:{ports['50051']}")  # the default --server, moved
        devices = _load_devices(cwd / "examples" / "devices.py")
        try:
            for as_written in commands:
                line = as_written
                for fixed, free in ports.items():
                    line = line.replace(fixed, free)
                export = re.fullmatch(r"export (\w+)=\$\((.*)\)", line)
                argv = shlex.split(export.group(2) if export else line)
                redirect: Path | None = None
                if ">" in argv:
                    redirect = cwd / argv[argv.index(">") + 1]
                    argv = argv[: argv.index(">")]
                if argv[:2] == [AGGREGATOR, "serve"]:
                    if server is not None:
                        server.stop()
                    server = _Server(argv[1:], cwd, cwd / "serve.log")
                    ran.append(line)
                    continue
                if argv[0] == AGGREGATOR:
                    result = runner.invoke(app, argv[1:])
                    code, stdout, output = result.exit_code, result.stdout, result.output
                elif argv[:2] == DEVICES:
                    code, stdout, output = devices(argv[2:]), "", ""
                else:
                    pytest.fail(f"README operator step this test does not know how to run: {line}")
                assert code == 0, f"README step failed (exit {code}): {line}\n{output}\nafter: {ran}"
                if export:
                    monkeypatch.setenv(export.group(1), stdout.strip())
                if redirect is not None:
                    redirect.write_text(stdout, encoding="utf-8")
                ran.append(line)
        finally:
            if server is not None:
                server.stop()
    # What the steps promise: authentication on with the admin token, a closed and exported campaign.
    assert os.environ["LDP_TOKEN"].startswith("ldp_")
    assert (cwd / "reporter.token").read_text(encoding="utf-8").startswith("ldp_")
    export_doc = (cwd / "browser-export.json").read_text(encoding="utf-8")
    assert '"closed": true' in export_doc and '"n_reports": 5000' in export_doc
    assert any("--tls-ca" in c for c in ran) and sum(c.startswith(f"{AGGREGATOR} serve") for c in ran) == 2


def _cli(*args: str, env: dict[str, str] | None = None) -> Any:
    return CliRunner().invoke(app, list(args), env=env)


@pytest.mark.timeout(120)
def test_tls_recipe_serves_tls_and_mutual_tls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with _clone_like(tmp_path, monkeypatch) as cwd:
        tls = cwd / "tls"
        config = ServerConfig(
            db=cwd / "ldp.sqlite3",
            listen="127.0.0.1:0",
            tls_cert=tls / "server.pem",
            tls_key=tls / "server.key",
        )
        with BackgroundServer(config) as server:
            target = f"localhost:{server.port}"  # a name in the certificate
            result = _cli("--tls-ca", "tls/ca.pem", "campaign", "list", "--server", target)
            assert result.exit_code == 0, result.output
            result = _cli("campaign", "list", "--server", target)  # plaintext to a TLS server
            assert result.exit_code == 4 and "--tls-ca" in result.output
        mutual = ServerConfig(
            db=cwd / "ldp.sqlite3",
            listen="127.0.0.1:0",
            tls_cert=tls / "server.pem",
            tls_key=tls / "server.key",
            tls_client_ca=tls / "ca.pem",
        )
        with BackgroundServer(mutual) as server:
            target = f"localhost:{server.port}"
            client = ["--tls-ca", "tls/ca.pem", "--tls-cert", "tls/client.pem", "--tls-key", "tls/client.key"]
            result = _cli(*client, "campaign", "list", "--server", target)
            assert result.exit_code == 0, result.output
            result = _cli("--tls-ca", "tls/ca.pem", "campaign", "list", "--server", target)  # no client cert
            assert result.exit_code == 4 and "UNAVAILABLE" in result.output


def test_a_key_that_does_not_match_its_certificate_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 13: gRPC reported this as "allowed an address this host can bind".
    with _clone_like(tmp_path, monkeypatch):
        result = _cli(
            "serve", "--db", "ldp.sqlite3", "--listen", "127.0.0.1:0",
            "--tls-cert", "tls/server.pem", "--tls-key", "tls/client.key",
        )  # fmt: skip
        assert result.exit_code == 2, result.output
        assert "tls_key='tls/client.key'" in result.output and "does not match" in result.output
        assert "tls/server.pem" in result.output and "bind" not in result.output
        assert len(result.output.strip().splitlines()) == 1


def test_readme_points_at_files_that_exist() -> None:
    # Issue 13: the README sent readers to a DESIGN.md that is not in the repository.
    text = README.read_text(encoding="utf-8")
    assert "DESIGN.md" not in text
    paths = set(
        re.findall(r"(?<![\w/.-])((?:docs|examples|bench)/[\w./-]+\.(?:md|py|toml|txt|csv|png))", text)
    )
    assert {
        "docs/architecture.md",
        "docs/tls.md",
        "examples/campaign.toml",
        "examples/candidates.txt",
    } <= paths
    missing = sorted(p for p in paths if not (ROOT / p).is_file())
    assert not missing, missing
