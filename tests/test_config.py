"""LogConfig: every topic setting of Kafka 4 with Kafka's defaults and validation, the
settings kafkalog applies and ignores, ``.properties`` files read as java.util.Properties reads
them, and the error for a missing ``spark`` extra."""
import re
import sys
from pathlib import Path

import numpy as np
import pytest

import kafkalog
import kafkalog.spark as ks
from kafkalog import Log, Record
from kafkalog.config import INT_MAX, LONG_MAX, InvalidConfigError, LogConfig
from kafkalog.errors import KafkaLogError

REPO = Path(__file__).resolve().parents[1]
PACKAGE = Path(kafkalog.__file__).resolve().parent

# Kafka 4's topic settings and their defaults (storage LogConfig / TopicConfig), as kafkalog
# keeps them: ints, floats, bools, strings, lists as comma-separated strings.
KAFKA_DEFAULTS = {
    "cleanup.policy": "delete",
    "compression.gzip.level": -1,
    "compression.lz4.level": 9,
    "compression.type": "producer",
    "compression.zstd.level": 3,
    "delete.retention.ms": 86400000,
    "file.delete.delay.ms": 60000,
    "flush.messages": LONG_MAX,
    "flush.ms": LONG_MAX,
    "follower.replication.throttled.replicas": "",
    "index.interval.bytes": 4096,
    "leader.replication.throttled.replicas": "",
    "local.retention.bytes": -2,
    "local.retention.ms": -2,
    "max.compaction.lag.ms": LONG_MAX,
    "max.message.bytes": 1048588,
    "message.downconversion.enable": True,
    "message.timestamp.after.max.ms": LONG_MAX,     # Kafka 4: 3600000 (see config.py)
    "message.timestamp.before.max.ms": LONG_MAX,
    "message.timestamp.type": "CreateTime",
    "min.cleanable.dirty.ratio": 0.5,
    "min.compaction.lag.ms": 0,
    "min.insync.replicas": 1,
    "preallocate": False,
    "remote.log.copy.disable": False,
    "remote.log.delete.on.disable": False,
    "remote.storage.enable": False,
    "retention.bytes": -1,
    "retention.ms": 604800000,
    "segment.bytes": 1073741824,
    "segment.index.bytes": 10485760,
    "segment.jitter.ms": 0,
    "segment.ms": 604800000,
    "unclean.leader.election.enable": False,
}

IGNORED = {
    "compression.gzip.level", "compression.lz4.level", "compression.zstd.level",
    "follower.replication.throttled.replicas", "leader.replication.throttled.replicas",
    "local.retention.bytes", "local.retention.ms", "message.downconversion.enable",
    "min.insync.replicas", "preallocate", "remote.log.copy.disable",
    "remote.log.delete.on.disable", "remote.storage.enable", "unclean.leader.election.enable",
}


# --- names and defaults ----------------------------------------------------------------------

def test_every_kafka_topic_setting_is_known_with_kafkas_default():
    assert LogConfig.NAMES == set(KAFKA_DEFAULTS)
    config = LogConfig()
    for name, default in KAFKA_DEFAULTS.items():
        assert config[name] == default, name
        assert type(config[name]) is type(default), name
    assert config.to_dict() == KAFKA_DEFAULTS


@pytest.mark.parametrize("name", sorted(KAFKA_DEFAULTS))
def test_every_setting_accepts_its_default_written_as_text(name):
    default = KAFKA_DEFAULTS[name]
    text = str(default).lower() if isinstance(default, bool) else str(default)
    assert LogConfig({name: text})[name] == default


