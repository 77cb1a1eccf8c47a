"""``LogConfig``: Kafka's topic-level settings, with Kafka's names, defaults and validation.

Every name of Kafka 4's topic config (``TopicConfig`` plus the replication-throttle lists of
``LogConfig``) is accepted. The settings the log engine applies are listed in ``APPLIED``; the
rest (replication, tiered storage, compression levels, ...) are validated as Kafka validates
them, kept, readable through ``config[name]`` and listed in ``IGNORED``.
"""
from __future__ import annotations

import math
import numbers
import os
import re
from typing import TYPE_CHECKING, Any, Mapping

import javaproperties

from kafkalog.errors import InvalidConfigError, with_closest

if TYPE_CHECKING:
    import random

    from kafkalog._typing import StrPath

INT_MIN, INT_MAX = -2**31, 2**31 - 1
LONG_MIN, LONG_MAX = -2**63, 2**63 - 1

# What Java's Long.parseLong accepts; one item of a throttled-replica list.
_DECIMAL = re.compile(r"[+-]?[0-9]+\Z")
_REPLICA = re.compile(r"([0-9]+:[0-9]+)?\Z")


def _integer(name, value, lo, hi, kind):
    """A Kafka INT or LONG: an int, an integral float or a decimal string, within its type."""
    if isinstance(value, bool):
        v = None
    elif isinstance(value, numbers.Integral):        # int, numpy integers
        v = int(value)
    elif isinstance(value, float) and value.is_integer():
        v = int(value)
    elif isinstance(value, str) and _DECIMAL.match(value.strip()):
        v = int(value.strip())
    else:
        v = None
    if v is None or not lo <= v <= hi:
        raise InvalidConfigError(f"invalid value {value!r} for {name}: expected {kind}")
    return v


def _int(minimum=INT_MIN, maximum=INT_MAX, also=()):
    """Kafka's INT type with ``atLeast(minimum)`` / ``between(minimum, maximum)``; values in
    ``also`` are allowed outside the range (gzip's -1 for "the codec's default")."""
    def check(name, value):
        v = _integer(name, value, INT_MIN, INT_MAX, "a 32-bit integer")
        if v not in also and not minimum <= v <= maximum:
            raise InvalidConfigError(f"invalid value {v} for {name}: "
                                     f"{_range_text(minimum, maximum, INT_MAX, also)}")
        return v
    return check


def _long(minimum=LONG_MIN):
    """Kafka's LONG type with ``atLeast(minimum)``."""
    def check(name, value):
        v = _integer(name, value, LONG_MIN, LONG_MAX, "a 64-bit integer")
        if v < minimum:
            raise InvalidConfigError(f"invalid value {v} for {name}: must be at least {minimum}")
        return v
    return check


def _range_text(minimum, maximum, top, also):
    text = f"must be at least {minimum}" if maximum == top else \
        f"must be between {minimum} and {maximum}"
    return text + "".join(f" or {a}" for a in also)


def _ratio(name, value):
    """Kafka's DOUBLE with ``between(0, 1)``."""
    try:
        v = float(value.strip() if isinstance(value, str) else value)
    except (TypeError, ValueError):
        raise InvalidConfigError(f"invalid value {value!r} for {name}: expected a number") \
            from None
    if isinstance(value, bool) or math.isnan(v) or not 0.0 <= v <= 1.0:
        raise InvalidConfigError(f"invalid value {value!r} for {name}: must be between 0 and 1")
    return v


def _bool(name, value):
    """Kafka's BOOLEAN: true or false (any case)."""
    if isinstance(value, bool):
        return value
    text = value.strip().lower() if isinstance(value, str) else None
    if text not in ("true", "false"):
        raise InvalidConfigError(f"invalid value {value!r} for {name}: expected true or false")
    return text == "true"


def _choice(*choices):
    """Kafka's STRING with ``ValidString.in(choices)`` (case-sensitive, trimmed)."""
    def check(name, value):
        text = value.strip() if isinstance(value, str) else value
        if text not in choices:
            raise InvalidConfigError(f"invalid value {value!r} for {name}: expected one of "
                                     f"{', '.join(choices)}")
        return text
    return check


