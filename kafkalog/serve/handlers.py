"""The answers to each API, as a broker gives them to consumers (Kafka's ``KafkaApis`` and
``ReplicaManager`` for the data, ``GroupCoordinator`` in ``groups`` for the groups).

This node (id 0) leads every partition and coordinates every group. Writes are refused with
the errors a broker gives a client whose ACLs allow reading only (``TOPIC_AUTHORIZATION_FAILED``
per topic or partition, ``CLUSTER_AUTHORIZATION_FAILED`` / ``TRANSACTIONAL_ID_AUTHORIZATION_FAILED``
where the request names no topic): clients treat those as final instead of retrying, and the
connection keeps serving.
"""
from __future__ import annotations

import logging
import time

from kafkalog.errors import KafkaLogError, OffsetOutOfRangeError
from kafkalog.protocol import api_versions_body
from kafkalog.files import INTERNAL_TOPICS
from kafkalog.serve.groups import NONE, UNKNOWN_TOPIC_OR_PARTITION

log = logging.getLogger(__name__)

# Kafka's error codes (org.apache.kafka.common.protocol.Errors)
OFFSET_OUT_OF_RANGE = 1
LEADER_NOT_AVAILABLE = 5
TOPIC_AUTHORIZATION_FAILED = 29
CLUSTER_AUTHORIZATION_FAILED = 31
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
KAFKA_STORAGE_ERROR = 56

# ListOffsets' special timestamps (ListOffsetsRequest)
LATEST, EARLIEST, MAX_TIMESTAMP = -1, -2, -3

NODE_ID = 0
#: a broker's fetch.max.bytes default: the most a Fetch answer holds, whatever it asks
FETCH_MAX_BYTES = 57_671_680
#: the longest a Fetch waits for min_bytes (a client asks for its fetch.wait.max.ms)
MAX_WAIT_MS = 30_000
#: how often a waiting Fetch looks for a log that grew
GROWTH_POLL_S = 0.2

READ_ONLY = "kafkalog serve is read-only"


