"""Options: Spark's Kafka source names (case-insensitive) and kafkalog's own, validated as
Spark's ``KafkaSourceProvider`` validates a batch read (same cases, same messages where Spark
has one). Every failure is an ``InvalidConfigError`` (a ``ValueError``)."""
from __future__ import annotations

import json
import logging
import os
import re
import urllib.parse
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence, overload

from kafkalog import storage
from kafkalog.errors import InvalidConfigError, closest_name

if TYPE_CHECKING:
    from kafkalog._typing import StrPath

log = logging.getLogger(__name__)

STRATEGY_OPTIONS = ("subscribe", "subscribePattern", "assign")
# The options that bound the offsets read
BOUND_OPTIONS = ("startingOffsets", "endingOffsets", "startingTimestamp", "endingTimestamp",
                 "startingOffsetsByTimestamp", "endingOffsetsByTimestamp")

# Set by kafkalog.spark.read: every scan of its DataFrame pushes a filter, so pushed filters
# may prune (kafkalog.spark.datasource explains why others may not).
PRUNE_OPTION = "kafkalog.pruneByFilters"

# The options' names as written (suggested for a misspelt one), and their lower-case forms.
_SPELLED = (
    "subscribe", "subscribePattern", "assign", "startingOffsets", "endingOffsets",
    "startingTimestamp", "endingTimestamp", "startingOffsetsByTimestamp",
    "endingOffsetsByTimestamp", "startingOffsetsByTimestampStrategy", "includeHeaders",
    "minPartitions", "failOnDataLoss", "maxRecordsPerPartition",
    # kafkalog's own
    "validateCrc", "maxBytesPerTask", "readAboveHighWatermark", "path", "paths",
    "storageOptions", "rsmKeys", "parallelPlanningThreshold", PRUNE_OPTION,
    # streaming
    "maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay",
    # Spark's, ignored (_IGNORED)
    "groupIdPrefix", "fetchOffset.numRetries", "fetchOffset.retryIntervalMs",
    "kafkaConsumer.pollTimeoutMs",
)
_OPTION_NAMES = {name.lower() for name in _SPELLED}
# What Spark's catalog adds to the options of a table (CREATE TABLE ... USING kafkalog): the
# table's reserved properties (TableCatalog.PROP_*). Accepted and ignored.
_CATALOG = {"location", "owner", "provider", "comment", "external", "is_managed_location",
            "collation", "table_type"}
