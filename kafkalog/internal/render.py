"""The answers about internal topics as text tables (what ``kafkalog offsets``, ``groups``,
``transactions`` and ``metadata`` print without ``--json``)."""
from __future__ import annotations

import datetime
from typing import Any, Iterable, Sequence


def table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    """Lines of a left-aligned table (None shows as ``-``)."""
    cells = [[str(h) for h in header]] + [["-" if c is None else str(c) for c in r]
                                          for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]


def timestamp(ms: int | None) -> str | None:
    """Milliseconds since the epoch as ISO 8601 UTC (to the millisecond)."""
    if ms is None or ms < 0:
        return None
    t = datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def _assignment(parts: list[dict[str, Any]] | None) -> str:
    if not parts:
        return "-"
    return " ".join(f"{p['topic']}:{','.join(map(str, p['partitions']))}" for p in parts)


def offsets_lines(rows: list[dict[str, Any]]) -> list[str]:
    return table(["GROUP", "TOPIC", "PARTITION", "OFFSET", "LEADER-EPOCH", "COMMITTED",
                  "METADATA"],
                 [(r["group"], r["topic"], r["partition"], r["offset"], r["leader_epoch"],
                   timestamp(r["commit_timestamp"]), repr(r["metadata"])) for r in rows])


def groups_lines(rows: list[dict[str, Any]]) -> list[str]:
    lines = table(["GROUP", "TYPE", "STATE", "PROTOCOL", "GENERATION/EPOCH", "MEMBERS"],
                  [(g["group"], g["type"], g["state"], g["protocol"],
                    g["generation"] if g["type"] == "classic" else
                    f"{g['epoch']} (assignment {g['assignment_epoch']})", len(g["members"]))
                   for g in rows])
    for g in rows:
        if not g["members"]:
            continue
        lines.append("")
        lines.append(f"{g['group']}:")
        lines.extend("  " + line for line in table(
            ["MEMBER", "CLIENT", "HOST", "EPOCH", "ASSIGNMENT"],
            [(m["member_id"], m["client_id"], m["client_host"], m.get("member_epoch"),
              _assignment(m["assignment"])) for m in g["members"]]))
    return lines


def transactions_lines(rows: list[dict[str, Any]]) -> list[str]:
    return table(["TRANSACTIONAL-ID", "PRODUCER-ID", "EPOCH", "STATE", "TIMEOUT-MS",
                  "LAST-UPDATE", "PARTITIONS", "FLAGS"],
                 [(r["transactional_id"], r["producer_id"], r["producer_epoch"], r["state"],
                   r["timeout_ms"], timestamp(r["last_update_ms"]),
                   ",".join(f"{p['topic']}-{p['partition']}" for p in r["partitions"]) or None,
                   ",".join(f for f in ("open", "hanging") if r[f]) or None)
                  for r in rows])


def metadata_lines(image: dict[str, Any]) -> list[str]:
    snap = image["snapshot"]
    lines = [f"Snapshot: {snap['file'] if snap else 'none'}; records applied through offset "
             f"{image['last_applied_offset']}; log end offset {image['log_end_offset']}"
             + ("; a metadata transaction is open (not applied)"
                if image["pending_transaction"] else "")]
    q = image["quorum"]
    if q["leader_id"] is not None:
        lines.append(f"Quorum: leader {q['leader_id']} (epoch {q['leader_epoch']}), voters "
                     f"{q['voters']}")
    lines += ["", "Topics:"]
    lines += ["  " + x for x in table(
        ["TOPIC", "TOPIC-ID", "PARTITION", "LEADER", "LEADER-EPOCH", "REPLICAS", "ISR"],
        [(t["name"], t["topic_id"], p["partition"], p["leader"], p["leader_epoch"],
          ",".join(map(str, p["replicas"])), ",".join(map(str, p["isr"])))
         for t in image["topics"] for p in t["partitions"]])]
    lines += ["", "Brokers:"]
    lines += ["  " + x for x in table(
        ["ID", "EPOCH", "FENCED", "CONTROLLED-SHUTDOWN", "RACK", "ENDPOINTS"],
        [(b["id"], b["epoch"], b["fenced"], b["in_controlled_shutdown"], b["rack"],
          " ".join(f"{e['name']}://{e['host']}:{e['port']}" for e in b["endpoints"]))
         for b in image["brokers"]])]
    lines += ["", "Configs:"]
    lines += ["  " + x for x in table(
        ["RESOURCE", "NAME", "CONFIG", "VALUE"],
        [(c["resource_type"], c["resource_name"] or '""', k, v)
         for c in image["configs"] for k, v in c["configs"].items()])]
    lines += ["", "Features: " + (", ".join(f"{k}={v}" for k, v in image["features"].items())
                                  or "none")]
    pids = image["producer_ids"]
    lines.append("Producer ids: " + (f"next {pids['next_producer_id']} (last block to broker "
                                     f"{pids['broker_id']})" if pids else "none"))
    return lines