@pytest.mark.parametrize("name, value, want", [
    ("min.insync.replicas", "2", 2),
    ("min.insync.replicas", 3, 3),
    ("unclean.leader.election.enable", "TRUE", True),
    ("unclean.leader.election.enable", " false ", False),
    ("remote.storage.enable", "true", True),
    ("remote.log.copy.disable", True, True),
    ("remote.log.delete.on.disable", "true", True),
    ("local.retention.ms", "-1", -1),
    ("local.retention.ms", "3600000", 3600000),
    ("local.retention.bytes", -2, -2),
    ("local.retention.bytes", "1073741824", 1073741824),
    ("compression.gzip.level", "1", 1),
    ("compression.gzip.level", 9, 9),
    ("compression.gzip.level", "-1", -1),
    ("compression.lz4.level", "1", 1),
    ("compression.lz4.level", 17, 17),
    ("compression.zstd.level", "-131072", -131072),
    ("compression.zstd.level", "22", 22),
    ("compression.zstd.level", 0, 0),
    ("leader.replication.throttled.replicas", "0:101, 1:102 ,2:103", "0:101,1:102,2:103"),
    ("leader.replication.throttled.replicas", "*", "*"),
    ("follower.replication.throttled.replicas", " * ", "*"),
    ("follower.replication.throttled.replicas", ["0:1", "1:2"], "0:1,1:2"),
    ("follower.replication.throttled.replicas", "", ""),
    ("message.downconversion.enable", "false", False),
    ("preallocate", "true", True),
    ("cleanup.policy", "compact, delete", "compact,delete"),
    ("cleanup.policy", "", ""),                      # Kafka 4: neither delete nor compact
    ("cleanup.policy", "delete,delete", "delete"),
    ("segment.bytes", " 2048 ", 2048),
    ("segment.bytes", INT_MAX, INT_MAX),
    ("segment.bytes", np.int64(2048), 2048),
    ("retention.ms", 1000.0, 1000),
    ("retention.ms", "-1", -1),
    ("retention.bytes", str(-2**63), -2**63),
    ("flush.messages", str(LONG_MAX), LONG_MAX),
    ("min.cleanable.dirty.ratio", "0.25", 0.25),
    ("min.cleanable.dirty.ratio", 1, 1.0),
    ("compression.type", "zstd", "zstd"),
    ("message.timestamp.type", "LogAppendTime", "LogAppendTime"),
])
def test_settings_accept_kafkas_values(name, value, want):
    config = LogConfig({name: value})
    assert config[name] == want
    assert getattr(config, name.replace(".", "_")) == want


@pytest.mark.parametrize("name, value", [
    ("min.insync.replicas", 0),
    ("min.insync.replicas", "two"),
    ("min.insync.replicas", 1.5),
    ("min.insync.replicas", True),
    ("unclean.leader.election.enable", "yes"),
    ("unclean.leader.election.enable", 1),
    ("remote.storage.enable", "1"),
    ("remote.log.copy.disable", ""),
    ("message.downconversion.enable", "no"),
    ("preallocate", None),
    ("local.retention.ms", -3),
    ("local.retention.bytes", "-3"),
    ("local.retention.ms", "1h"),
    ("compression.gzip.level", 0),
    ("compression.gzip.level", 10),
    ("compression.gzip.level", -2),
    ("compression.lz4.level", 0),
    ("compression.lz4.level", 18),
    ("compression.zstd.level", 23),
    ("compression.zstd.level", -131073),
    ("leader.replication.throttled.replicas", "0-101"),
    ("leader.replication.throttled.replicas", "*,0:1"),
    ("follower.replication.throttled.replicas", "a:b"),
    ("follower.replication.throttled.replicas", 5),
    ("cleanup.policy", "compact,bogus"),
    ("cleanup.policy", "Delete"),
    ("compression.type", "GZIP"),
    ("compression.type", "none"),
    ("message.timestamp.type", "Now"),
    ("min.cleanable.dirty.ratio", 2),
    ("min.cleanable.dirty.ratio", "nan"),
    ("min.cleanable.dirty.ratio", "half"),
    ("segment.bytes", "big"),
    ("segment.bytes", 3),
    ("segment.bytes", INT_MAX + 1),                  # an INT in Kafka
    ("segment.bytes", "1_000_000"),
    ("segment.index.bytes", 3),
    ("max.message.bytes", -1),
    ("retention.ms", -2),
    ("retention.ms", LONG_MAX + 1),                  # a LONG in Kafka
    ("segment.ms", 0),
    ("max.compaction.lag.ms", 0),
    ("segment.jitter.ms", -1),
])
def test_invalid_values_are_refused(name, value):
    with pytest.raises(InvalidConfigError) as e:
        LogConfig({name: value})
    assert name in str(e.value)


@pytest.mark.parametrize("name", [
    "segment.byte",                                  # a typo
    "log.retention.ms",                              # the broker's name, not the topic's
    "message.format.version",                        # removed in Kafka 4.0
    "message.timestamp.difference.max.ms",           # removed in Kafka 4.0
    "internal.segment.bytes",                        # Kafka's own test hook, not a setting
])
def test_unknown_names_are_refused(name):
    with pytest.raises(InvalidConfigError, match=re.escape(name)):
        LogConfig({name: "1"})


