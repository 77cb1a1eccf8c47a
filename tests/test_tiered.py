"""Kafka tiered storage as Aiven's RemoteStorageManager writes it (``kafkalog.tiered``), read
from the objects in ``../shared/fixtures/tiered-aiven`` (written by the plugin itself from the
Kafka-written ``multiseg-0`` and ``txn-0``), in every configuration: plain, zstd in 4 MiB and
64 KiB chunks, zstd + AES-GCM, AES-GCM only. Each is read from its local directory and, through
the session's moto S3 server, from a bucket: every view file equals the original file, every
record the original partition's, byte ranges decode to the original bytes fetching only the
chunks that cover them, read_committed matches; wrong keys and damaged objects are typed
errors naming the object (and chunk); verify checks every chunk."""
import base64
import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import sys

import pytest

import kafkalog
import kafkalog.spark
from kafkalog import storage, tiered
from kafkalog.errors import (
    CorruptTieredObjectError, LogNotFoundError, MissingTieredExtraError,
    PartitionNotFoundError, TieredKeyError,
)
from kafkalog.files import LEADER_EPOCH_CHECKPOINT, LOG_SUFFIX, PARTITION_METADATA, file_name
from kafkalog.log import Log
from kafkalog.records import iter_batches
from kafkalog.tiered import crypto
from kafkalog.verify import partition_dirs as verify_partition_dirs, verify_partition

from conftest import SHARED

pytest.importorskip("cryptography")

TIERED = str(SHARED / "fixtures" / "tiered-aiven")
KEYS = {"key1": os.path.join(TIERED, "keys", "private.pem")}
SOURCES = {"multiseg": "kafka-written/multiseg-0", "txn": "kafka-written/txn-0"}
TOPIC_DIRS = {"multiseg": "multiseg-7u6r2IfuQ7eOjN7qNDN2Ow", "txn": "txn-suOFPkflZf8YsS9UYQZvbQ"}
CONFIGS = {"a-plain": "", "b-zstd-4mib": "", "b-zstd-64kib": "", "c-zstd-aes-64kib": "tiered/",
           "d-aes-4kib-txn-only": ""}
CASES = [(c, t) for c in CONFIGS for t in TOPIC_DIRS
         if os.path.isdir(os.path.join(TIERED, c, "objects", CONFIGS[c] + TOPIC_DIRS[t]))]


@pytest.fixture(autouse=True)
def _fresh_storage():
    storage.reset()
    yield
    storage.reset()


def objects(config):
    return os.path.join(TIERED, config, "objects", CONFIGS[config].rstrip("/"))


def prefix(config, topic, root=None):
    """The partition prefix of ``topic`` partition 0 in ``config`` (under ``root``)."""
    return os.path.join(root or objects(config), TOPIC_DIRS[topic], "0")


def source(topic):
    return os.path.join(os.path.dirname(TIERED), SOURCES[topic])


def tiered_end(topic):
    """The offset after the last uploaded segment (the active segment was not uploaded)."""
    return {"multiseg": 28000, "txn": 594}[topic]


def records(log, end=None):
    return [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers or ()))
            for r in log.records(end_offset=end)]


def originals(topic):
    with Log.open(source(topic), read_only=True) as log:
        return records(log, tiered_end(topic))


@pytest.fixture(scope="module")
def s3_tiered(s3):
    """The URL of each config's objects in the moto bucket."""
    return {c: s3.upload(os.path.join(TIERED, c, "objects"), f"tiered-aiven/{c}")
            + ("/" + CONFIGS[c].rstrip("/") if CONFIGS[c] else "") for c in CONFIGS}


