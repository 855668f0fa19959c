"""Where the ldp.v1 protos are generated, and that moving them changed no name and no wire byte.

The client package ships only what a device needs (its campaign, its reports and the Collector service);
the Analyst service and the estimate and decoding messages are generated into the aggregator package.
``tests/fixtures/proto_names.json`` (written by ``tests/fixtures/make_proto_names.py`` on the release
before the move) pins every full name with its descriptor: field numbers, types, labels and options fix
the wire bytes, method names and types fix the gRPC paths. The contract is additive
(``docs/wire-protocol.md``): a new mechanism adds messages, oneof members and fields with new numbers, so
the current descriptors must hold every pinned symbol, field, oneof, nested type, enum value and method
unchanged, and may hold more.
"""

from __future__ import annotations

import json
from pathlib import Path

from google.protobuf import descriptor_pb2, text_format
from google.protobuf.message import Message

from ldp_aggregator._proto.ldp.v1 import analyst_pb2
from ldp_client._proto.ldp.v1 import collector_pb2
from tests.fixtures.make_proto_names import describe_ldp_v1, generated_file_descriptors

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "proto_names.json"
CLIENT_FILES = {"ldp/v1/campaign.proto", "ldp/v1/reports.proto", "ldp/v1/collector.proto"}
AGGREGATOR_FILES = {"ldp/v1/analyst.proto", "ldp/v1/decode.proto", "ldp/v1/estimates.proto"}


def _module_stems(package_dir: Path) -> set[str]:
    return {p.stem for p in (package_dir / "ldp" / "v1").glob("*.py") if p.stem != "__init__"}


_DESCRIPTOR_TYPES = {
    "message": descriptor_pb2.DescriptorProto,
    "enum": descriptor_pb2.EnumDescriptorProto,
    "service": descriptor_pb2.ServiceDescriptorProto,
}
# Repeated members of a descriptor that are named (matched by name, in any order: a new field may be written
# between old ones); the other repeated members (reserved ranges and names) are matched as values.
_NAMED = frozenset({"field", "nested_type", "enum_type", "value", "method", "oneof_decl", "extension"})


def _kept(pinned: Message, current: Message, where: str) -> list[str]:
    """What ``current`` lost or changed of the ``pinned`` descriptor (additions are allowed), a line each."""
    problems: list[str] = []
    for fd, value in pinned.ListFields():
        now = getattr(current, fd.name)
        if not fd.is_repeated:
            if now != value:
                problems.append(f"{where}: {fd.name} {value!r} became {now!r}")
            continue
        if fd.name not in _NAMED:
            problems += [f"{where}: {fd.name} {v!r} removed" for v in value if v not in now]
            continue
        by_name = {e.name: e for e in now}
        for element in value:
            other = by_name.get(element.name)
            if other is None:
                problems.append(f"{where}: {fd.name} {element.name} removed")
            elif fd.name == "field":
                problems += _field_kept(pinned, element, current, other, f"{where}.{element.name}")
            else:
                problems += _kept(element, other, f"{where}.{element.name}")
    return problems


def _field_kept(
    pinned_msg: Message, pinned: Message, current_msg: Message, current: Message, where: str
) -> list[str]:
    """A field is kept when it is equal but for its oneof's index, and its oneof (if any) keeps its name."""
    a, b = type(pinned)(), type(current)()
    a.CopyFrom(pinned)
    b.CopyFrom(current)
    oneofs = []
    for msg, field in ((pinned_msg, a), (current_msg, b)):
        oneofs.append(msg.oneof_decl[field.oneof_index].name if field.HasField("oneof_index") else None)
        field.ClearField("oneof_index")
    problems = (
        []
        if a == b
        else [
            f"{where}: {text_format.MessageToString(pinned, as_one_line=True)} became "
            f"{text_format.MessageToString(current, as_one_line=True)}"
        ]
    )
    if oneofs[0] != oneofs[1]:
        problems.append(f"{where}: oneof {oneofs[0]!r} became {oneofs[1]!r}")
    return problems


def _parse(entry: dict[str, str]) -> Message:
    return text_format.Parse(entry["descriptor"], _DESCRIPTOR_TYPES[entry["kind"]]())


def test_every_ldp_v1_full_name_and_descriptor_is_unchanged() -> None:
    pinned = json.loads(FIXTURE.read_text(encoding="utf-8"))["symbols"]
    current = describe_ldp_v1()
    assert set(pinned) <= set(current), sorted(set(pinned) - set(current))
    for name, entry in pinned.items():
        now = current[name]
        assert (now["kind"], now["syntax"]) == (entry["kind"], entry["syntax"]), name
        assert _kept(_parse(entry), _parse(now), name) == []
    assert {"ldp.v1.Collector", "ldp.v1.Analyst", "ldp.v1.Campaign", "ldp.v1.EstimateResponse"} <= set(
        current
    )


def test_the_pin_allows_additions_and_catches_every_change() -> None:
    entry = json.loads(FIXTURE.read_text(encoding="utf-8"))["symbols"]["ldp.v1.Campaign"]
    pinned = _parse(entry)
    assert isinstance(pinned, descriptor_pb2.DescriptorProto)
    # A new oneof member with a new number, and a new nested message: kept.
    added = descriptor_pb2.DescriptorProto()
    added.CopyFrom(pinned)
    added.field.insert(
        3,
        descriptor_pb2.FieldDescriptorProto(
            name="new_member",
            number=30,
            label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL,
            type=descriptor_pb2.FieldDescriptorProto.TYPE_BYTES,
            oneof_index=0,
        ),
    )
    added.nested_type.add(name="Extra")
    assert _kept(pinned, added, "Campaign") == []
    # A renumbered, retyped, removed or moved member: each is caught.
    mechanism = next(f.name for f in pinned.field if f.HasField("oneof_index"))
    for change in ("number", "type", "remove", "oneof"):
        changed = descriptor_pb2.DescriptorProto()
        changed.CopyFrom(pinned)
        (field,) = [f for f in changed.field if f.name == mechanism]
        if change == "number":
            field.number = 999
        elif change == "type":
            field.type = descriptor_pb2.FieldDescriptorProto.TYPE_STRING
        elif change == "remove":
            changed.field.remove(field)
        else:
            changed.oneof_decl.add(name="other")
            field.oneof_index = len(changed.oneof_decl) - 1
        assert _kept(pinned, changed, "Campaign"), change


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