# --- Kafka's checks across settings ----------------------------------------------------------

@pytest.mark.parametrize("values", [
    {"min.compaction.lag.ms": 10, "max.compaction.lag.ms": 5},
    {"remote.storage.enable": "true", "cleanup.policy": "compact"},
    {"remote.storage.enable": "true", "cleanup.policy": "delete,compact"},
    {"remote.storage.enable": "true", "retention.bytes": 100, "local.retention.bytes": 200},
    {"remote.storage.enable": "true", "retention.bytes": 100, "local.retention.bytes": -1},
    {"remote.storage.enable": "true", "retention.ms": 1000, "local.retention.ms": 2000},
    {"remote.storage.enable": "true", "local.retention.ms": -1},
    {"remote.storage.enable": "true", "remote.log.copy.disable": "true",
     "local.retention.ms": 1000},
    {"remote.storage.enable": "true", "remote.log.copy.disable": "true",
     "retention.bytes": 100, "local.retention.bytes": 50},
])
def test_conflicting_settings_are_refused(values):
    with pytest.raises(InvalidConfigError):
        LogConfig(values)


@pytest.mark.parametrize("values", [
    {"min.compaction.lag.ms": 5, "max.compaction.lag.ms": 5},
    {"remote.storage.enable": "true", "local.retention.ms": 3600000,
     "local.retention.bytes": -2},
    {"remote.storage.enable": "true", "cleanup.policy": ""},
    {"remote.storage.enable": "true", "retention.ms": -1, "local.retention.ms": -1},
    {"remote.storage.enable": "true", "retention.bytes": 100, "local.retention.bytes": 100},
    {"remote.storage.enable": "true", "remote.log.copy.disable": "true",
     "retention.ms": 5000, "local.retention.ms": 5000},
    {"remote.storage.enable": "false", "cleanup.policy": "compact", "local.retention.ms": -1},
])
def test_consistent_settings_are_accepted(values):
    LogConfig(values)


# --- applied and ignored ---------------------------------------------------------------------

def test_ignored_settings_are_listed():
    assert LogConfig.IGNORED == frozenset(IGNORED)
    assert LogConfig.APPLIED | LogConfig.IGNORED == LogConfig.NAMES
    assert not LogConfig.APPLIED & LogConfig.IGNORED
    assert isinstance(LogConfig.IGNORED, frozenset) and isinstance(LogConfig.APPLIED, frozenset)


def _engine_sources():
    return {p.name: p.read_text() for p in PACKAGE.rglob("*.py") if p.name != "config.py"}


def test_ignored_settings_are_not_read_by_the_engine():
    """Keeps IGNORED honest: a module that starts applying a setting must move it to APPLIED."""
    for name, text in _engine_sources().items():
        for setting in LogConfig.IGNORED - {"preallocate"}:
            assert f'"{setting}"' not in text and f"'{setting}'" not in text, (name, setting)


def test_applied_settings_are_read_by_the_engine():
    text = "\n".join(_engine_sources().values())
    # read through LogConfig's properties (max_index_size, delete/compact_enabled,
    # random_segment_jitter) rather than by name
    by_property = {"segment.index.bytes": "max_index_size", "cleanup.policy": "_enabled",
                   "segment.jitter.ms": "random_segment_jitter"}
    for setting in LogConfig.APPLIED:
        assert f'"{setting}"' in text or by_property.get(setting, "\0") in text, setting


def test_docs_list_the_ignored_settings():
    doc = REPO / "docs" / "compatibility.md"
    if not doc.is_file():
        pytest.skip("docs/ is not beside the tests (installed wheel)")
    paragraph = doc.read_text().split("Topic settings:", 1)[1].split("\n\n", 1)[0]
    for setting in LogConfig.IGNORED:
        assert f"`{setting}`" in paragraph, setting