# ---------------------------------------------------------------------------- the view
@pytest.mark.parametrize("config,topic", CASES)
def test_every_view_file_equals_the_original(config, topic):
    view = storage.locate(prefix(config, topic), rsm_keys=KEYS).root
    assert tiered.is_view(view) and view.endswith(f"/{topic}-0")
    names = storage.listdir(view)
    expected_logs = sorted(n for n in os.listdir(source(topic))
                           if n.endswith(LOG_SUFFIX) and int(n[:20]) < tiered_end(topic))
    assert sorted(n for n in names if n.endswith(LOG_SUFFIX)) == expected_logs
    for name in names:
        data = storage.read_file(os.path.join(view, name))
        assert storage.size_of(os.path.join(view, name)) == len(data)
        if name == PARTITION_METADATA:
            assert TOPIC_DIRS[topic][-22:] in data.decode()
        elif name == LEADER_EPOCH_CHECKPOINT:
            newest = max(n for n in names if n.endswith(LOG_SUFFIX))
            exp = _expected_json(config, topic, int(newest[:20]))
            assert data.decode() == exp["originals"]["leader_epoch_checkpoint"]["text"]
        else:
            with open(os.path.join(source(topic), name), "rb") as f:
                assert data == f.read(), name


def _expected_json(config, topic, base):
    directory = os.path.join(TIERED, config, "expected", TOPIC_DIRS[topic], "0")
    name = next(n for n in os.listdir(directory) if n.startswith(f"{base:020d}-"))
    with open(os.path.join(directory, name)) as f:
        return json.load(f)


@pytest.mark.parametrize("config,topic", CASES)
def test_records_equal_the_original_partition(config, topic):
    with Log.open(prefix(config, topic), read_only=True, rsm_keys=KEYS) as log:
        assert log.log_start_offset == 0
        assert log.log_end_offset == tiered_end(topic)
        got = records(log)
    assert got == originals(topic) and got


@pytest.mark.parametrize("config", [c for c in CONFIGS if (c, "multiseg") in CASES])
def test_byte_ranges_decode_to_the_original_bytes_from_only_their_chunks(config):
    view = storage.locate(prefix(config, "multiseg"), rsm_keys=KEYS).root
    rng = random.Random(7)
    for name in [n for n in storage.listdir(view) if n.endswith(LOG_SUFFIX)][:5]:
        with open(os.path.join(source("multiseg"), name), "rb") as f:
            original = f.read()
        path = os.path.join(view, name)
        for _ in range(12):
            a = rng.randrange(len(original))
            b = min(len(original), a + rng.randrange(1, 100_000))
            storage.clear_cache()
            buf = storage.range_buffer(path, len(original))
            assert bytes(buf.ensure(a, b)[a:b]) == original[a:b]
            step = buf.step
            assert buf.chunks_present == (b - 1) // step - a // step + 1


def test_iter_batches_of_one_segment_object():
    seg = [n for n in os.listdir(prefix("c-zstd-aes-64kib", "txn")) if n.endswith(".log")][2]
    base = int(seg[:20])
    got = [(b.base_offset, b.last_offset, b.size_in_bytes) for b in
           iter_batches(os.path.join(prefix("c-zstd-aes-64kib", "txn"), seg), rsm_keys=KEYS)]
    want = [(b.base_offset, b.last_offset, b.size_in_bytes) for b in
            iter_batches(os.path.join(source("txn"), file_name(base, LOG_SUFFIX)))]
    assert got == want and got


@pytest.mark.parametrize("config", ["a-plain", "c-zstd-aes-64kib", "d-aes-4kib-txn-only"])
def test_read_committed_matches_the_original(config):
    committed = {"isolation_level": "read_committed", "subscribe": "txn"}
    pytest.importorskip("pyarrow")
    got = kafkalog.read_arrow(prefix(config, "txn"), rsm_keys=KEYS, **committed)
    # the uploaded segments end inside a transaction committed later: the view's last
    # stable offset is below its end, as Kafka's would be on the same files
    with Log.open(prefix(config, "txn"), read_only=True, rsm_keys=KEYS) as log:
        stable = log.offsets().last_stable_offset
    assert stable < 594
    want = kafkalog.read_arrow(source("txn"), ending_offsets={"txn": {"0": stable}},
                               **committed)
    assert got.column("offset").to_pylist() == want.column("offset").to_pylist()
    assert got.column("value").to_pylist() == want.column("value").to_pylist()
    aborted = kafkalog.read_arrow(prefix(config, "txn"), rsm_keys=KEYS, subscribe="txn")
    assert got.num_rows < aborted.num_rows          # the aborted transactions were dropped


