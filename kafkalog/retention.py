"""Retention policies: which of a log's oldest segments may be deleted.

The log walks its segments from the oldest and stops at the first one a policy does not
release; a segment is only ever released when the high watermark is at or past its end and
it is not an empty active segment. Kafka's three policies are implemented through the same
interface users implement their own with. ``breached_policies`` and ``deletable_segments``
are ``Log.delete_old_segments``' choice of what goes (Kafka's ``UnifiedLog.deleteOldSegments``
and ``deletableSegments``); the log deletes it and moves its offsets.
"""
from __future__ import annotations


class RetentionPolicy:
    """A retention policy: ``predicate(log, now_ms)`` returns a function of
    ``(segment, next_segment)`` (``next_segment`` is None for the last one) that says whether
    the segment may go, or None when the policy releases nothing now. ``reason`` names it in
    logs. A plain function ``f(log, now_ms) -> predicate or None`` works as a policy too.
    ``requires_delete_policy``: applies only when ``cleanup.policy`` includes delete."""
    reason = "custom retention"
    requires_delete_policy = True

    def predicate(self, log, now_ms):
        raise NotImplementedError


class LogStartOffsetRetention(RetentionPolicy):
    """Segments wholly below the log start offset (moved by ``delete_records``)."""
    reason = "log start offset breach"
    requires_delete_policy = False

    def predicate(self, log, now_ms):
        start = log.log_start_offset
        return lambda segment, nxt: nxt is not None and nxt.base_offset <= start


class TimeRetention(RetentionPolicy):
    """``retention.ms``: segments whose largest timestamp (else file time) is older."""
    reason = "retention time breach"

    def __init__(self, retention_ms=None):
        self.retention_ms = retention_ms

    def predicate(self, log, now_ms):
        retention = log.config["retention.ms"] if self.retention_ms is None else self.retention_ms
        if retention < 0:
            return None
        return lambda segment, nxt: now_ms - segment.largest_timestamp > retention


class SizeRetention(RetentionPolicy):
    """``retention.bytes``: the oldest segments while the log stays at or above the limit
    without them."""
    reason = "retention size breach"

    def __init__(self, retention_bytes=None):
        self.retention_bytes = retention_bytes

    def predicate(self, log, now_ms):
        retention = log.config["retention.bytes"] if self.retention_bytes is None \
            else self.retention_bytes
        size = log.size
        if retention < 0 or size < retention:
            return None
        excess = [size - retention]

        def releasable(segment, nxt):
            if excess[0] - segment.size >= 0:
                excess[0] -= segment.size
                return True
            return False
        return releasable


class SegmentCountRetention(RetentionPolicy):
    """Keep at most ``max_segments`` segments (an example of a policy of one's own)."""
    reason = "segment count breach"

    def __init__(self, max_segments):
        if max_segments < 1:
            raise ValueError("max_segments must be at least 1")
        self.max_segments = max_segments

    def predicate(self, log, now_ms):
        excess = [len(log.segments) - self.max_segments]
        if excess[0] <= 0:
            return None

        def releasable(segment, nxt):
            excess[0] -= 1
            return excess[0] >= 0
        return releasable


KAFKA_POLICIES = (LogStartOffsetRetention(), SizeRetention(), TimeRetention())


def breached_policies(log, policies, now_ms):
    """(predicate, reason) of each policy that releases something now: Kafka's, then
    ``policies`` in order; each is asked after the segments of the one before are gone."""
    for policy in KAFKA_POLICIES + tuple(policies):
        if getattr(policy, "requires_delete_policy", True) and not log.config.delete_enabled:
            continue
        make = policy.predicate if hasattr(policy, "predicate") else policy
        predicate = make(log, now_ms)
        if predicate is not None:
            yield predicate, getattr(policy, "reason", "retention")


def deletable_segments(log, predicate):
    """The oldest segments of ``log`` that ``predicate`` releases, up to the first it keeps,
    the high watermark has not passed, or that is an empty active segment."""
    segments = log.segments
    high_watermark = log.high_watermark
    deletable = []
    for segment, upper in segments.with_bounds(log.log_end_offset):
        nxt = segments.higher(segment.base_offset)
        last_and_empty = nxt is None and segment.size == 0
        if high_watermark >= upper and not last_and_empty and predicate(segment, nxt):
            deletable.append(segment)
        else:
            break
    return deletable