def _items(name, value):
    """Kafka's LIST: a comma-separated string (or a sequence of strings) -> stripped items."""
    if isinstance(value, str):
        return [p.strip() for p in value.split(",")] if value.strip() else []
    if isinstance(value, (list, tuple)) and all(isinstance(p, str) for p in value):
        return [p.strip() for p in value]
    raise InvalidConfigError(f"invalid value {value!r} for {name}: expected a comma-separated "
                             f"list")


def _policy(name, value):
    """``cleanup.policy``: delete, compact, both, or (as Kafka 4 allows) neither."""
    parts = _items(name, value)
    if any(p not in ("delete", "compact") for p in parts):
        raise InvalidConfigError(f"invalid value {value!r} for {name}: expected delete, compact, "
                                 f"both, or an empty list")
    return ",".join(dict.fromkeys(parts))


def _throttled_replicas(name, value):
    """Kafka's ``ThrottledReplicaListValidator``: ``*`` or ``partition:broker`` pairs."""
    parts = _items(name, value)
    if not ("".join(parts) == "*" or all(_REPLICA.match(p) for p in parts)):
        raise InvalidConfigError(f"invalid value {value!r} for {name}: expected * or a list of "
                                 f"[partitionId]:[brokerId] pairs")
    return ",".join(parts)


DAY_MS = 24 * 3600 * 1000

# name: (Kafka's default, validator with Kafka's type and range). Kafka 4's storage
# LogConfig defines these; its broker-side synonyms (log.*) are not topic settings.
_SETTINGS = {
    # Kafka 4 raised the minimum to 1 MiB (KIP-1030) and lets its own tests go below through an
    # internal setting; kafkalog keeps Kafka 3's minimum (LegacyRecord.RECORD_OVERHEAD_V0) so
    # small segments stay possible for embedded logs and tests.
    "segment.bytes": (1024 * 1024 * 1024, _int(14)),
    "segment.ms": (7 * DAY_MS, _long(1)),
    "segment.jitter.ms": (0, _long(0)),
    "segment.index.bytes": (10 * 1024 * 1024, _int(4)),
    "flush.messages": (LONG_MAX, _long(1)),
    "flush.ms": (LONG_MAX, _long(0)),
    "retention.bytes": (-1, _long()),
    "retention.ms": (7 * DAY_MS, _long(-1)),
    "max.message.bytes": (1024 * 1024 + 12, _int(0)),
    "index.interval.bytes": (4096, _int(0)),
    "delete.retention.ms": (DAY_MS, _long(0)),
    "min.compaction.lag.ms": (0, _long(0)),
    "max.compaction.lag.ms": (LONG_MAX, _long(1)),
    "file.delete.delay.ms": (60000, _long(0)),
    "min.cleanable.dirty.ratio": (0.5, _ratio),
    "cleanup.policy": ("delete", _policy),
    "unclean.leader.election.enable": (False, _bool),
    "min.insync.replicas": (1, _int(1)),
    "compression.type": ("producer", _choice("uncompressed", "zstd", "lz4", "snappy", "gzip",
                                              "producer")),
    # Kafka's codec level ranges: gzip 1-9 or -1 (zlib's default), lz4 1-17, zstd
    # ZSTD_minCLevel()..ZSTD_maxCLevel().
    "compression.gzip.level": (-1, _int(1, 9, also=(-1,))),
    "compression.lz4.level": (9, _int(1, 17)),
    "compression.zstd.level": (3, _int(-131072, 22)),
    "preallocate": (False, _bool),
    "message.timestamp.type": ("CreateTime", _choice("CreateTime", "LogAppendTime")),
    "message.timestamp.before.max.ms": (LONG_MAX, _long(0)),
    # Kafka 4's default is 3600000 (KIP-1030); kafkalog keeps Kafka 3's unbounded default so
    # that records copied with their original timestamps, or appended under a test clock, are
    # not refused by default. Set it to 3600000 for a broker's behaviour.
    "message.timestamp.after.max.ms": (LONG_MAX, _long(0)),
    # A no-op since Kafka 4.0 (no down-conversion), still accepted until 5.0.
    "message.downconversion.enable": (True, _bool),
    "leader.replication.throttled.replicas": ("", _throttled_replicas),
    "follower.replication.throttled.replicas": ("", _throttled_replicas),
    "remote.storage.enable": (False, _bool),
    "local.retention.ms": (-2, _long(-2)),
    "local.retention.bytes": (-2, _long(-2)),
    "remote.log.copy.disable": (False, _bool),
    "remote.log.delete.on.disable": (False, _bool),
}

