"""The filters of a query that planning and reading apply (``Pushdown``): Spark's filters on
``topic``, ``partition``, ``offset`` and ``timestamp``, read from PySpark's filter objects by
class name and attributes, so this module does not import pyspark."""
from __future__ import annotations

import datetime
from typing import Any, Iterable

EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)   # Spark's timestamps' zero
# timestamp is not among them: Kafka 0.7 messages have none (null in their rows)
_NEVER_NULL = frozenset({"topic", "partition", "offset", "timestampType"})
_BELOW_EVERY_TIMESTAMP = -(2 ** 63)
_MAX_OFFSET_RUNS = 256        # an IN list of more runs of offsets is planned as one span


class Pushdown:
    """The filters of a query on ``topic``, ``partition``, ``offset`` and ``timestamp`` that
    planning and reading apply (their conjunction), all exact: the rows read are those the
    filters keep.

    ``topics``/``partitions``: the values kept (None: all), ``no_topics``/``no_partitions``:
    values excluded; offsets in ``[offset_lo, offset_hi)`` and, when ``offset_in`` is not None,
    in that sorted tuple; timestamps (Kafka's milliseconds) in ``[ts_lo, ts_hi)``. None bounds
    are open.

    Planning keeps only the partitions the filters keep, intersects each partition's offset
    range (from ``startingOffsets``/``endingOffsets`` & co.) with the offset filters, and raises
    its start to the first offset whose record has a timestamp >= ``ts_lo`` (the engine's
    ``offset_for_timestamp``, i.e. Kafka's time index); reading skips batches whose max
    timestamp is below ``ts_lo`` or that hold no offset kept, and masks rows. Filters never
    change which option errors are raised: the options are resolved for every partition first.
    """

    def __init__(self) -> None:
        self.topics: frozenset[str] | None = None
        self.partitions: frozenset[int] | None = None
        self.no_topics: frozenset[str] = frozenset()
        self.no_partitions: frozenset[int] = frozenset()
        self.offset_lo = 0
        self.offset_hi: int | None = None
        self.offset_in: tuple[int, ...] | None = None
        self.ts_lo: int | None = None
        self.ts_hi: int | None = None

    def __repr__(self) -> str:
        return "Pushdown(%s)" % ", ".join(f"{k}={v!r}" for k, v in vars(self).items()
                                          if v not in (None, frozenset()) and
                                          not (k == "offset_lo" and v == 0))

    # ---------------------------------------------------------------- from Spark's filters
    @classmethod
    def from_filters(cls, filters: Iterable[Any]) -> tuple[Pushdown, list[Any]]:
        """(the pushdown of ``filters``, the filters it does not handle) for PySpark's
        ``pyspark.sql.datasource.Filter`` objects (read by class name, attribute and value,
        so this module does not import pyspark). Unhandled filters are returned in order and
        are the very objects given, as ``DataSourceReader.pushFilters`` must return them."""
        pushdown = cls()
        unhandled = [f for f in filters if not pushdown.add(f)]
        return pushdown, unhandled

    def add(self, f: Any) -> bool:
        """Apply one PySpark filter; False (nothing changed) when it is not handled exactly."""
        kind = type(f).__name__
        negated = kind == "Not"
        if negated:
            f = getattr(f, "child", None)
            kind = type(f).__name__
        column = getattr(f, "attribute", None)
        if not isinstance(column, tuple) or len(column) != 1:
            return False
        column = column[0]
        if kind == "IsNotNull" and not negated:
            if column == "timestamp":
                # only Kafka 0.7 messages have none: a bound below every timestamp drops them
                # (a 0.7 task reads nothing under a bound) and keeps every 0.8+ row
                self.ts_lo = _BELOW_EVERY_TIMESTAMP if self.ts_lo is None else self.ts_lo
                return True
            return column in _NEVER_NULL
        if not hasattr(f, "value"):
            return False
        value = f.value
        if column == "topic":
            return self._add_key_filter("topics", kind, value, negated, str)
        if column == "partition":
            return self._add_key_filter("partitions", kind, value, negated, int)
        if negated:
            return False
        if column == "offset":
            return self._add_offset(kind, value)
        if column == "timestamp":
            return self._add_timestamp(kind, value)
        return False

    def _add_key_filter(self, name, kind, value, negated, type_):
        if kind in ("EqualTo", "EqualNullSafe"):
            values = (value,)
        elif kind == "In" and isinstance(value, (tuple, list)):
            values = tuple(v for v in value if v is not None)   # NULL matches nothing
        else:
            return False
        if not all(_is(v, type_) for v in values):
            return False
        if negated:
            if kind == "In" and len(values) != len(value):
                return False        # NOT IN with a NULL keeps no row (SQL): leave it to Spark
            setattr(self, "no_" + name, getattr(self, "no_" + name) | frozenset(values))
        else:
            current = getattr(self, name)
            kept = frozenset(values)
            setattr(self, name, kept if current is None else current & kept)
        return True

    def _add_offset(self, kind, value):
        if kind == "In" and isinstance(value, (tuple, list)):
            values = [v for v in value if v is not None]
            if not all(_is(v, int) for v in values):
                return False
            kept = set(values)
            if self.offset_in is not None:
                kept &= set(self.offset_in)
            self.offset_in = tuple(sorted(kept))
            return True
        if not _is(value, int):
            return False
        if kind in ("EqualTo", "EqualNullSafe"):
            self._raise_lo(value)
            self._lower_hi(value + 1)
        elif kind == "GreaterThan":
            self._raise_lo(value + 1)
        elif kind == "GreaterThanOrEqual":
            self._raise_lo(value)
        elif kind == "LessThan":
            self._lower_hi(value)
        elif kind == "LessThanOrEqual":
            self._lower_hi(value + 1)
        else:
            return False
        return True

    def _raise_lo(self, offset):
        self.offset_lo = max(self.offset_lo, offset)

    def _lower_hi(self, offset):
        self.offset_hi = offset if self.offset_hi is None else min(self.offset_hi, offset)

    def _add_timestamp(self, kind, value):
        micros = _epoch_micros(value)
        if micros is None:
            return False
        # Spark's timestamps are microseconds, Kafka's milliseconds: ms * 1000 >= us etc.
        ceil_ms, floor_ms = -(-micros // 1000), micros // 1000
        if kind in ("EqualTo", "EqualNullSafe"):
            lo, hi = ceil_ms, floor_ms + 1
        elif kind == "GreaterThan":
            lo, hi = floor_ms + 1, None
        elif kind == "GreaterThanOrEqual":
            lo, hi = ceil_ms, None
        elif kind == "LessThan":
            lo, hi = None, ceil_ms
        elif kind == "LessThanOrEqual":
            lo, hi = None, floor_ms + 1
        else:
            return False
        if lo is not None:
            self.ts_lo = lo if self.ts_lo is None else max(self.ts_lo, lo)
        if hi is not None:
            self.ts_hi = hi if self.ts_hi is None else min(self.ts_hi, hi)
        return True

    # ------------------------------------------------------------------------- planning
    def keeps(self, key: tuple[str, int]) -> bool:
        """Whether the filters keep any row of topic-partition ``key``."""
        topic, partition = key
        return ((self.topics is None or topic in self.topics) and topic not in self.no_topics
                and (self.partitions is None or partition in self.partitions)
                and partition not in self.no_partitions)

    def offset_ranges(self, start: int, end: int) -> list[tuple[int, int]]:
        """The offset ranges ``[lo, hi)`` within ``[start, end)`` the offset filters keep, in
        order and disjoint (runs of consecutive ``offset_in`` values; one span over them when
        there are more than ``_MAX_OFFSET_RUNS``: rows are masked by the values anyway)."""
        lo = max(start, self.offset_lo)
        hi = end if self.offset_hi is None else min(end, self.offset_hi)
        if lo >= hi:
            return []
        if self.offset_in is None:
            return [(lo, hi)]
        values = [v for v in self.offset_in if lo <= v < hi]
        runs: list[tuple[int, int]] = []
        for v in values:
            if runs and runs[-1][1] == v:
                runs[-1] = (runs[-1][0], v + 1)
            else:
                runs.append((v, v + 1))
        if len(runs) > _MAX_OFFSET_RUNS:
            return [(runs[0][0], runs[-1][1])]
        return runs

    def task_fields(self) -> dict[str, Any]:
        """What the reader applies to rows (JSON-able)."""
        return {"ts_lo": self.ts_lo, "ts_hi": self.ts_hi,
                "offset_in": None if self.offset_in is None else list(self.offset_in)}


def _is(value, type_):
    return isinstance(value, type_) and not isinstance(value, bool)


def _epoch_micros(value):
    """Microseconds since the epoch of a timezone-aware ``datetime`` (Spark's TimestampType
    literal), else None (a naive one, i.e. TIMESTAMP_NTZ, is not compared here)."""
    if not isinstance(value, datetime.datetime) or value.tzinfo is None:
        return None
    delta = value - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