def test_a_last_one_percent_read_fetches_only_its_chunks():
    with Log.open(prefix("c-zstd-aes-64kib", "multiseg"), read_only=True, rsm_keys=KEYS) as log:
        first = log.segments.first
        before = {w["base_offset"]: w["fetched_chunks"] for w in tiered.work()}
        got = [r.offset for r in log.records(1980, 2000)]
        after = {w["base_offset"]: w for w in tiered.work()}
    assert got == list(range(1980, 2000))
    w = after[first.base_offset]
    assert w["chunks"] == 4 and w["fetched_chunks"] - before[first.base_offset] == 1


# ---------------------------------------------------------------------------- paths
def test_every_path_form_resolves_to_the_view():
    part = prefix("b-zstd-64kib", "txn")
    view = storage.locate(part).root
    assert storage.locate(os.path.dirname(part)).root == os.path.dirname(view)
    assert storage.locate(objects("b-zstd-64kib")).root.startswith(tiered.SCHEME)
    manifest = sorted(n for n in os.listdir(part) if n.endswith(".rsm-manifest"))[0]
    assert storage.locate(os.path.join(part, manifest)).root == \
        os.path.join(view, manifest[:20] + LOG_SUFFIX)
    assert storage.locate(source("txn")).root == source("txn")          # a broker's dir
    assert tiered.real_path(view) == part


def test_a_log_dir_of_topic_prefixes_lists_every_partition():
    from kafkalog.verify import partition_dirs
    dirs = partition_dirs(objects("b-zstd-4mib"))
    assert [os.path.basename(d) for d in dirs] == ["multiseg-0", "txn-0"]


def test_a_log_dir_holding_tiered_prefixes_too_is_read_as_a_log_dir(tmp_path, caplog):
    shutil.copytree(source("txn"), tmp_path / "txn-0")
    shutil.copytree(os.path.join(objects("a-plain"), TOPIC_DIRS["txn"]),
                    tmp_path / TOPIC_DIRS["txn"])
    with caplog.at_level("WARNING", logger="kafkalog.tiered"):
        assert storage.locate(str(tmp_path)).root == str(tmp_path)
    assert "give the tiered prefixes as paths of their own" in caplog.text
    assert storage.locate(str(tmp_path / TOPIC_DIRS["txn"])).root.startswith(tiered.SCHEME)


def test_writing_a_view_is_refused():
    from kafkalog.errors import ReadOnlyStorageError
    with pytest.raises(ReadOnlyStorageError):
        Log.open(prefix("a-plain", "txn"))


def test_a_missing_prefix_is_log_not_found(tmp_path):
    missing = tmp_path / "t-suOFPkflZf8YsS9UYQZvbQ" / "0"
    os.makedirs(missing)
    with pytest.raises(LogNotFoundError):
        Log.open(str(missing), read_only=True)


# ---------------------------------------------------------------------------- keys and damage
def test_a_missing_key_names_the_key_id_and_the_object():
    with pytest.raises(TieredKeyError) as e:
        Log.open(prefix("d-aes-4kib-txn-only", "txn"), read_only=True)
    assert e.value.key_id == "key1" and e.value.object.endswith(".rsm-manifest")
    assert "key1" in str(e.value)


def test_verify_without_the_key_is_one_problem_naming_it():
    """Every segment fails for want of one key: one problem per partition, not one per
    segment (and its checkpoint) as damage."""
    report = verify_partition(prefix("c-zstd-aes-64kib", "multiseg"))
    [p] = report["problems"]
    assert p["code"] == "tiered_key_needed" and "'key1'" in p["message"]
    assert "--rsm-key key1=PATH" in p["message"] and p["file"].endswith(".rsm-manifest")


def test_a_wrong_key_is_refused():
    from cryptography.hazmat.primitives.asymmetric import rsa
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    with pytest.raises(TieredKeyError, match="does not decrypt"):
        Log.open(prefix("c-zstd-aes-64kib", "txn"), read_only=True, rsm_keys={"key1": other})