#: Settings the log engine reads (roll, indexes, retention, flush, deletion delay, append
#: validation, compaction, the codec of batches built from ``Record`` objects).
APPLIED = frozenset({
    "segment.bytes", "segment.ms", "segment.jitter.ms", "segment.index.bytes",
    "flush.messages", "flush.ms", "retention.bytes", "retention.ms", "max.message.bytes",
    "index.interval.bytes", "delete.retention.ms", "min.compaction.lag.ms",
    "max.compaction.lag.ms", "file.delete.delay.ms", "min.cleanable.dirty.ratio",
    "cleanup.policy", "compression.type", "message.timestamp.type",
    "message.timestamp.before.max.ms", "message.timestamp.after.max.ms",
})

#: Settings accepted, validated and kept, but not acted on: replication and quotas (no
#: replicas here), tiered storage (no remote tier), compression levels (kafkalog builds
#: batches at fixed levels), ``preallocate`` (``.log`` files are never preallocated) and
#: ``message.downconversion.enable`` (a no-op in Kafka 4 too).
IGNORED = frozenset(_SETTINGS) - APPLIED


def _validate_together(v):
    """Kafka's checks across settings (``LogConfig.validateValues`` and, for topics with
    ``remote.storage.enable``, its remote-storage checks)."""
    if v["min.compaction.lag.ms"] > v["max.compaction.lag.ms"]:
        raise InvalidConfigError(f"conflicting settings: min.compaction.lag.ms "
                                 f"({v['min.compaction.lag.ms']}) > max.compaction.lag.ms "
                                 f"({v['max.compaction.lag.ms']})")
    if not v["remote.storage.enable"]:
        return
    if v["cleanup.policy"] not in ("", "delete"):
        raise InvalidConfigError("remote.storage.enable=true needs cleanup.policy=delete (or "
                                 "an empty cleanup.policy)")
    # -2 means "the same as retention.*"; -1 (unbounded) only where retention.* is unbounded.
    bounded = {"retention.bytes": v["retention.bytes"] > -1,
               "retention.ms": v["retention.ms"] != -1}
    for local, total in (("local.retention.bytes", "retention.bytes"),
                         ("local.retention.ms", "retention.ms")):
        if not bounded[total] or v[local] == -2:
            continue
        if v[local] == -1 or v[local] > v[total]:
            raise InvalidConfigError(f"invalid value {v[local]} for {local}: must not be -1 or "
                                     f"more than {total} ({v[total]})")
    if v["remote.log.copy.disable"]:
        for local, total in (("local.retention.bytes", "retention.bytes"),
                             ("local.retention.ms", "retention.ms")):
            if v[local] != -2 and v[local] != v[total]:
                raise InvalidConfigError(f"with remote.log.copy.disable=true, {local} must equal "
                                         f"{total} ({v[total]})")


