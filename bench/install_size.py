"""Disk size of a bare client install (``pip install ldp-collect``, no extras) beyond an empty venv.

Creates two virtual environments in a temporary directory with the running interpreter: one empty, one
with this checkout installed without extras; reports the difference of their sizes (every file, as
``du`` counts allocated blocks), the largest installed packages, and checks the device-side promises:
no numpy installed, ``import ldp_client.reporter`` imports no numpy, and ``ldp-aggregator`` / ``ldp-sim``
print the extra they need (one line, exit status 1).

Run: .venv/bin/python bench/install_size.py [--extras EXTRA,...]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def tree_bytes(path: Path) -> int:
    """Allocated bytes of every file under ``path`` (st_blocks * 512, as du counts)."""
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            st = os.lstat(os.path.join(dirpath, name))
            total += st.st_blocks * 512
    return total


def site_packages(env: Path) -> Path:
    return next((env / "lib").glob("python*/site-packages"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--extras", default="", help="comma-separated extras to install (default: none)")
    args = parser.parse_args()
    target = str(ROOT) + (f"[{args.extras}]" if args.extras else "")
    with tempfile.TemporaryDirectory(prefix="ldp-install-size-") as tmp:
        empty, bare = Path(tmp) / "empty", Path(tmp) / "client"
        venv.create(empty, with_pip=True)
        venv.create(bare, with_pip=True)
        subprocess.run([bare / "bin" / "python", "-m", "pip", "install", "-q", target], check=True)
        extra = tree_bytes(bare) - tree_bytes(empty)
        print(
            f"pip install {'ldp-collect' + (f'[{args.extras}]' if args.extras else '')}: "
            f"{extra / 1e6:.1f} MB ({extra / 2**20:.1f} MiB) beyond an empty venv"
        )
        sp = site_packages(bare)
        base = {p.name for p in site_packages(empty).iterdir()}  # pip and setuptools: in both
        sizes = sorted(
            ((tree_bytes(p), p.name) for p in sp.iterdir() if p.is_dir() and p.name not in base), reverse=True
        )
        for size, name in sizes[:8]:
            print(f"  {size / 1e6:6.1f} MB  {name}")
        py = str(bare / "bin" / "python")
        numpy = (sp / "numpy").exists()
        print(f"numpy installed: {numpy}")
        timing = subprocess.run(
            [py, "-X", "importtime", "-c", "import ldp_client.reporter"],
            capture_output=True,
            text=True,
            check=True,
            cwd=tmp,  # not this checkout: its ldp_client would shadow the installed one
        ).stderr
        print(f"`python -X importtime -c 'import ldp_client.reporter'` mentions numpy: {'numpy' in timing}")
        for command in ("ldp-aggregator", "ldp-sim"):
            proc = subprocess.run(
                [bare / "bin" / command, "--help"], capture_output=True, text=True, check=False, cwd=tmp
            )
            said = proc.stderr.strip() or proc.stdout.splitlines()[0]
            print(f"{command} --help: exit {proc.returncode}: {said}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
