"""Simulated devices for trying a deployment: each one encodes its value and reports it over gRPC.

    python examples/devices.py CAMPAIGN --values FILE [--server HOST:PORT] [--token-file PATH]
        [--tls-ca PEM] [--batch-size N]

``--server`` defaults to ``$LDP_SERVER``, else ``127.0.0.1:50051`` (as for ``ldp-aggregator``).

FILE is a ``value,count`` CSV (a header line ``value,count`` is allowed): ``count`` devices hold ``value``.
Every device fetches nothing but the campaign's parameters (``Collector.GetCampaign``), encodes its value
with the same per-report encoder an app uses (randomness from the OS CSPRNG; string RAPPOR with a fresh
per-device secret, as a new install would have) and the reports go to ``Collector.Submit`` in batches with
random ids. Raw values never leave this process. Mechanisms: rr, grr, rappor, basic-rappor and
boolean-rappor (for rr and boolean-rappor the values are yes/no, true/false or 1/0).

The access token is read from ``--token-file`` or the ``LDP_TOKEN`` environment variable (a reporter
token is enough). Errors are one line; the exit codes are those of ``ldp-aggregator`` (0 ok, 2 bad input,
3 refused by the server, 4 server unreachable).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

from ldp_aggregator.cli_common import EXIT_USAGE, exit_code_for_status, print_error
from ldp_client import (
    BasicRapporEncoder,
    BasicRapporParams,
    BinaryRREncoder,
    BinaryRRParams,
    BooleanRapporEncoder,
    BooleanRapporParams,
    ClientSecret,
    GRREncoder,
    GRRParams,
    MechanismParams,
    RapporEncoder,
    RapporParams,
    wire,
)
from ldp_client._proto.ldp.v1 import collector_pb2, collector_pb2_grpc
from ldp_client.errors import LdpError

_YES = {"1", "true", "yes"}
_NO = {"0", "false", "no"}


def read_values(path: Path) -> list[str]:
    """One value per device, from a ``value,count`` CSV."""
    values: list[str] = []
    text = path.read_text(encoding="utf-8")
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or (number == 1 and line.replace(" ", "").lower() == "value,count"):
            continue
        value, sep, count = line.rpartition(",")
        if not sep or not value.strip() or not count.strip().isdigit():
            raise ValueError(f"--values {path} line {number}: {line[:80]!r}: allowed 'value,count'")
        values.extend([value.strip()] * int(count))
    if not values:
        raise ValueError(f"--values {path}: no devices in it: allowed lines 'value,count' with a count > 0")
    return values


def _bool(value: str) -> bool:
    if value.lower() in _YES:
        return True
    if value.lower() in _NO:
        return False
    raise ValueError(f"value {value!r}: allowed yes/no, true/false or 1/0 for this campaign")


def device_encoder(params: MechanismParams, campaign_id: str) -> Callable[[str], Any]:
    """A function that encodes one device's value, as that device would (a new secret per device)."""
    if isinstance(params, BinaryRRParams):
        rr = BinaryRREncoder(params)
        return lambda value: rr.encode(_bool(value))
    if isinstance(params, GRRParams):
        return GRREncoder(params).encode
    if isinstance(params, RapporParams):
        return lambda value: RapporEncoder(
            params, campaign_id=campaign_id, secret=ClientSecret.generate()
        ).encode(value)
    if isinstance(params, BasicRapporParams):
        return lambda value: BasicRapporEncoder(
            params, campaign_id=campaign_id, secret=ClientSecret.generate()
        ).encode(value)
    if isinstance(params, BooleanRapporParams):
        return lambda value: BooleanRapporEncoder(
            params, campaign_id=campaign_id, secret=ClientSecret.generate()
        ).encode(_bool(value))
    raise ValueError(
        f"campaign {campaign_id!r} uses {params.name}: allowed rr, grr, rappor, basic-rappor, boolean-rappor"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("campaign", help="campaign id")
    ap.add_argument("--values", type=Path, required=True, help="value,count CSV: count devices hold value")
    ap.add_argument(
        "--server",
        default=os.environ.get("LDP_SERVER", "127.0.0.1:50051"),
        help="aggregator HOST:PORT (default: $LDP_SERVER, else 127.0.0.1:50051)",
    )
    ap.add_argument("--token-file", type=Path, help="file holding the access token (default: $LDP_TOKEN)")
    ap.add_argument("--tls-ca", type=Path, help="use TLS, trusting this CA (PEM)")
    ap.add_argument("--batch-size", type=int, default=1000, help="reports per Submit (default 1000)")
    args = ap.parse_args(argv)
    try:
        values = read_values(args.values)
        token = (
            args.token_file.read_text(encoding="utf-8").strip()
            if args.token_file
            else os.environ.get("LDP_TOKEN")
        )
        credentials = grpc.ssl_channel_credentials(args.tls_ca.read_bytes()) if args.tls_ca else None
        if not 1 <= args.batch_size <= 100_000:
            raise ValueError(f"--batch-size {args.batch_size}: allowed 1 to 100000")
    except (OSError, ValueError) as exc:
        print_error(str(exc))
        return EXIT_USAGE
    metadata = (("authorization", f"Bearer {token}"),) if token else ()
    channel = (
        grpc.secure_channel(args.server, credentials) if credentials else grpc.insecure_channel(args.server)
    )
    collector = collector_pb2_grpc.CollectorStub(channel)
    random.SystemRandom().shuffle(values)  # devices report in no particular order
    try:
        campaign = collector.GetCampaign(
            collector_pb2.GetCampaignRequest(campaign_id=args.campaign), timeout=30, metadata=metadata
        )
        params = wire.campaign_from_proto(campaign).params
        encode = device_encoder(params, args.campaign)
        accepted = 0
        for start in range(0, len(values), args.batch_size):
            reports = [encode(v) for v in values[start : start + args.batch_size]]
            batch = wire.batch_to_proto(
                campaign_id=args.campaign,
                batch_id=f"devices-{uuid.uuid4().hex}",
                params=params,
                columns=wire.batch_from_reports(params, reports),
            )
            accepted += collector.Submit(batch, timeout=60, metadata=metadata).accepted
    except grpc.RpcError as exc:
        status = exc.code()
        print_error(f"{status.name}: {exc.details()} (--server {args.server})")
        return exit_code_for_status(status.name)
    except (LdpError, ValueError) as exc:
        print_error(str(exc))
        return EXIT_USAGE
    finally:
        channel.close()
    print(
        f"{accepted:,} devices reported to campaign {args.campaign} ({params.name}, eps {params.epsilon:.4g})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