def test_a_log_keeps_ignored_settings_and_still_works(tmp_path):
    settings = {"segment.bytes": 1024, "min.insync.replicas": "2",
                "unclean.leader.election.enable": "true", "compression.zstd.level": "5",
                "leader.replication.throttled.replicas": "*", "remote.storage.enable": "false",
                "local.retention.ms": "-2", "message.downconversion.enable": "false"}
    with Log.open(tmp_path / "t-0", settings) as log:
        log.append([Record(key=b"k", value=b"v" * 100, timestamp=1000) for _ in range(20)])
        assert log.config["min.insync.replicas"] == 2
        assert log.config.leader_replication_throttled_replicas == "*"
        assert log.config.compression_zstd_level == 5
    with Log.open(tmp_path / "t-0", settings) as log:
        assert len(list(log.records())) == 20


# --- the LogConfig object --------------------------------------------------------------------

def test_log_config():
    c = LogConfig({"segment.bytes": "2048", "cleanup.policy": "compact,delete"})
    assert c.segment_bytes == 2048 and c["retention.ms"] == 604800000
    assert c.compact_enabled and c.delete_enabled
    with pytest.raises(InvalidConfigError):
        LogConfig({"segment.byte": 1})
    with pytest.raises(InvalidConfigError):
        LogConfig({"segment.bytes": "big"})
    with pytest.raises(InvalidConfigError):
        LogConfig({"segment.bytes": 3})
    with pytest.raises(InvalidConfigError):
        LogConfig({"message.timestamp.type": "Now"})
    with pytest.raises(InvalidConfigError):
        LogConfig({"min.cleanable.dirty.ratio": 2})


def test_empty_cleanup_policy_neither_deletes_nor_compacts():
    c = LogConfig({"cleanup.policy": ""})
    assert not c.delete_enabled and not c.compact_enabled


def test_round_trips_and_overrides():
    c = LogConfig({"min.insync.replicas": "2", "follower.replication.throttled.replicas": "0:1",
                   "cleanup.policy": "compact"}, segment_ms=1000)
    assert c.segment_ms == 1000
    assert LogConfig(c.to_dict()) == c
    d = c.with_overrides({"compression.lz4.level": "12", "min.insync.replicas": 3})
    assert (d.compression_lz4_level, d.min_insync_replicas, d.cleanup_policy) == (12, 3, "compact")
    assert c.min_insync_replicas == 2
    with pytest.raises(InvalidConfigError):
        c.with_overrides({"compression.lz4.level": 40})
    assert "min.insync.replicas" in repr(c) and "segment.bytes" not in repr(c)
    with pytest.raises(AttributeError):
        _ = c.no_such_setting
    import pickle
    assert pickle.loads(pickle.dumps(c)) == c


# --- .properties files -----------------------------------------------------------------------

def props(tmp_path, text, encoding="latin-1"):
    p = tmp_path / "topic.properties"
    p.write_bytes(text.encode(encoding) if isinstance(text, str) else text)
    return LogConfig.from_properties(p)


def test_log_config_from_properties(tmp_path):
    c = props(tmp_path, "# topic\nsegment.bytes=4096\nretention.ms : 1000\n\ncleanup.policy=compact\n")
    assert (c.segment_bytes, c.retention_ms, c.cleanup_policy) == (4096, 1000, "compact")
    with pytest.raises(InvalidConfigError, match="nonsense"):
        props(tmp_path, "nonsense\n")      # a name with an empty value: an unknown name


def test_properties_line_continuation(tmp_path):
    c = props(tmp_path, "leader.replication.throttled.replicas=0:101,\\\n"
                        "    1:102,\\\n"
                        "\t2:103\n"
                        "segment.\\\n  bytes = 40\\\n  96\n")
    assert c.leader_replication_throttled_replicas == "0:101,1:102,2:103"
    assert c.segment_bytes == 4096


def test_properties_separators(tmp_path):
    c = props(tmp_path, "min.insync.replicas:2\n"
                        "segment.bytes 4096\n"
                        "retention.ms\t\t1000\n"
                        "compression.type = zstd\n"
                        "compression.zstd.level :  7\n"
                        "   preallocate   true\n"
                        "cleanup.policy=\n")
    assert (c.min_insync_replicas, c.segment_bytes, c.retention_ms) == (2, 4096, 1000)
    assert (c.compression_type, c.compression_zstd_level, c.preallocate) == ("zstd", 7, True)
    assert c.cleanup_policy == ""