class Handlers:
    """Answers requests (``answer(request)`` -> response body dict, or None for none) from
    ``catalog`` (the served partitions) and ``groups`` (the ``GroupCoordinator``).
    ``address()`` gives the (host, port) clients are told to connect to; ``wait(seconds)``
    sleeps unless the server is closing (returns True then)."""

    def __init__(self, catalog, groups, address, wait, cluster_id):
        self.catalog = catalog
        self.groups = groups
        self.address = address
        self.wait = wait
        self.cluster_id = cluster_id
        by_key = {
            0: self.produce, 1: self.fetch, 2: self.list_offsets, 3: self.metadata,
            8: lambda r: groups.commit(r.body, r.api_version),
            9: lambda r: groups.fetch_offsets(r.body, r.api_version),
            10: self.find_coordinator,
            11: lambda r: groups.join(r.body, r.api_version, r.client_id),
            12: lambda r: groups.heartbeat(r.body),
            13: lambda r: groups.leave(r.body, r.api_version),
            14: lambda r: groups.sync(r.body),
            18: self.api_versions, 19: self.create_topics, 20: self.delete_topics,
            21: self.delete_records, 22: self.init_producer_id, 32: self.describe_configs,
            60: self.describe_cluster,
        }
        self._by_key = by_key

    def answer(self, request):
        """The response body to ``request``, None when none is sent (the connection is
        closed: a Produce with acks=0, as a broker)."""
        return self._by_key[request.api_key](request)

    # ------------------------------------------------------------------ cluster
    def api_versions(self, request):
        return api_versions_body(request)

    def _broker(self, id_field="nodeId"):
        host, port = self.address()
        return {id_field: NODE_ID, "host": host, "port": port, "rack": None}

    def describe_cluster(self, request):
        return {"throttleTimeMs": 0, "errorCode": NONE, "errorMessage": None,
                "endpointType": 1, "clusterId": self.cluster_id, "controllerId": NODE_ID,
                "brokers": [self._broker("brokerId")]}

    def metadata(self, request):
        body, version = request.body, request.api_version
        topics = self.catalog.topics
        wanted = body.get("topics")
        if wanted is None or (version == 0 and not wanted):
            names = sorted(topics)
        else:
            names = []
            for t in wanted:
                name = t.get("name")
                if name is None and t.get("topicId") is not None:
                    name = self.catalog.topics_by_id.get(t["topicId"])
                names.append(name)
        out = []
        for name in names:
            served = topics.get(name) if name is not None else None
            if served is None:
                out.append({"errorCode": UNKNOWN_TOPIC_OR_PARTITION,
                            "name": name if name is not None or version >= 12 else "",
                            "isInternal": False, "partitions": []})
                continue
            partitions = []
            # Clients number partitions 0..n-1: one missing from the served data is listed
            # as offline (no leader), as a broker lists a partition whose replicas are down.
            for index in range(max(served) + 1):
                here = index in served
                partitions.append({
                    "errorCode": NONE if here else LEADER_NOT_AVAILABLE,
                    "partitionIndex": index, "leaderId": NODE_ID if here else -1,
                    # no epoch: clients then skip the leader-epoch validation of KIP-320
                    "leaderEpoch": -1, "replicaNodes": [NODE_ID] if here else [],
                    "isrNodes": [NODE_ID] if here else [],
                    "offlineReplicas": []})
            out.append({"errorCode": NONE, "name": name,
                        "topicId": self.catalog.topic_ids[name],
                        "isInternal": name in INTERNAL_TOPICS, "partitions": partitions})
        return {"throttleTimeMs": 0, "brokers": [self._broker()], "clusterId": self.cluster_id,
                "controllerId": NODE_ID, "topics": out}

    def find_coordinator(self, request):
        body, version = request.body, request.api_version
        host, port = self.address()
        transactions = body.get("keyType", 0) == 1

        def one(key):
            if transactions:      # no transactional producer writes here
                return {"key": key, "errorCode": TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                        "errorMessage": READ_ONLY, "nodeId": -1, "host": "", "port": -1}
            return {"key": key, "errorCode": NONE, "errorMessage": None, "nodeId": NODE_ID,
                    "host": host, "port": port}
        if version >= 4:
            return {"throttleTimeMs": 0,
                    "coordinators": [one(k) for k in body.get("coordinatorKeys") or ()]}
        answer = one(body.get("key"))
        del answer["key"]
        answer["throttleTimeMs"] = 0
        return answer

    def describe_configs(self, request):
        results = []
        for r in request.body.get("resources") or ():
            result = {"errorCode": NONE, "errorMessage": None,
                      "resourceType": r["resourceType"], "resourceName": r["resourceName"],
                      "configs": []}
            if r["resourceType"] == 2:           # TOPIC
                served = self.catalog.topics.get(r["resourceName"])
                if served is None:
                    result["errorCode"] = UNKNOWN_TOPIC_OR_PARTITION
                else:
                    keys = r.get("configurationKeys")
                    config = served[min(served)].primary.config.to_dict()
                    result["configs"] = [
                        {"name": k, "value": None if v is None else
                         str(v).lower() if isinstance(v, bool) else str(v),
                         # the log's settings: Kafka's defaults (no topic config is read)
                         "readOnly": True, "isDefault": True, "configSource": 5,
                         "isSensitive": False, "synonyms": []}
                        for k, v in sorted(config.items()) if keys is None or k in keys]
            results.append(result)
        return {"throttleTimeMs": 0, "results": results}

    # ------------------------------------------------------------------ data
    def list_offsets(self, request):
        body = request.body
        committed = body.get("isolationLevel", 0) == 1
        topics = []
        for t in body.get("topics") or ():
            parts = []
            for p in t.get("partitions") or ():
                index = p["partitionIndex"]
                out = {"partitionIndex": index, "errorCode": NONE, "timestamp": -1,
                       "offset": -1, "leaderEpoch": -1}
                served = self.catalog.get(t["name"], index)
                if served is None:
                    out["errorCode"] = UNKNOWN_TOPIC_OR_PARTITION
                else:
                    try:
                        out["timestamp"], out["offset"] = self._offset_for(
                            served, p["timestamp"], committed)
                    except KafkaLogError as e:
                        log.warning("ListOffsets of %s-%d: %s", t["name"], index, e)
                        out["errorCode"] = KAFKA_STORAGE_ERROR
                parts.append(out)
            topics.append({"name": t["name"], "partitions": parts})
        return {"throttleTimeMs": 0, "topics": topics}

    @staticmethod
    def _offset_for(served, timestamp, committed):
        """(timestamp, offset) ListOffsets answers; (-1, -1) when no record is that late.
        Offsets a consumer may not read yet (at or past the high watermark, or the LSO for
        read_committed) are not answered, as a broker does."""
        start, high_watermark, lso, _ = served.offsets()
        fetchable = lso if committed else high_watermark
        if timestamp == LATEST:
            return (-1, fetchable)
        if timestamp == EARLIEST:
            return (-1, start)
        if timestamp == MAX_TIMESTAMP:
            best = None
            for log_, first, end in served.ranges():
                for segment in log_.segments:
                    found = (segment.max_timestamp_so_far, segment.offset_of_max_timestamp_so_far)
                    if found[1] >= first and (end is None or found[1] < end) and \
                            found[1] < fetchable and (best is None or found[0] > best[0]):
                        best = found
            return (-1, -1) if best is None else best
        for log_, first, end in served.ranges():
            found = log_.offset_for_timestamp(timestamp)
            if found is not None and found[0] >= first and (end is None or found[0] < end):
                return (found[1], found[0]) if found[0] < fetchable else (-1, -1)
        return (-1, -1)

    def fetch(self, request):
        body = request.body
        isolation = "committed" if body.get("isolationLevel", 0) == 1 else "high_watermark"
        max_bytes = min(body.get("maxBytes", FETCH_MAX_BYTES), FETCH_MAX_BYTES)
        wait_ms = min(max(body.get("maxWaitMs", 0), 0), MAX_WAIT_MS)
        deadline = time.monotonic() + wait_ms / 1000
        min_bytes = body.get("minBytes", 0)
        while True:
            responses, size, errors, touched = self._fetch_once(body, isolation, max_bytes)
            if size >= min_bytes or errors:
                break
            # until the deadline, or until a log it reads grows (a broker still writing)
            grew = False
            while not grew:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self.wait(min(remaining, GROWTH_POLL_S)):
                    break
                grew = any([p.refresh() for p in touched])  # noqa: C419 (each one refreshed)
            if not grew:
                break
        return {"throttleTimeMs": 0, "errorCode": NONE, "sessionId": 0,
                "responses": responses}

    def _fetch_once(self, body, isolation, max_bytes):
        """(topic responses, bytes of records, whether any partition failed, the
        ``ServedPartition``s read). As from Fetch v3 (the codec has v4+), the limits are
        soft: the first batch of the first partition with data goes whole."""
        responses, touched = [], []
        min_one = True
        size, errors = 0, False
        for t in body.get("topics") or ():
            name = t["topic"]
            parts = []
            for p in t.get("partitions") or ():
                index = p["partition"]
                out = {"partitionIndex": index, "errorCode": NONE, "highWatermark": -1,
                       "lastStableOffset": -1, "logStartOffset": -1,
                       "abortedTransactions": None, "preferredReadReplica": -1,
                       "records": b""}
                parts.append(out)
                served = self.catalog.get(name, index)
                if served is None:
                    out["errorCode"] = UNKNOWN_TOPIC_OR_PARTITION
                    errors = True
                    continue
                touched.append(served)
                try:
                    start, high_watermark, lso, _ = served.offsets()
                    out.update(highWatermark=high_watermark, lastStableOffset=lso,
                               logStartOffset=start)
                    limit = min(p["partitionMaxBytes"], max(0, max_bytes - size))
                    info = served.read(p["fetchOffset"], limit, isolation, min_one)
                except OffsetOutOfRangeError:
                    out["errorCode"] = OFFSET_OUT_OF_RANGE
                    errors = True
                    continue
                except KafkaLogError as e:
                    log.warning("Fetch of %s-%d at %d: %s", name, index, p["fetchOffset"], e)
                    out["errorCode"] = KAFKA_STORAGE_ERROR
                    errors = True
                    continue
                records = info.records
                if isolation == "committed":
                    out["abortedTransactions"] = [
                        {"producerId": a.producer_id, "firstOffset": a.first_offset}
                        for a in info.aborted_transactions or ()]
                if len(records):
                    out["records"] = records
                    size += len(records)
                    min_one = False          # only the first partition with data may exceed
            responses.append({"topic": name, "partitions": parts})
        return responses, size, errors, touched

    # ------------------------------------------------------------------ refused writes
    def produce(self, request):
        body = request.body
        if body.get("acks") == 0:
            return None          # no answer; the server closes the connection (as a broker)
        return {"throttleTimeMs": 0, "responses": [
            {"name": t["name"], "partitionResponses": [
                {"index": p["index"], "errorCode": TOPIC_AUTHORIZATION_FAILED,
                 "baseOffset": -1, "logAppendTimeMs": -1, "logStartOffset": -1,
                 "recordErrors": [], "errorMessage": READ_ONLY}
                for p in t.get("partitionData") or ()]}
            for t in body.get("topicData") or ()]}

    def create_topics(self, request):
        return {"throttleTimeMs": 0, "topics": [
            {"name": t["name"], "errorCode": TOPIC_AUTHORIZATION_FAILED,
             "errorMessage": READ_ONLY, "numPartitions": -1, "replicationFactor": -1,
             "configs": None}
            for t in request.body.get("topics") or ()]}

    def delete_topics(self, request):
        body = request.body
        if request.api_version >= 6:
            names = [(t.get("name"), t.get("topicId")) for t in body.get("topics") or ()]
        else:
            names = [(n, None) for n in body.get("topicNames") or ()]
        return {"throttleTimeMs": 0, "responses": [
            {"name": n, "topicId": i, "errorCode": TOPIC_AUTHORIZATION_FAILED,
             "errorMessage": READ_ONLY} for n, i in names]}

    def delete_records(self, request):
        return {"throttleTimeMs": 0, "topics": [
            {"name": t["name"], "partitions": [
                {"partitionIndex": p["partitionIndex"], "lowWatermark": -1,
                 "errorCode": TOPIC_AUTHORIZATION_FAILED}
                for p in t.get("partitions") or ()]}
            for t in request.body.get("topics") or ()]}

    def init_producer_id(self, request):
        code = CLUSTER_AUTHORIZATION_FAILED if request.body.get("transactionalId") is None \
            else TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        return {"throttleTimeMs": 0, "errorCode": code, "producerId": -1, "producerEpoch": -1}