# Spark's Kafka source options that mean nothing for files at rest: accepted, ignored.
_IGNORED = {
    "groupidprefix": logging.INFO, "fetchoffset.numretries": logging.INFO,
    "fetchoffset.retryintervalms": logging.INFO, "kafkaconsumer.polltimeoutms": logging.INFO,
    # Spark logs these three as ignored in batch queries (streaming queries use them)
    "maxoffsetspertrigger": logging.WARNING, "minoffsetspertrigger": logging.WARNING,
    "maxtriggerdelay": logging.WARNING,
}
# Consumer settings Spark's source refuses (KafkaSourceProvider.validateGeneralOptions).
_REFUSED = {
    "kafka.auto.offset.reset":
        "Kafka option 'auto.offset.reset' is not supported. Instead set the source option "
        "'startingoffsets' to 'earliest' or 'latest' to specify where to start.",
    "kafka.key.deserializer":
        "Kafka option 'key.deserializer' is not supported as keys are deserialized as byte "
        "arrays with ByteArrayDeserializer. Use DataFrame operations to explicitly "
        "deserialize the keys.",
    "kafka.value.deserializer":
        "Kafka option 'value.deserializer' is not supported as values are deserialized as "
        "byte arrays with ByteArrayDeserializer. Use DataFrame operations to explicitly "
        "deserialize the values.",
    "kafka.enable.auto.commit": "Kafka option 'enable.auto.commit' is not supported",
    "kafka.interceptor.classes": "Kafka option 'interceptor.classes' is not supported",
}
# Limits of a streaming micro-batch; only batch queries ignore them.
_TRIGGER_OPTIONS = {"maxoffsetspertrigger", "minoffsetspertrigger", "maxtriggerdelay"}
# kafka.* settings that change what is read; every other kafka.* setting is about brokers,
# security or consumer tuning and is ignored (logged at INFO).
_USED_KAFKA = {"kafka.isolation.level", "kafka.exclude.internal.topics"}
# The consumer's settings (Kafka 4's ConsumerConfig, with its SSL and SASL client settings, and
# auto.include.jmx.reporter of 3.x): Spark's source hands kafka.* to a consumer, which would
# take them; here no consumer reads them, so any other kafka.* name is a typo and refused.
_CONSUMER_SETTINGS = frozenset("""
    allow.auto.create.topics auto.commit.interval.ms auto.include.jmx.reporter
    auto.offset.reset bootstrap.resolve.timeout.ms bootstrap.servers check.crcs client.dns.lookup
    client.id client.rack config.providers connections.max.idle.ms default.api.timeout.ms
    enable.auto.commit enable.metrics.push exclude.internal.topics fetch.max.bytes
    fetch.max.wait.ms fetch.min.bytes group.id group.instance.id group.protocol
    group.remote.assignor heartbeat.interval.ms interceptor.classes
    internal.leave.group.on.close internal.throw.on.fetch.stable.offset.unsupported
    isolation.level key.deserializer max.partition.fetch.bytes max.poll.interval.ms
    max.poll.records metadata.max.age.ms metadata.recovery.rebootstrap.trigger.ms
    metadata.recovery.strategy metric.reporters metrics.num.samples metrics.recording.level
    metrics.sample.window.ms partition.assignment.strategy receive.buffer.bytes
    reconnect.backoff.max.ms reconnect.backoff.ms request.timeout.ms retry.backoff.max.ms
    retry.backoff.ms security.protocol security.providers send.buffer.bytes
    session.timeout.ms socket.connection.setup.timeout.max.ms
    socket.connection.setup.timeout.ms value.deserializer
    ssl.cipher.suites ssl.enabled.protocols ssl.endpoint.identification.algorithm
    ssl.engine.factory.class ssl.key.password ssl.keymanager.algorithm
    ssl.keystore.certificate.chain ssl.keystore.key ssl.keystore.location ssl.keystore.password
    ssl.keystore.type ssl.protocol ssl.provider ssl.secure.random.implementation
    ssl.trustmanager.algorithm ssl.truststore.certificates ssl.truststore.location
    ssl.truststore.password ssl.truststore.type
    sasl.client.callback.handler.class sasl.jaas.config sasl.kerberos.kinit.cmd
    sasl.kerberos.min.time.before.relogin sasl.kerberos.service.name
    sasl.kerberos.ticket.renew.jitter sasl.kerberos.ticket.renew.window.factor
    sasl.login.callback.handler.class sasl.login.class sasl.login.connect.timeout.ms
    sasl.login.read.timeout.ms sasl.login.refresh.buffer.seconds
    sasl.login.refresh.min.period.seconds sasl.login.refresh.window.factor
    sasl.login.refresh.window.jitter sasl.login.retry.backoff.max.ms
    sasl.login.retry.backoff.ms sasl.mechanism sasl.oauthbearer.assertion.algorithm
    sasl.oauthbearer.assertion.claim.aud sasl.oauthbearer.assertion.claim.exp.seconds
    sasl.oauthbearer.assertion.claim.iss sasl.oauthbearer.assertion.claim.jti.include
    sasl.oauthbearer.assertion.claim.nbf.seconds sasl.oauthbearer.assertion.claim.sub
    sasl.oauthbearer.assertion.file sasl.oauthbearer.assertion.private.key.file
    sasl.oauthbearer.assertion.private.key.passphrase sasl.oauthbearer.assertion.template.file
    sasl.oauthbearer.client.credentials.client.id
    sasl.oauthbearer.client.credentials.client.secret sasl.oauthbearer.clock.skew.seconds
    sasl.oauthbearer.expected.audience sasl.oauthbearer.expected.issuer
    sasl.oauthbearer.header.urlencode sasl.oauthbearer.jwks.endpoint.refresh.ms
    sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms
    sasl.oauthbearer.jwks.endpoint.retry.backoff.ms sasl.oauthbearer.jwks.endpoint.url
    sasl.oauthbearer.jwt.retriever.class sasl.oauthbearer.jwt.validator.class
    sasl.oauthbearer.scope sasl.oauthbearer.scope.claim.name sasl.oauthbearer.sub.claim.name
    sasl.oauthbearer.token.endpoint.url
""".split())
# Families of client settings named by a prefix (a config provider's, the metrics context's).
_CONSUMER_PREFIXES = ("config.providers.", "metrics.context.")
_KAFKA_SPELLED = tuple(f"kafka.{name}" for name in sorted(_CONSUMER_SETTINGS))