def test_properties_comments(tmp_path):
    c = props(tmp_path, "! a comment\n# another\n   # indented comment\n   ! and another\n"
                        "min.insync.replicas=2\n!segment.bytes=14\n")
    assert c.min_insync_replicas == 2 and c.segment_bytes == KAFKA_DEFAULTS["segment.bytes"]
    # '#' after a value is part of the value, as java.util.Properties reads it
    with pytest.raises(InvalidConfigError, match="segment.bytes"):
        props(tmp_path, "segment.bytes=4096 # four KiB\n")


def test_properties_escapes(tmp_path):
    c = props(tmp_path, "compression.type=\\z\\st\\d\n"        # unknown escapes drop the '\'
                        "message.timestamp.type=\\u004cogAppend\\u0054ime\n"
                        "min.insync.replicas=\\t2\\t\n"
                        "\\u0073egment.bytes=4096\n"
                        "follower.replication.throttled.replicas = 0\\:1,1\\:2\n")
    assert c.compression_type == "zstd"
    assert c.message_timestamp_type == "LogAppendTime"
    assert c.min_insync_replicas == 2                 # \t decoded, then trimmed as Kafka does
    assert c.segment_bytes == 4096
    assert c.follower_replication_throttled_replicas == "0:1,1:2"


def test_properties_escaped_separator_in_name(tmp_path):
    with pytest.raises(InvalidConfigError, match="segment=bytes"):
        props(tmp_path, "segment\\=bytes=1\n")       # the name is "segment=bytes"
    with pytest.raises(InvalidConfigError, match="segment bytes"):
        props(tmp_path, "segment\\ bytes 1\n")


def test_properties_unicode_escapes_and_encoding(tmp_path):
    c = props(tmp_path, "compression.type=\\u0067\\u007A\\u0069\\u0070\n")
    assert c.compression_type == "gzip"
    # bytes are ISO-8859-1, as Properties.load(InputStream) reads them
    with pytest.raises(InvalidConfigError, match="caf\u00e9"):
        props(tmp_path, b"compression.type=caf\xe9\n")
    with pytest.raises(InvalidConfigError, match="\u20ac"):
        props(tmp_path, "compression.type=\\u20ac\n")


def test_properties_line_endings_and_overrides(tmp_path):
    c = props(tmp_path, "segment.bytes=2048\r\nsegment.bytes=4096\rretention.ms=5\r\n")
    assert (c.segment_bytes, c.retention_ms) == (4096, 5)


def test_properties_errors_are_typed(tmp_path):
    with pytest.raises(InvalidConfigError, match="u12"):
        props(tmp_path, "segment.bytes=\\u12\n")       # a malformed \u escape
    with pytest.raises(InvalidConfigError, match="topic.properties"):
        props(tmp_path, "min.insync.replicas=0\n")     # the file is named
    with pytest.raises(InvalidConfigError):
        LogConfig.from_properties(tmp_path / "missing.properties")
    with pytest.raises(InvalidConfigError):
        LogConfig.from_properties(tmp_path)            # a directory


# --- the spark extra -------------------------------------------------------------------------

@pytest.mark.parametrize("missing, call", [
    ("pyspark", lambda: ks.read(None, [])),
    ("pyarrow", lambda: ks.read(None, [])),
    ("pandas", lambda: ks.register(None)),
    ("pyspark", lambda: ks.register(None)),
    ("pyarrow", lambda: ks.read_task({})),
    ("pyarrow", lambda: ks.arrow_schema()),
    ("pyspark", lambda: ks.kafka_schema(True)),
])
def test_spark_functions_without_the_extra_say_what_to_install(monkeypatch, missing, call):
    monkeypatch.setitem(sys.modules, missing, None)       # "import <missing>" now fails
    with pytest.raises(ks.MissingSparkExtraError) as e:
        call()
    assert isinstance(e.value, ImportError) and isinstance(e.value, KafkaLogError)
    assert "install kafkalog[spark]" in str(e.value)
    assert e.value.missing == (missing,)
    assert missing in str(e.value)


def test_spark_planning_needs_no_extra(monkeypatch, tmp_path):
    for name in ("pyspark", "pyarrow", "pandas"):
        monkeypatch.setitem(sys.modules, name, None)
    with Log.open(tmp_path / "orders-0", {"segment.bytes": 1024}) as log:
        log.append([Record(key=b"k", value=b"v", timestamp=1000) for _ in range(5)])
    tasks = ks.plan([str(tmp_path)])
    assert tasks and tasks[0]["topic"] == "orders"