def test_keys_reach_only_the_call_they_were_given_to():
    part = prefix("c-zstd-aes-64kib", "txn")
    seg = os.path.join(part, sorted(n for n in os.listdir(part) if n.endswith(".log"))[2])
    with Log.open(part, read_only=True, rsm_keys=KEYS) as keyed:
        # later calls of the same process: without keys, or with the key under another id,
        # nothing is decrypted, whatever was given before
        with pytest.raises(TieredKeyError, match="no keys were given") as e:
            Log.open(part, read_only=True)
        assert e.value.key_id == "key1"
        with pytest.raises(TieredKeyError, match="keys given are for 'key2'"):
            Log.open(part, read_only=True, rsm_keys={"key2": KEYS["key1"]})
        with pytest.raises(TieredKeyError):
            kafkalog.read_arrow(part)
        with pytest.raises(TieredKeyError):
            list(iter_batches(seg))
        with pytest.raises(TieredKeyError):
            kafkalog.spark.plan([objects("c-zstd-aes-64kib")])
        # what the keys were given to keeps reading
        assert records(keyed) == originals("txn")
    assert len(list(iter_batches(seg, rsm_keys=KEYS))) > 0


def test_planned_tasks_read_with_the_planning_calls_keys_or_their_own():
    from kafkalog.scan.reader import read_task
    from kafkalog.tiered import crypto
    tasks = kafkalog.spark.plan([prefix("d-aes-4kib-txn-only", "txn")],
                                {"rsmKeys": json.dumps(KEYS)})
    assert sum(b.num_rows for b in read_task(tasks[0])) > 0
    # a task read in another process (no keyring there): only with the keys given to it
    crypto.forget_keys()
    storage.clear_cache()
    tiered.view._partitions.clear()
    with pytest.raises(TieredKeyError):
        list(read_task(tasks[1]))
    assert sum(b.num_rows for b in read_task(tasks[1], rsm_keys=KEYS)) > 0


def test_the_command_line_keys_are_the_commands():
    from kafkalog.cli import main
    part = prefix("d-aes-4kib-txn-only", "txn")
    assert main(["verify", "--rsm-key", f"key1={KEYS['key1']}", part]) == 0
    assert main(["verify", part]) == 1


# ---------------------------------------------------------------------------- which level
def test_plan_and_log_open_take_the_same_tiered_paths():
    root = objects("b-zstd-64kib")
    part = prefix("b-zstd-64kib", "txn")
    for path in (part, part + "/", "file://" + part):
        assert {t["topic"] for t in kafkalog.spark.plan([path])} == {"txn"}
        with Log.open(path, read_only=True) as log:
            assert log.log_end_offset == 594
    # a prefix holding partitions: planned whole, refused by Log.open naming them
    for path, names in ((os.path.dirname(part), "txn-0"), (root, "multiseg-0, txn-0")):
        planned = kafkalog.spark.plan([path])
        assert {(t["topic"], t["partition"]) for t in planned} == \
            {(n[:-2], 0) for n in names.split(", ")}
        shown = re.escape(path.rstrip("/"))     # as given, not as the keyed view rsm.<token>+
        for keys in (None, KEYS):
            with pytest.raises(PartitionNotFoundError,
                               match=f"^{shown}: a log dir holding .*\\({names}\\)"):
                Log.open(path, read_only=True, rsm_keys=keys)


@pytest.mark.parametrize("config,given,right", [
    ("c-zstd-aes-64kib", "objects", "objects/tiered"),      # the storage root, key.prefix below
    ("b-zstd-64kib", "", "objects"),                         # the config dir above it
])
def test_a_level_above_the_tiered_prefixes_names_the_right_path(config, given, right):
    path = os.path.join(TIERED, config, given).rstrip("/")
    want = re.escape(f"tiered-storage topic prefixes are below it, in "
                     f"{os.path.join(TIERED, config, right)}: give that path")
    for call in (lambda: kafkalog.read_arrow(path, rsm_keys=KEYS),
                 lambda: kafkalog.spark.plan([path], {"rsmKeys": KEYS}),
                 lambda: Log.open(path, read_only=True, rsm_keys=KEYS)):
        with pytest.raises(PartitionNotFoundError, match=want):
            call()