def _known(key: str) -> bool:
    """Whether lower-case option name ``key`` is one a reader knows."""
    if key.startswith("kafka."):
        setting = key[len("kafka."):]
        return setting in _CONSUMER_SETTINGS or setting.startswith(_CONSUMER_PREFIXES)
    return key in _OPTION_NAMES or key in _IGNORED or key in _CATALOG or \
        key.startswith("option.")


class Options:
    """Spark's Kafka option names (case-insensitive) and kafkalog's own.

    Raises ``InvalidConfigError`` for an unknown option, a refused consumer setting, more than
    one of ``subscribe``/``subscribePattern``/``assign`` or an empty one, and ``minPartitions``
    or ``maxRecordsPerPartition`` not positive, as Spark's Kafka source does. ``streaming``:
    the checks of Spark's ``validateStreamOptions`` too (no ``endingOffsets``/
    ``endingOffsetsByTimestamp``; trigger limits positive, min not above max).

    ``log_ignored``: log the options the read mode ignores (``log_ignored_options``), as
    Spark's source does when it is created for a batch or a streaming query. False where the
    mode is not known yet (a data source's ``schema()``, asked for both) or where the same
    options were logged already (each re-planning of one query). The planner's warning of a
    selection that matches no partition follows it (``logs_notes``): one per DataFrame.
    """

    def __init__(self, options: Mapping[str, Any], streaming: bool = False, *,
                 log_ignored: bool = True) -> None:
        self._raw = {str(k).lower(): v for k, v in options.items() if v is not None}
        self.streaming = streaming
        unknown = sorted(str(k) for k in options if options[k] is not None and
                         not _known(str(k).lower()))
        if unknown:
            raise InvalidConfigError("unknown option(s) " + ", ".join(
                _suggest(k) for k in unknown))
        self._validate()
        self.logs_notes = log_ignored
        if log_ignored:
            self.log_ignored_options()

    def _validate(self) -> None:
        for key, message in _REFUSED.items():
            if key in self._raw:
                raise InvalidConfigError(message)
        chosen = [name for name in STRATEGY_OPTIONS if name.lower() in self._raw]
        if len(chosen) > 1:
            raise InvalidConfigError(
                "Only one of the following options can be specified for Kafka source: "
                "subscribe, subscribepattern, assign. See the docs for more details.")
        if chosen:
            value = str(self._raw[chosen[0].lower()])
            if chosen[0] == "assign" and not value.strip().startswith("{"):
                raise InvalidConfigError("No topicpartitions to assign as specified value for "
                                         f"option 'assign' is '{value}'")
            if chosen[0] == "subscribe" and not self.topics():
                raise InvalidConfigError("No topics to subscribe to as specified value for "
                                         f"option 'subscribe' is '{value}'")
            if chosen[0] == "subscribePattern" and not value.strip():
                raise InvalidConfigError("Pattern to subscribe is empty as specified value for "
                                         f"option 'subscribePattern' is '{value}'")
        for name in ("minPartitions", "maxRecordsPerPartition", "parallelPlanningThreshold"):
            n = self.integer(name)
            if n is not None and n <= 0:
                raise InvalidConfigError(f"{name} must be positive")
        if self.streaming:
            self._validate_streaming()
        self.read_committed  # noqa: B018  (validates kafka.isolation.level)
        self.timestamp_strategy  # noqa: B018
        self.storage_options  # noqa: B018

    def _validate_streaming(self) -> None:
        """Spark's ``validateStreamOptions``: no end for a stream; trigger limits checked."""
        if "endingoffsets" in self._raw:
            raise InvalidConfigError("ending offset not valid in streaming queries")
        if "endingoffsetsbytimestamp" in self._raw:
            raise InvalidConfigError("ending timestamp not valid in streaming queries")
        low, high = self.integer("minOffsetsPerTrigger"), self.integer("maxOffsetsPerTrigger")
        for name, n in (("minOffsetsPerTrigger", low), ("maxOffsetsPerTrigger", high)):
            if n is not None and n <= 0:
                raise InvalidConfigError(f"{name} must be positive")
        if low is not None and high is not None and low > high:
            raise InvalidConfigError(f"The value of minOffsetPerTrigger({low}) is higher than "
                                     f"the maxOffsetsPerTrigger({high}).")
        self.max_trigger_delay_ms  # noqa: B018  (validates maxTriggerDelay)

    def log_ignored_options(self) -> None:
        """Log each option this read mode ignores: the trigger limits (``maxOffsetsPerTrigger``,
        ...) in a batch query and ``endingTimestamp`` in a streaming one at WARNING, as Spark
        does; ``kafka.group.id`` at WARNING; the other consumer and broker settings, which
        mean nothing for files at rest, at INFO."""
        for key in sorted(self._raw):
            if key in _TRIGGER_OPTIONS:
                if not self.streaming:
                    log.warning("option %s ignored in batch queries", key)
            elif key in _IGNORED:
                log.log(_IGNORED[key], "option %s ignored: kafkalog reads log files, not "
                        "brokers", key)
            elif key == "endingtimestamp" and self.streaming:
                log.warning("option endingtimestamp ignored in streaming queries")
            elif key == "kafka.group.id":
                log.warning("Kafka option 'kafka.group.id' is set; kafkalog reads files and "
                            "joins no consumer group: ignored")
            elif key.startswith("kafka.") and key not in _USED_KAFKA:
                log.info("Kafka option %s ignored: kafkalog reads log files, not brokers", key)

    @property
    def max_trigger_delay_ms(self) -> int:
        """``maxTriggerDelay`` in milliseconds (default 15m), written as Spark's
        ``timeStringAsMs`` reads it: a number of milliseconds or one with a unit (us, ms, s,
        m, min, h, d)."""
        raw = str(self.get("maxTriggerDelay", "15m")).strip().lower()
        match = re.fullmatch(r"(-?[0-9]+)\s*([a-z]*)", raw)
        units = {"": 1.0, "us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0,
                 "min": 60_000.0, "h": 3_600_000.0, "d": 86_400_000.0}
        if match is None or match.group(2) not in units:
            raise InvalidConfigError(f"option maxTriggerDelay must be a time such as 15m, 30s "
                                     f"or 500ms, not {self.get('maxTriggerDelay')!r}")
        return int(int(match.group(1)) * units[match.group(2)])

    def get(self, name: str, default: Any = None) -> Any:
        return self._raw.get(name.lower(), default)

    def flag(self, name: str, default: bool) -> bool:
        v = self.get(name)
        if v is None:
            return default
        if isinstance(v, bool):
            return v
        # Scala's String.toBoolean: case-insensitive, not trimmed
        if str(v).lower() in ("true", "false"):
            return str(v).lower() == "true"
        raise InvalidConfigError(f"option {name} must be true or false, not {v!r}")

    @overload
    def integer(self, name: str) -> int | None: ...
    @overload
    def integer(self, name: str, default: int) -> int: ...
    @overload
    def integer(self, name: str, default: None) -> int | None: ...

    def integer(self, name: str, default: int | None = None) -> int | None:
        v = self.get(name)
        if v is None:
            return default
        if isinstance(v, bool):
            raise InvalidConfigError(f"option {name} must be an integer, not {v!r}")
        try:
            return int(str(v).strip())
        except (TypeError, ValueError):
            raise InvalidConfigError(f"option {name} must be an integer, not {v!r}") from None

    def timestamp(self, name: str) -> int | None:
        """A ``startingTimestamp``/``endingTimestamp`` value (milliseconds), or None."""
        v = self.get(name)
        if v is None:
            return None
        try:
            return int(str(v).strip())
        except ValueError:
            raise InvalidConfigError(f"option {name}: Expected a single long value, got "
                                     f"{str(v).strip()} (milliseconds since the epoch)") \
                from None

    def json(self, name: str) -> Any:
        v = self.get(name)
        if v is None or isinstance(v, dict):
            return v
        try:
            return json.loads(str(v).strip())
        except ValueError:
            raise InvalidConfigError(f"option {name} is not valid JSON: {v!r}") from None

    def partition_map(self, name: str) -> dict[tuple[str, int], int] | None:
        """A ``{"topic": {"0": n}}`` option as {(topic, partition): n}, or None."""
        spec = self.json(name)
        if spec is None:
            return None
        try:
            return {(str(t), int(p)): int(n) for t, parts in spec.items()
                    for p, n in parts.items()}
        except (AttributeError, TypeError, ValueError):
            raise InvalidConfigError(f"Expected e.g. {{\"topicA\":{{\"0\":23,\"1\":-1}}}}, "
                                     f"got {self.get(name)}") from None

    def offsets_spec(self, name: str, default: str,
                     allowed: Sequence[str]) -> str | dict[str, Any]:
        """A ``startingOffsets``/``endingOffsets`` value: one of ``allowed`` words (trimmed,
        case-insensitive as in Spark), or the JSON {"topic": {"partition": offset}} as a dict."""
        raw = self.get(name, default)
        if isinstance(raw, dict) or str(raw).strip().startswith("{"):
            return self.json(name)
        word = str(raw).strip().lower()
        if word not in allowed:
            raise InvalidConfigError(f"{name} must be {' or '.join(allowed)} or JSON, "
                                     f"not {raw!r}")
        return word

    def topics(self) -> set[str]:
        """The topics of ``subscribe`` (comma-separated, trimmed)."""
        return {t.strip() for t in str(self.get("subscribe", "")).split(",") if t.strip()}

    @property
    def include_headers(self) -> bool:
        return self.flag("includeHeaders", False)

    @property
    def exclude_internal_topics(self) -> bool:
        """The consumer's ``kafka.exclude.internal.topics`` (default true): Kafka's internal
        topics are left out of what the paths hold unless named (``subscribe``, ``assign``,
        or a path that is their partition directory)."""
        return self.flag("kafka.exclude.internal.topics", True)

    @property
    def read_above_high_watermark(self) -> bool:
        """kafkalog's ``readAboveHighWatermark``: ``latest`` is the log end offset."""
        return self.flag("readAboveHighWatermark", False)

    @property
    def timestamp_strategy(self) -> str:
        """``startingOffsetsByTimestampStrategy``: ``error`` (default) or ``latest``."""
        v = str(self.get("startingOffsetsByTimestampStrategy", "error"))
        if v.lower() not in ("error", "latest"):
            raise InvalidConfigError(f"startingOffsetsByTimestampStrategy must be error or "
                                     f"latest, not {v!r}")
        return v.lower()

    @property
    def storage_options(self) -> dict[str, Any] | None:
        """kafkalog's ``storageOptions``: the fsspec options of URL paths (a JSON object, or
        a dict), as ``storage_options`` in Python; None when not given (the filesystem's
        defaults: for S3 the standard AWS environment). The value is never put in an error
        message or a log line (it holds credentials)."""
        v = self.get("storageOptions")
        if v is None:
            return None
        if isinstance(v, Mapping):
            return dict(v)
        try:
            parsed = json.loads(str(v))
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict):
            raise InvalidConfigError('option storageOptions must be a JSON object, e.g. '
                                     '{"key": "...", "secret": "...", "endpoint_url": "..."}')
        return parsed

    @property
    def rsm_keys(self) -> dict[str, str] | None:
        """kafkalog's ``rsmKeys``: RSA private keys of encrypted tiered-storage segments by
        key-pair id (a JSON object of id → PEM file path or PEM text, or a dict), as
        ``rsm_keys`` in Python; None when not given. Never put in a message or a log line."""
        v = self.get("rsmKeys")
        if v is None:
            return None
        try:
            parsed = v if isinstance(v, Mapping) else json.loads(str(v))
        except ValueError:
            parsed = None
        if not isinstance(parsed, Mapping) or \
                not all(isinstance(x, str) for x in parsed.values()):
            raise InvalidConfigError('option rsmKeys must be a JSON object of key-pair ids to '
                                     'RSA private key files (PEM), e.g. '
                                     '{"key1": "/etc/kafka/rsm-private.pem"}')
        return {str(k): str(x) for k, x in parsed.items()}

    @property
    def read_committed(self) -> bool:
        level = str(self.get("kafka.isolation.level", "read_uncommitted")).strip().lower()
        if level not in ("read_committed", "read_uncommitted"):
            raise InvalidConfigError(f"kafka.isolation.level must be read_committed or "
                                     f"read_uncommitted, not {level!r}")
        return level == "read_committed"


