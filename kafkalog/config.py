"""``LogConfig``: Kafka's topic-level log settings, with Kafka's names and defaults."""
import os

from kafkalog.errors import InvalidConfigError

LONG_MAX = 2**63 - 1


def _long(name, value, minimum=None, allowed=()):
    try:
        v = int(value)
    except (TypeError, ValueError):
        raise InvalidConfigError(f"invalid value {value!r} for {name}: expected an integer") \
            from None
    if isinstance(value, float) and value != v or isinstance(value, bool):
        raise InvalidConfigError(f"invalid value {value!r} for {name}: expected an integer")
    if v in allowed:
        return v
    if minimum is not None and v < minimum:
        raise InvalidConfigError(f"invalid value {v} for {name}: must be at least {minimum}")
    return v


def _ratio(name, value):
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise InvalidConfigError(f"invalid value {value!r} for {name}: expected a number") \
            from None
    if not 0.0 <= v <= 1.0:
        raise InvalidConfigError(f"invalid value {v} for {name}: must be between 0 and 1")
    return v


def _bool(name, value):
    if isinstance(value, bool):
        return value
    if str(value).lower() in ("true", "false"):
        return str(value).lower() == "true"
    raise InvalidConfigError(f"invalid value {value!r} for {name}: expected true or false")


def _choice(*choices):
    def check(name, value):
        if value not in choices:
            raise InvalidConfigError(f"invalid value {value!r} for {name}: expected one of "
                                     f"{', '.join(choices)}")
        return value
    return check


def _policy(name, value):
    parts = [p.strip() for p in (value.split(",") if isinstance(value, str) else value)]
    if not parts or any(p not in ("delete", "compact") for p in parts):
        raise InvalidConfigError(f"invalid value {value!r} for {name}: expected delete, compact "
                                 f"or both")
    return ",".join(parts)


# name: (default, validator)
_SETTINGS = {
    "segment.bytes": (1024 * 1024 * 1024, lambda n, v: _long(n, v, 14)),
    "segment.ms": (7 * 24 * 3600 * 1000, lambda n, v: _long(n, v, 1)),
    "segment.jitter.ms": (0, lambda n, v: _long(n, v, 0)),
    "segment.index.bytes": (10 * 1024 * 1024, lambda n, v: _long(n, v, 4)),
    "index.interval.bytes": (4096, lambda n, v: _long(n, v, 0)),
    "retention.ms": (7 * 24 * 3600 * 1000, lambda n, v: _long(n, v, 0, allowed=(-1,))),
    "retention.bytes": (-1, lambda n, v: _long(n, v)),
    "flush.messages": (LONG_MAX, lambda n, v: _long(n, v, 1)),
    "flush.ms": (LONG_MAX, lambda n, v: _long(n, v, 0)),
    "file.delete.delay.ms": (60000, lambda n, v: _long(n, v, 0)),
    "message.timestamp.type": ("CreateTime", _choice("CreateTime", "LogAppendTime")),
    "message.timestamp.before.max.ms": (LONG_MAX, lambda n, v: _long(n, v, 0)),
    "message.timestamp.after.max.ms": (LONG_MAX, lambda n, v: _long(n, v, 0)),
    "max.message.bytes": (1024 * 1024 + 12, lambda n, v: _long(n, v, 0)),
    "cleanup.policy": ("delete", _policy),
    "min.cleanable.dirty.ratio": (0.5, _ratio),
    "min.compaction.lag.ms": (0, lambda n, v: _long(n, v, 0)),
    "max.compaction.lag.ms": (LONG_MAX, lambda n, v: _long(n, v, 1)),
    "delete.retention.ms": (24 * 3600 * 1000, lambda n, v: _long(n, v, 0)),
    "compression.type": ("producer", _choice("producer", "uncompressed", "gzip", "snappy",
                                              "lz4", "zstd")),
    "preallocate": (False, _bool),
}


class LogConfig:
    """Topic-level log settings (Kafka's names, Kafka's defaults).

    ``LogConfig({"segment.bytes": 1048576})``, ``LogConfig.from_properties(path)``;
    read a value with ``config["segment.bytes"]`` or the attribute ``config.segment_bytes``.
    Unknown names and invalid values raise ``InvalidConfigError``.
    """
    __slots__ = ("_values",)

    def __init__(self, values=None, **overrides):
        merged = dict(values or {})
        merged.update({k.replace("_", "."): v for k, v in overrides.items()})
        unknown = sorted(set(merged) - set(_SETTINGS))
        if unknown:
            raise InvalidConfigError(f"unknown log config {', '.join(unknown)}; known: "
                                     f"{', '.join(sorted(_SETTINGS))}")
        self._values = {}
        for name, (default, check) in _SETTINGS.items():
            self._values[name] = check(name, merged[name]) if name in merged else default
        if self._values["segment.jitter.ms"] < 0:
            raise InvalidConfigError("segment.jitter.ms must not be negative")

    @classmethod
    def from_properties(cls, path):
        """Read a Kafka ``.properties`` file of topic settings (``name=value`` lines)."""
        values = {}
        with open(os.fspath(path), encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                line = line.strip()
                if not line or line[0] in "#!":
                    continue
                sep = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
                if sep < 0:
                    raise InvalidConfigError(f"{path}:{number}: expected name=value")
                values[line[:sep].strip()] = line[sep + 1:].strip()
        return cls(values)

    def with_overrides(self, values):
        merged = dict(self._values)
        merged.update(values or {})
        return LogConfig(merged)

    def __getitem__(self, name):
        return self._values[name]

    def __getattr__(self, attr):
        try:
            return self._values[attr.replace("_", ".")]
        except KeyError:
            raise AttributeError(attr) from None

    def to_dict(self):
        return dict(self._values)

    @property
    def delete_enabled(self):
        return "delete" in self._values["cleanup.policy"].split(",")

    @property
    def compact_enabled(self):
        return "compact" in self._values["cleanup.policy"].split(",")

    @property
    def max_index_size(self):
        return self._values["segment.index.bytes"]

    def random_segment_jitter(self, rng):
        """Kafka's roll jitter: random % min(segment.jitter.ms, segment.ms), or 0."""
        jitter = self._values["segment.jitter.ms"]
        if jitter == 0:
            return 0
        return rng.randrange(2**63) % min(jitter, self._values["segment.ms"])

    def __eq__(self, other):
        return isinstance(other, LogConfig) and self._values == other._values

    def __repr__(self):
        changed = {k: v for k, v in self._values.items() if v != _SETTINGS[k][0]}
        return f"LogConfig({changed})"
