"""Where the ldp.v1 protos are generated, and that moving them changed no name and no wire byte.

The client package ships only what a device needs (its campaign, its reports and the Collector service);
the Analyst service and the estimate and decoding messages are generated into the aggregator package.
``tests/fixtures/proto_names.json`` (written by ``tests/fixtures/make_proto_names.py`` on the release
before the move) pins every full name with its descriptor: field numbers, types, labels and options fix
the wire bytes, method names and types fix the gRPC paths.
"""

from __future__ import annotations

import json
from pathlib import Path

from google.protobuf import descriptor_pb2, text_format

from ldp_aggregator._proto.ldp.v1 import analyst_pb2
from ldp_client._proto.ldp.v1 import collector_pb2
from tests.fixtures.make_proto_names import describe_ldp_v1, generated_file_descriptors

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "proto_names.json"
CLIENT_FILES = {"ldp/v1/campaign.proto", "ldp/v1/reports.proto", "ldp/v1/collector.proto"}
AGGREGATOR_FILES = {"ldp/v1/analyst.proto", "ldp/v1/decode.proto", "ldp/v1/estimates.proto"}


def _module_stems(package_dir: Path) -> set[str]:
    return {p.stem for p in (package_dir / "ldp" / "v1").glob("*.py") if p.stem != "__init__"}


def _without_added_fields(entry: dict[str, str], pinned: dict[str, str]) -> dict[str, str]:
    """A current message entry with the fields (and oneofs) the pinned one lacks removed: additive changes
    (a new field number, a new oneof member) leave every pinned byte of the wire as it was."""
    if entry["kind"] != "message" or entry == pinned:
        return entry
    old = text_format.Parse(pinned["descriptor"], descriptor_pb2.DescriptorProto())
    new = text_format.Parse(entry["descriptor"], descriptor_pb2.DescriptorProto())
    numbers = {f.number for f in old.field}
    kept = [f for f in new.field if f.number in numbers]
    del new.field[:]
    new.field.extend(kept)
    del new.oneof_decl[len(old.oneof_decl) :]
    return {**entry, "descriptor": text_format.MessageToString(new)}


def test_every_ldp_v1_full_name_and_descriptor_is_unchanged() -> None:
    pinned = json.loads(FIXTURE.read_text(encoding="utf-8"))["symbols"]
    current = describe_ldp_v1()
    # Additive changes only: every pinned name is still there, with the same descriptor once the fields
    # added since (new numbers) are set aside; new names may appear.
    assert set(pinned) <= set(current), sorted(set(pinned) - set(current))
    for name, entry in pinned.items():
        assert _without_added_fields(current[name], entry) == entry, name
    assert {"ldp.v1.Collector", "ldp.v1.Analyst", "ldp.v1.Campaign", "ldp.v1.EstimateResponse"} <= set(
        current
    )


def test_the_client_package_ships_only_what_a_device_needs() -> None:
    assert _module_stems(ROOT / "ldp_client" / "_proto") == {
        "campaign_pb2",
        "reports_pb2",
        "collector_pb2",
        "collector_pb2_grpc",
    }
    files = generated_file_descriptors()
    for name in CLIENT_FILES:
        # A client file depends only on client files: the device never needs the aggregator's code.
        assert {dep.name for dep in files[name].dependencies} <= CLIENT_FILES, name
    assert set(collector_pb2.DESCRIPTOR.services_by_name) == {"Collector"}
    client_symbols = {
        symbol
        for name in CLIENT_FILES
        for symbol in (*files[name].message_types_by_name, *files[name].services_by_name)
    }
    assert {"Campaign", "Report", "ReportBatch", "GetCampaignRequest", "Collector"} <= client_symbols
    assert not client_symbols & {
        "Analyst",
        "EstimateResponse",
        "DecodeRapporResponse",
        "CreateCampaignRequest",
    }


def test_the_aggregator_package_holds_the_analyst_service_and_analysis_messages() -> None:
    assert _module_stems(ROOT / "ldp_aggregator" / "_proto") == {
        "analyst_pb2",
        "analyst_pb2_grpc",
        "decode_pb2",
        "estimates_pb2",
    }
    files = generated_file_descriptors()
    assert set(files) == CLIENT_FILES | AGGREGATOR_FILES
    assert set(analyst_pb2.DESCRIPTOR.services_by_name) == {"Analyst"}
    assert set(files["ldp/v1/decode.proto"].message_types_by_name) >= {
        "DecodeRapporResponse",
        "AssociationResponse",
    }
    assert set(files["ldp/v1/estimates.proto"].message_types_by_name) >= {
        "EstimateRequest",
        "EstimateResponse",
    }
    # Both services keep their gRPC paths: /ldp.v1.<Service>/<Method>.
    collector = collector_pb2.DESCRIPTOR.services_by_name["Collector"]
    analyst = analyst_pb2.DESCRIPTOR.services_by_name["Analyst"]
    assert (collector.full_name, analyst.full_name) == ("ldp.v1.Collector", "ldp.v1.Analyst")
    assert analyst.methods_by_name["GetCampaign"].input_type is collector_pb2.GetCampaignRequest.DESCRIPTOR
