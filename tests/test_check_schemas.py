"""scripts/check_schemas.py: a definition that agrees with the tables passes, each kind of
disagreement is reported. The definitions here are written for the test (no Kafka files are
vendored); the real check runs against Kafka's sources, see the script."""
import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "check_schemas.py"


def _script():
    spec = importlib.util.spec_from_file_location("check_schemas", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _member_value(**change):
    """ConsumerGroupMemberMetadataValue as the tables hold it, in the definitions' JSON."""
    classic = {"name": "ClassicMemberMetadata", "type": "ClassicMemberMetadata",
               "versions": "0+", "nullableVersions": "0+", "default": "null",
               "taggedVersions": "0+", "tag": 0, "fields": [
                   {"name": "SessionTimeoutMs", "type": "int32", "versions": "0+"},
                   {"name": "SupportedProtocols", "type": "[]ClassicProtocol",
                    "versions": "0+", "fields": [
                        {"name": "Name", "type": "string", "versions": "0+"},
                        {"name": "Metadata", "type": "bytes", "versions": "0+"}]}]}
    classic.update(change)
    nullable = {"name": "x", "versions": "0+", "nullableVersions": "0+", "type": "string"}
    fields = [{**nullable, "name": "InstanceId"}, {**nullable, "name": "RackId"},
              {"name": "ClientId", "versions": "0+", "type": "string"},
              {"name": "ClientHost", "versions": "0+", "type": "string"},
              {"name": "SubscribedTopicNames", "versions": "0+", "type": "[]string"},
              {**nullable, "name": "SubscribedTopicRegex"},
              {"name": "RebalanceTimeoutMs", "type": "int32", "versions": "0+", "default": -1},
              {**nullable, "name": "ServerAssignor"}, classic]
    return {"type": "data", "name": "ConsumerGroupMemberMetadataValue",
            "validVersions": "0", "flexibleVersions": "0+", "fields": fields}


@pytest.mark.parametrize("change,want", [
    ({}, None),
    ({"tag": 1}, "classicMemberMetadata: tag 0, Kafka's 1"),
    ({"nullableVersions": "none"}, "classicMemberMetadata: nullable 0, Kafka's none"),
    ({"fields": []}, "classicMemberMetadata.sessionTimeoutMs: in the table, not in Kafka's"),
    ({"versions": "1+", "taggedVersions": "1+"}, "classicMemberMetadata: versions 0, Kafka's"),
])
def test_differences_are_reported(tmp_path, capfd, change, want):
    # a comment, as Kafka's definitions have
    (tmp_path / "ConsumerGroupMemberMetadataValue.json").write_text(
        "// written for the test\n" + json.dumps(_member_value(**change)))
    rc = _script().main([str(tmp_path)])
    out = capfd.readouterr().out
    assert "1 messages (" in out
    diffs = [line for line in out.splitlines() if line.startswith("DIFF ")]
    if want is None:
        assert rc == 0 and not diffs
    else:
        assert rc == 1 and any(want in line for line in diffs), out
    # what no source defines is listed, and fails only with --strict
    assert "UNCHECKED TopicRecord" in out
    assert _script().main(["--strict", str(tmp_path)]) == 1


def _heartbeat(kind, **change):
    """HeartbeatRequest/Response as the protocol tables hold them, in the definitions' JSON;
    Kafka's define a v5 the server does not support (left out of the comparison)."""
    if kind == "Request":
        fields = [{"name": "GroupId", "type": "string", "versions": "0+"},
                  {"name": "GenerationId", "type": "int32", "versions": "0+"},
                  {"name": "MemberId", "type": "string", "versions": "0+"},
                  {"name": "GroupInstanceId", "type": "string", "versions": "3+",
                   "nullableVersions": "3+", "default": "null"},
                  {"name": "Later", "type": "int32", "versions": "5+"}]
    else:
        fields = [{"name": "ThrottleTimeMs", "type": "int32", "versions": "1+"},
                  {"name": "ErrorCode", "type": "int16", "versions": "0+"}]
    spec = {"apiKey": 12, "type": kind.lower(), "name": "Heartbeat" + kind,
            "validVersions": "0-5", "flexibleVersions": "4+", "fields": fields}
    spec.update(change)
    return spec


@pytest.mark.parametrize("change,want", [
    ({}, None),
    ({"apiKey": 13}, "HeartbeatRequest: api key 12 in APIS, Kafka's 13"),
    ({"validVersions": "1-5"}, "HeartbeatRequest: APIS supports versions 0"),
    ({"flexibleVersions": "3+"}, "HeartbeatRequest: flexible versions 4, Kafka's 3-4"),
    ({"latestVersionUnstable": True, "validVersions": "0-4"}, "v4 is unstable"),
])
def test_protocol_tables_are_compared_over_the_supported_versions(tmp_path, capfd, change,
                                                                   want):
    for kind in ("Request", "Response"):
        (tmp_path / f"Heartbeat{kind}.json").write_text(json.dumps(
            _heartbeat(kind, **(change if kind == "Request" else {}))))
    rc = _script().main([str(tmp_path)])
    out = capfd.readouterr().out
    assert "2 messages (" in out and "UNCHECKED FetchRequest" in out
    diffs = [line for line in out.splitlines() if line.startswith("DIFF ")]
    if want is None:
        assert rc == 0 and not diffs, out
    else:
        assert rc == 1 and any(want in line for line in diffs), out