class LogConfig:
    """Topic-level log settings (Kafka's names, Kafka's defaults and validation).

    ``LogConfig({"segment.bytes": 1048576})``, ``LogConfig.from_properties(path)``;
    read a value with ``config["segment.bytes"]`` or the attribute ``config.segment_bytes``.
    Values are kept with Kafka's types: ints, floats, bools, strings; list settings
    (``cleanup.policy``, the throttled-replica lists) as comma-separated strings. Unknown
    names and invalid values raise ``InvalidConfigError``. ``LogConfig.APPLIED`` names the
    settings kafkalog acts on, ``LogConfig.IGNORED`` the ones it accepts and keeps only.
    """
    __slots__ = ("_values",)

    APPLIED = APPLIED
    IGNORED = IGNORED
    NAMES = frozenset(_SETTINGS)

    def __init__(self, values: Mapping[str, Any] | None = None, **overrides: Any) -> None:
        merged = dict(values or {})
        merged.update({k.replace("_", "."): v for k, v in overrides.items()})
        unknown = sorted(str(k) for k in set(merged) - set(_SETTINGS))
        if unknown:
            raise InvalidConfigError(
                f"unknown log config {', '.join(with_closest(k, _SETTINGS) for k in unknown)} "
                f"(LogConfig.NAMES lists the {len(_SETTINGS)} topic settings)")
        self._values: dict[str, Any] = {}
        for name, (default, check) in _SETTINGS.items():
            self._values[name] = check(name, merged[name]) if name in merged else default
        _validate_together(self._values)

    @classmethod
    def from_properties(cls, path: StrPath) -> LogConfig:
        """Read a Kafka ``.properties`` file of topic settings.

        The file is read as ``java.util.Properties.load`` reads it (the ``javaproperties``
        package): ``=``, ``:`` or whitespace between name and value, ``#`` and ``!``
        comments, ``\\`` line continuations, escapes such as ``\\t``, ``\\=`` and
        ``\\uXXXX``; bytes are ISO-8859-1, as Kafka's ``Utils.loadProps`` reads them. A
        later line overrides an earlier one with the same name. Returns a ``LogConfig``;
        an unknown name or an invalid value raises ``InvalidConfigError``.
        """
        try:
            with open(os.fspath(path), "rb") as f:
                values = javaproperties.load(f)
        except OSError as e:
            raise InvalidConfigError(f"cannot read topic settings from {path}: {e}") from None
        except ValueError as e:      # a malformed \u escape
            raise InvalidConfigError(f"{path}: {e}") from None
        try:
            return cls(values)
        except InvalidConfigError as e:
            raise InvalidConfigError(f"{path}: {e}") from None

    @classmethod
    def of(cls, config: LogConfig | Mapping[str, Any] | StrPath | None) -> LogConfig:
        """A ``LogConfig`` from what ``Log.open`` takes: one, a mapping of settings, the path
        of a ``.properties`` file (``from_properties``) or None (the defaults)."""
        if isinstance(config, LogConfig):
            return config
        if config is None or isinstance(config, Mapping):
            return cls(config)
        return cls.from_properties(config)

    def with_overrides(self, values: Mapping[str, Any] | None) -> LogConfig:
        merged = dict(self._values)
        merged.update(values or {})
        return LogConfig(merged)

    def __getitem__(self, name: str) -> Any:
        return self._values[name]

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("_"):     # not a setting (and no recursion before _values is set)
            raise AttributeError(attr)
        try:
            return self._values[attr.replace("_", ".")]
        except KeyError:
            raise AttributeError(attr) from None

    def to_dict(self) -> dict[str, Any]:
        return dict(self._values)

    @property
    def delete_enabled(self) -> bool:
        return "delete" in self._values["cleanup.policy"].split(",")

    @property
    def compact_enabled(self) -> bool:
        return "compact" in self._values["cleanup.policy"].split(",")

    @property
    def max_index_size(self) -> int:
        return self._values["segment.index.bytes"]

    def random_segment_jitter(self, rng: random.Random) -> int:
        """Kafka's roll jitter: random % min(segment.jitter.ms, segment.ms), or 0."""
        jitter = self._values["segment.jitter.ms"]
        if jitter == 0:
            return 0
        return rng.randrange(2**63) % min(jitter, self._values["segment.ms"])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LogConfig) and self._values == other._values

    def __repr__(self) -> str:
        changed = {k: v for k, v in self._values.items() if v != _SETTINGS[k][0]}
        return f"LogConfig({changed})"
