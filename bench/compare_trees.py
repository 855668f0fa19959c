"""Run benchmark scripts in two source trees alternately and report the ratio of every figure they print.

Used to show that a restructuring made no hot path slower: the same benchmark, in the tree before and the
tree after, in turn (A B A B ...), so that the machine's drift hits both alike. Each tree runs with its own
``.venv/bin/python`` (a symbolic link to another checkout's is fine), its code first on ``PYTHONPATH``, and
the benchmark script of that tree.

Every output line is reduced to a template (numbers replaced by ``#``); a figure is a number at one
position of one template. Its direction is read from the unit that follows it: ``.../s`` (a rate) is better
higher, ``s``/``ms``/``us``/``ns`` (a time) is better lower; other numbers (sizes, parameters) are not
compared. The reported ratio is a SPEED ratio (after / before for rates, before / after for times): above 1
is faster. Per figure: the median over the rounds of the pairwise ratios.

    .venv/bin/python bench/compare_trees.py --before ../wt/pre-registry --after . --rounds 5 \
        -- bench/bench_rr_grr.py -- bench/bench_rappor.py --quick

With ``--shared-script``, both trees run the AFTER tree's benchmark script (for scripts that exist only
there and reach the code through public imports), with ``PYTHONPATH`` set to the tree being measured.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

_NUMBER = re.compile(r"(?<![\w.])[-+]?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?")
_RATE = re.compile(r"^\s*(?:[kKMG]?\s*[\w ]*/\s*s|per s)\b")
_TIME = re.compile(r"^\s*(s|ms|us|µs|ns|seconds?)\b")


_COLUMNS = re.compile(r"\s{2,}")


def _table_row(header: list[str], line: str) -> dict[tuple[str, int], tuple[float, str]]:
    """A row of a table under ``header`` (column names apart by 2+ spaces; the first names the rows): the
    row's last len(header) - 1 tokens are its cells, the rest its name. Every cell is a rate (the tables'
    unit, e.g. reports/s) unless its column's name ends in a time unit."""
    tokens = line.split()
    width = len(header) - 1
    cells = tokens[-width:] if width else []
    name = " ".join(tokens[:-width]) if width else ""
    out: dict[tuple[str, int], tuple[float, str]] = {}
    if len(tokens) <= width or not all(_NUMBER.fullmatch(c) for c in cells):
        return out
    for i, (column, cell) in enumerate(zip(header[1:], cells, strict=True), start=1):
        value = float(cell.replace(",", ""))
        direction = "lower" if _TIME.match(column.split()[-1]) else "higher"
        if value > 0:
            out[(f"table {name} | {column}", i)] = (value, direction)
    return out


def _figures(text: str, tables: bool = False) -> dict[tuple[str, int], tuple[float, str]]:
    """(template, position) -> (value, direction) for every rate or time in ``text`` (and, with ``tables``,
    every cell of a table whose header line has no number)."""
    out: dict[tuple[str, int], tuple[float, str]] = {}
    seen: dict[str, int] = {}
    header: list[str] | None = None
    for line in text.splitlines():
        matches = list(_NUMBER.finditer(line))
        if tables and not line.startswith("#"):
            if not matches and len(_COLUMNS.split(line.strip())) >= 3:
                header = _COLUMNS.split(line.strip())
                continue
            if header is not None:
                row = _table_row(header, line)
                if row:
                    out.update(row)
                    continue
        if not matches:
            continue
        template = " ".join(_NUMBER.sub("#", line).split())  # padding varies with the numbers
        k = seen.get(template, 0)  # repeated identical templates are told apart by their order
        seen[template] = k + 1
        key_template = f"{template} [{k}]" if k else template
        for i, m in enumerate(matches):
            after = line[m.end() : m.end() + 24]
            if _RATE.match(after) or line[: m.start()].endswith("per_s="):  # e.g. reports_per_s=1,234
                direction = "higher"
            elif _TIME.match(after):
                direction = "lower"
            else:
                continue
            value = float(m.group().replace(",", ""))
            if value > 0:
                out[(key_template, i)] = (value, direction)
    return out


def _run(tree: Path, argv: list[str], timeout: float, script_tree: Path | None = None) -> str:
    """Run ``argv`` with ``tree``'s Python in ``tree``; with ``script_tree``, run that tree's script file
    instead, importing the code of ``tree`` (``PYTHONPATH``)."""
    python = tree / ".venv" / "bin" / "python"
    # The tree's code first on the path, whatever its venv's editable install points at (a tree may borrow
    # another checkout's venv, e.g. a worktree of the commit to measure).
    env = dict(os.environ, PYTHONPATH=str(tree))
    if script_tree is not None:
        argv = [str(script_tree / argv[0]), *argv[1:]]
    done = subprocess.run(
        [str(python), *argv], cwd=tree, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"{tree}: {' '.join(argv)} exited {done.returncode}: {done.stderr[-2000:]}")
    return done.stdout + done.stderr


def compare(
    before: Path,
    after: Path,
    argv: list[str],
    rounds: int,
    timeout: float,
    shared_script: bool = False,
    tables: bool = False,
) -> list[str]:
    ratios: dict[tuple[str, int], list[float]] = {}
    script_tree = after if shared_script else None
    for _ in range(rounds):
        old = _figures(_run(before, argv, timeout, script_tree), tables)
        new = _figures(_run(after, argv, timeout, script_tree), tables)
        for key, (value, direction) in new.items():
            if key in old and old[key][1] == direction:
                r = value / old[key][0] if direction == "higher" else old[key][0] / value
                ratios.setdefault(key, []).append(r)
    lines = [f"## {' '.join(argv)}  ({rounds} rounds, speed after/before, median [min, max])"]
    for (template, pos), rs in ratios.items():
        lines.append(
            f"{statistics.median(rs):6.3f} [{min(rs):.3f}, {max(rs):.3f}]  #{pos} of: {template[:110]}"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--before", type=Path, required=True, help="tree before (with .venv)")
    parser.add_argument("--after", type=Path, required=True, help="tree after (with .venv)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per benchmark run")
    parser.add_argument(
        "--shared-script", action="store_true", help="run the after tree's script in both trees"
    )
    parser.add_argument(
        "--tables",
        action="store_true",
        help="also compare the cells of tables (a header line without numbers, columns 2+ spaces apart)",
    )
    parser.add_argument("commands", nargs=argparse.REMAINDER, help="-- SCRIPT ARGS [-- SCRIPT ARGS ...]")
    args = parser.parse_args()
    groups: list[list[str]] = [[]]
    for token in args.commands:
        if token == "--":
            if groups[-1]:
                groups.append([])
            continue
        groups[-1].append(token)
    groups = [g for g in groups if g]
    if not groups:
        parser.error("no benchmark command given (after --)")
    for argv in groups:
        for line in compare(
            args.before.resolve(),
            args.after.resolve(),
            argv,
            args.rounds,
            args.timeout,
            args.shared_script,
            args.tables,
        ):
            print(line, flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