def test_a_key_file_that_is_no_key_is_refused(tmp_path):
    bad = tmp_path / "bad.pem"
    bad.write_text("-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n")
    with pytest.raises(TieredKeyError, match="key1"):
        tiered.keyring({"key1": str(bad)})
    with pytest.raises(TieredKeyError):
        tiered.keyring({"key1": str(tmp_path / "missing.pem")})


def test_without_cryptography_encrypted_objects_need_the_tiered_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "cryptography", None)
    with pytest.raises(MissingTieredExtraError) as e:
        tiered.keyring(KEYS)
    assert isinstance(e.value, ImportError) and e.value.missing == ("cryptography",)
    assert "kafkalog[tiered]" in str(e.value)
    with pytest.raises(MissingTieredExtraError):
        Log.open(prefix("c-zstd-aes-64kib", "txn"), read_only=True, rsm_keys=KEYS)
    # unencrypted objects need no extra
    assert records(Log.open(prefix("b-zstd-64kib", "txn"), read_only=True)) == \
        originals("txn")


def _copy(config, tmp_path):
    dst = tmp_path / config
    shutil.copytree(os.path.join(TIERED, config, "objects"), dst)
    return str(dst / CONFIGS[config].rstrip("/")) if CONFIGS[config] else str(dst)


def _segment_files(root, topic, suffix):
    part = os.path.join(root, TOPIC_DIRS[topic], "0")
    return sorted(os.path.join(part, n) for n in os.listdir(part) if n.endswith(suffix))


def _flip(path, at):
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0xFF]))