def _suggest(name: str) -> str:
    """``name``, with the option it is closest to (in its spelling), if one is close; a
    ``kafka.*`` name that is no consumer setting says so."""
    close = closest_name(name, _SPELLED + _KAFKA_SPELLED)
    if close:
        return f"{name} (did you mean {close}?)"
    return f"{name} (no Kafka consumer setting)" if name.lower().startswith("kafka.") else name


# Table options a catalog table cannot carry to its reader (see catalog_table_options).
_SECRET = ("storageOptions", "rsmKeys")


def catalog_table_options(options: Mapping[str, Any]) -> dict[str, Any] | None:
    """The options of a table being created (``CREATE TABLE t USING kafkalog OPTIONS (...)``,
    when Spark's catalog asks the data source for its schema), as its reader needs them; None
    when ``options`` are not a table's (the catalog adds ``provider``).

    PySpark 4.3 gives a catalog table's reader none of its options: ``V2SessionCatalog.
    loadTable`` hands them to ``PythonDataSourceV2.getTable``, which drops them, and the scan
    creates the Python data source with the query's options alone. What does reach the
    reader is the table's schema, as the catalog stored it from ``schema()``: the options
    travel in its metadata (``schema.kafka_schema``). ``storageOptions`` and ``rsmKeys`` may
    hold credentials, which a schema would show to every reader: refused
    (``InvalidConfigError``)."""
    if "provider" not in {str(k).lower() for k in options}:
        return None
    kept = {str(k): v for k, v in options.items() if v is not None and
            str(k).lower() not in _CATALOG and not str(k).lower().startswith("option.")}
    # ``path`` is the table's location as a file: URI (Spark's catalog makes it from the
    # ``path`` option or LOCATION); ``paths_list`` reads it
    secret = [name for name in _SECRET if name.lower() in {k.lower() for k in kept}]
    if secret:
        raise InvalidConfigError(
            f"option(s) {', '.join(secret)} cannot be a table's: a Python data source's table "
            f"carries its options in its schema, which any reader sees; give them through the "
            f"environment (AWS_* for S3) or use CREATE TEMPORARY VIEW ... USING kafkalog")
    return kept


