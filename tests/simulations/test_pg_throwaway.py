"""simulations/pg_throwaway.py: a throwaway cluster's first start survives its port being taken meanwhile.

The port is chosen free when the cluster is made and bound by PostgreSQL only after initdb (seconds later);
with the tests on parallel workers another worker's server may bind it in between.
"""

from __future__ import annotations

import socket

import psycopg
import pytest

from simulations.pg_throwaway import PgCluster, missing_reason
from tests.ldp_aggregator.conftest import _pg_unavailable


def _squat(port: int) -> socket.socket:
    """A listening socket on ``port``, as another program's server (PostgreSQL cannot bind it then)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        # SO_REUSEADDR: a port just left by a stopped server still has connections in TIME_WAIT. Listening,
        # the socket still keeps PostgreSQL (which binds with SO_REUSEADDR too) off the port.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        s.listen()
    except BaseException:
        s.close()
        raise
    return s


def test_a_port_taken_before_the_first_start_is_replaced_and_later_starts_keep_theirs() -> None:
    reason = missing_reason()
    if reason is not None:
        _pg_unavailable(reason)
    cluster = PgCluster(fsync=False)
    try:
        taken = cluster.port
        with _squat(taken):
            cluster.start()
            assert cluster.port != taken and cluster.settings["port"] == str(cluster.port)
            assert f":{cluster.port}/" in cluster.url
            with psycopg.connect(cluster.url, connect_timeout=30) as conn:
                assert conn.execute("SELECT 1").fetchone() == (1,)
        # A restart keeps the port its clients know: taken then, it is an error, not another port.
        port = cluster.port
        cluster.stop()
        with _squat(port), pytest.raises(RuntimeError, match="pg_ctl failed"):
            cluster.start()
        assert cluster.port == port
    finally:
        cluster.destroy()