@pytest.mark.parametrize("config", ["b-zstd-64kib", "c-zstd-aes-64kib"])
def test_a_damaged_chunk_is_a_typed_error_naming_object_and_chunk(config, tmp_path):
    root = _copy(config, tmp_path)
    log_object = _segment_files(root, "multiseg", ".log")[0]
    manifest = json.load(open(log_object[:-4] + ".rsm-manifest"))
    sizes = tiered.decode_chunk_sizes(kafkalog.codecs.decompress(
        kafkalog.codecs.ZSTD, base64.b64decode(manifest["chunkIndex"]["transformedChunks"])))
    _flip(log_object, sizes[0] + sizes[1] // 2)                # inside chunk 1
    with Log.open(prefix(config, "multiseg", root), read_only=True, rsm_keys=KEYS) as log:
        with pytest.raises(CorruptTieredObjectError) as e:
            records(log, 2000)
    assert e.value.chunk == 1 and e.value.object.startswith(log_object)
    report = verify_partition(prefix(config, "multiseg", root), rsm_keys=KEYS)
    damaged = [p for p in report["problems"] if p["code"] == "damaged_object"]
    assert not report["ok"] and len(damaged) == 1 and "chunk 1" in damaged[0]["message"]
    assert sum(s["records"] or 0 for s in report["segments"]) == 28000 - 2000


def test_chunk_sizes_that_do_not_add_up_are_refused(tmp_path):
    root = _copy("a-plain", tmp_path)
    manifest_path = _segment_files(root, "txn", ".rsm-manifest")[0]
    manifest = json.load(open(manifest_path))
    manifest["chunkIndex"]["finalTransformedChunkSize"] += 1
    with open(manifest_path, "w") as f:
        json.dump(manifest, f)
    with Log.open(prefix("a-plain", "txn", root), read_only=True) as log:
        with pytest.raises(CorruptTieredObjectError, match="add up"):
            records(log)
    report = verify_partition(prefix("a-plain", "txn", root))
    assert [p["code"] for p in report["problems"]] == ["damaged_object"]


def test_a_short_index_object_is_refused(tmp_path):
    root = _copy("a-plain", tmp_path)
    indexes = _segment_files(root, "txn", ".indexes")[0]
    with open(indexes, "r+b") as f:
        f.truncate(os.path.getsize(indexes) - 10)
    report = verify_partition(prefix("a-plain", "txn", root))
    messages = [p["message"] for p in report["problems"] if p["code"] == "damaged_object"]
    assert messages and all("object has" in m for m in messages)


def test_a_manifest_that_is_no_manifest_is_refused(tmp_path):
    root = _copy("a-plain", tmp_path)
    manifest_path = _segment_files(root, "txn", ".rsm-manifest")[0]
    with open(manifest_path, "w") as f:
        f.write('{"version": "2"}')
    with pytest.raises(CorruptTieredObjectError, match="not a valid manifest") as e:
        Log.open(prefix("a-plain", "txn", root), read_only=True)
    assert e.value.object == manifest_path


def test_verify_passes_on_every_configuration():
    for config, topic in CASES:
        report = verify_partition(prefix(config, topic), rsm_keys=KEYS)
        assert report["ok"], (config, topic, report["problems"][:3])


# ---------------------------------------------------------------------------- codecs
def test_chunk_size_lists_as_the_readme_states_them():
    data = bytes.fromhex("00000004" "00003c3b" "01" "8e" "48" "00" "00003b3c")
    assert tiered.decode_chunk_sizes(data) == [15561, 15491, 15419, 15164]
    assert tiered.decode_chunk_sizes(bytes.fromhex("00000000")) == []
    assert tiered.decode_chunk_sizes(bytes.fromhex("00000001" "00001000")) == [4096]
    with pytest.raises(ValueError):
        tiered.decode_chunk_sizes(bytes.fromhex("00000002" "00001000" "05"))


def _oaep_sha3_512_encrypt(public_key, message, seed):
    """RFC 8017 7.1.1 with SHA3-512 (for the test only: the reverse of what kafkalog does)."""
    n, e = public_key.public_numbers().n, public_key.public_numbers().e
    k, h = (n.bit_length() + 7) // 8, 64
    db = hashlib.sha3_512(b"").digest() + b"\0" * (k - len(message) - 2 * h - 2) + b"\1" + message
    masked_db = crypto._xor(db, crypto._mgf1(seed, k - h - 1))
    masked_seed = crypto._xor(seed, crypto._mgf1(masked_db, h))
    m = int.from_bytes(b"\0" + masked_seed + masked_db, "big")
    return pow(m, e, n).to_bytes(k, "big")


def test_rsa_oaep_sha3_512_round_trips_and_refuses_tampering():
    from cryptography.hazmat.primitives import serialization
    with open(KEYS["key1"], "rb") as f:
        key = serialization.load_pem_private_key(f.read(), None)
    message = bytes(range(32))
    ct = _oaep_sha3_512_encrypt(key.public_key(), message, bytes(64))
    assert tiered.rsa_oaep_sha3_512_decrypt(key, ct) == message
    tampered = bytearray(ct)
    tampered[100] ^= 1
    assert tiered.rsa_oaep_sha3_512_decrypt(key, bytes(tampered)) is None
    assert tiered.rsa_oaep_sha3_512_decrypt(key, ct[1:]) is None


# ---------------------------------------------------------------------------- local + remote
def _broker_dir_above(tmp_path, first_kept):
    """A copy of the broker's txn-0 holding only the segments from ``first_kept`` (the rest
    went to tiered storage and were deleted locally)."""
    dst = tmp_path / "broker" / "txn-0"
    shutil.copytree(source("txn"), dst)
    for n in os.listdir(dst):
        if n[:20].isdigit() and int(n[:20]) < first_kept:
            os.remove(dst / n)
    return str(dst.parent)


def test_local_and_tiered_together_return_every_offset_once(tmp_path):
    pytest.importorskip("pyarrow")
    broker = _broker_dir_above(tmp_path, 528)
    both = kafkalog.read_arrow([broker, objects("c-zstd-aes-64kib")], rsm_keys=KEYS,
                               subscribe="txn")
    whole = kafkalog.read_arrow(source("txn"))
    assert both.column("offset").to_pylist() == whole.column("offset").to_pylist()
    assert both.column("value").to_pylist() == whole.column("value").to_pylist()


# ---------------------------------------------------------------------------- a bucket
@pytest.mark.parametrize("config", list(CONFIGS))
def test_a_bucket_reads_like_the_local_objects(config, s3, s3_tiered):
    url = s3_tiered[config]
    for topic in TOPIC_DIRS:
        if (config, topic) not in CASES:
            continue
        part = f"{url}/{TOPIC_DIRS[topic]}/0"
        with Log.open(part, read_only=True, storage_options=s3.options, rsm_keys=KEYS) as log:
            assert records(log) == originals(topic)
    report = verify_partition(f"{url}/{TOPIC_DIRS['txn']}/0", storage_options=s3.options,
                              rsm_keys=KEYS)
    assert report["ok"], report["problems"][:3]


def test_a_bucket_read_of_the_last_percent_fetches_one_chunk(s3, s3_tiered):
    part = f"{s3_tiered['c-zstd-aes-64kib']}/{TOPIC_DIRS['multiseg']}/0"
    with Log.open(part, read_only=True, storage_options=s3.options, rsm_keys=KEYS) as log:
        got = [r.offset for r in log.records(1980, 2000)]
    assert got == list(range(1980, 2000))
    first = next(w for w in tiered.work() if w["base_offset"] == 0)
    assert (first["fetched_chunks"], first["chunks"]) == (1, 4)
    assert first["requests"] == 2                    # the .indexes object, then one chunk


def test_a_bucket_of_tiered_partitions_is_discovered_from_one_listing(s3, s3_calls, tmp_path):
    # the partitions' prefixes, manifests and sizes from one recursive listing (1,000 keys a
    # request): the LIST requests do not grow with the partitions; one GET per manifest
    # (only two segments' manifests uploaded: what a view's listing reads)
    manifests = sorted(n for n in os.listdir(prefix("a-plain", "txn"))
                       if n.endswith(".rsm-manifest"))[:2]
    lists = []
    for count in (1, 3):
        root = tmp_path / f"p{count}"
        for p in range(count):
            os.makedirs(root / TOPIC_DIRS["txn"] / str(p))
            for name in manifests:
                shutil.copy(os.path.join(prefix("a-plain", "txn"), name),
                            root / TOPIC_DIRS["txn"] / str(p))
        url = s3.upload(root, f"tiered-listing/p{count}")
        storage.reset()
        s3_calls.clear()
        dirs = verify_partition_dirs(url, storage_options=s3.options)
        assert [os.path.basename(d) for d in dirs] == [f"txn-{p}" for p in range(count)]
        lists.append(s3_calls.pop("list_objects_v2"))
        assert s3_calls == {"get_object": count * len(manifests)}, s3_calls
    assert lists[0] == lists[1] <= 2, lists


# ---------------------------------------------------------------------------- command line
def test_the_command_line_takes_rsm_keys():
    run = [sys.executable, "-m", "kafkalog", "verify"]
    part = prefix("d-aes-4kib-txn-only", "txn")
    ok = subprocess.run(run + ["--rsm-key", f"key1={KEYS['key1']}", part],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "OK" in ok.stdout and "9 segments" in ok.stdout
    missing = subprocess.run(run + [part], capture_output=True, text=True)
    assert missing.returncode == 1 and "key1" in missing.stdout
    bad = subprocess.run(run + ["--rsm-key", "key1", part], capture_output=True, text=True)
    assert bad.returncode == 2 and "ID=PATH" in bad.stderr


def test_a_malformed_rsm_keys_option_is_refused():
    from kafkalog.errors import InvalidConfigError
    from kafkalog.spark.options import Options
    assert Options({"rsmKeys": '{"key1": "/k.pem"}'}).rsm_keys == {"key1": "/k.pem"}
    for bad in ("[1]", "not json", '{"key1": 5}'):
        with pytest.raises(InvalidConfigError, match="rsmKeys"):
            Options({"rsmKeys": bad}).rsm_keys