def path_strings(paths: StrPath | Iterable[StrPath]) -> list[str]:
    """``paths`` (a path or an iterable of paths: ``str`` or ``os.PathLike``) as strings;
    ``InvalidConfigError`` naming what was given for anything else."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    try:
        return [os.fspath(p) for p in paths]
    except TypeError:
        raise InvalidConfigError(f"paths must be a path (str or os.PathLike) or a list of "
                                 f"them, not {paths!r}") from None


def paths_list(paths: StrPath | Iterable[StrPath]) -> list[str]:
    """Local paths made absolute (executors may start elsewhere), ``file:`` URIs (what Spark's
    catalog makes of a table's path) as local paths; other URLs as given."""
    out = []
    for p in path_strings(paths):
        if p.startswith("file:"):
            p = urllib.parse.unquote(urllib.parse.urlsplit(p).path)
        out.append(p if storage.is_remote(p) else os.path.abspath(p))
    return out


def paths_option(opts: dict[str, Any]) -> list[Any]:
    """The paths of a data source's ``path``/``paths`` option (removed from ``opts``)."""
    paths = opts.pop("path", None) or opts.pop("paths", None)
    opts.pop("paths", None)
    if not paths:
        # also a SELECT from a table created with a column list (see catalog_table_options)
        raise InvalidConfigError(
            "give a path: spark.read.format('kafkalog').load(path); in SQL CREATE TABLE t "
            "USING kafkalog OPTIONS (path '...') with no column list, or CREATE TEMPORARY "
            "VIEW ... USING kafkalog OPTIONS (path '...')")
    if isinstance(paths, str):
        if paths.startswith("["):
            return list(json.loads(paths))
        return [p for p in paths.split(",") if p]
    return list(paths)
