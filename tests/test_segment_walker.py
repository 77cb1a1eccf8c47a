"""The one segment walker (``kafkalog.segment_walker``): its table of outcomes, what each policy
does and where it reports, the streamed form (dump's) against the whole-buffer form, both kernel
implementations; and no second walker left in ``kafkalog/``."""
import ast
import logging
import pathlib
import random
import struct

import numpy as np
import pytest

from kafkalog import Record, build_batch, segment_walker
from kafkalog.errors import CorruptRecordError
from kafkalog.segment_walker import (
    DUMP, ITERATE, ITERATE_STRICT, LOG, RECOVER, SALVAGE, FileWalk, Outcome, WalkPolicy,
    walk_segment,
)

from conftest import FIXTURES

ONE = len(build_batch([Record(key=b"k", value=b"v" * 50, timestamp=0)], base_offset=0))


def log_bytes(n=5):
    return b"".join(build_batch([Record(key=b"k", value=b"v" * 50, timestamp=i)],
                                base_offset=i) for i in range(n))


def patched(data, pos, raw):
    return data[:pos] + raw + data[pos + len(raw):]


@pytest.fixture
def impl(kernels, monkeypatch):
    """The walker on the compiled kernels and on their pure-Python twins."""
    monkeypatch.setattr(segment_walker, "walk_batches", kernels.walk_batches)
    monkeypatch.setattr(segment_walker, "next_valid_batch", kernels.next_valid_batch)
    return kernels


# name -> (bytes, outcome met, where it starts)
CASES = {
    "valid": (log_bytes(), None, None),
    "crc_failure": (patched(log_bytes(), 2 * ONE + 70, b"X"), Outcome.CRC_FAILURE, 2 * ONE),
    "invalid_header": (patched(log_bytes(), 2 * ONE + 8, struct.pack(">i", 5)),
                       Outcome.INVALID_HEADER, 2 * ONE),
    # a size running past an intact batch: a header that makes no sense, not a torn write
    "size_past_intact_batch": (patched(log_bytes(), 2 * ONE + 8, struct.pack(">i", 10**6)),
                               Outcome.INVALID_HEADER, 2 * ONE),
    "torn_tail": (log_bytes()[:-10], Outcome.TORN_TAIL, 4 * ONE),
    "garbage_tail": (log_bytes() + bytes(range(7, 107)), Outcome.INVALID_HEADER, 5 * ONE),
    "zeros": (log_bytes() + bytes(4096), Outcome.ZEROS, 5 * ONE),
    "short_zeros": (log_bytes() + bytes(9), Outcome.ZEROS, 5 * ONE),
}


@pytest.mark.parametrize("name", CASES)
def test_the_table_of_outcomes(impl, name):
    data, outcome, start = CASES[name]
    walk = walk_segment(data, policy=RECOVER)
    assert [(e.outcome, e.start) for e in walk.events] == \
        ([] if outcome is None else [(outcome, start)])
    assert walk.stop == (len(data) if outcome is None else start)
    assert len(walk.batches) == (start or len(data)) // ONE
    assert (walk.batches["crc_valid"] == 1).all()
    assert walk.error is None          # recovery reports, never raises


def test_missing_data_is_a_cut_batch_in_a_segment_that_is_not_the_last(impl):
    data = log_bytes()[:-10]
    (event,) = walk_segment(data, policy=SALVAGE, last_segment=False).events
    assert (event.outcome, event.code, event.start, event.offset) == \
        (Outcome.MISSING_DATA, "missing_data", 4 * ONE, 4)
    assert "not a torn write" in event.message
    (event,) = walk_segment(data, policy=SALVAGE).events
    assert (event.outcome, event.offset) == (Outcome.TORN_TAIL, 4)


def test_iterate_is_kafkas_iterator(impl):
    # a CRC failure raises after the batches before it, with its place
    walk = walk_segment(CASES["crc_failure"][0], policy=ITERATE, path="x.log")
    assert len(walk.batches) == 2
    with pytest.raises(CorruptRecordError) as e:
        walk.raise_for_outcome()
    assert (e.value.position, e.value.base_offset, e.value.path) == (2 * ONE, 2, "x.log")
    assert "CRC mismatch" in str(e.value)
    # without the check, the batch is read
    assert len(walk_segment(CASES["crc_failure"][0], validate_crc=False).batches) == 5
    # a header that cannot be one raises with the kernel's words; zeros of a header's size too
    for name in ("invalid_header", "zeros"):
        walk = walk_segment(CASES[name][0], policy=ITERATE)
        with pytest.raises(CorruptRecordError, match="smaller than the minimum"):
            walk.raise_for_outcome()
    # a cut batch is the end of the data, whatever its bytes (the walk does not judge them)
    for name in ("torn_tail", "size_past_intact_batch", "short_zeros", "garbage_tail"):
        walk = walk_segment(CASES[name][0], policy=ITERATE)
        walk.raise_for_outcome()
        assert [e.outcome for e in walk.events] == [Outcome.TORN_TAIL]
        with pytest.raises(CorruptRecordError):
            walk_segment(CASES[name][0], policy=ITERATE_STRICT).raise_for_outcome()


def test_dump_keeps_a_crc_failure_and_goes_on(impl):
    walk = walk_segment(CASES["crc_failure"][0], policy=DUMP)
    assert len(walk.batches) == 5 and list(walk.batches["crc_valid"]) == [1, 1, 0, 1, 1]
    (event,) = walk.events
    assert (event.outcome, event.start, event.end, event.offset) == \
        (Outcome.CRC_FAILURE, 2 * ONE, 3 * ONE, 2)


def test_salvage_resynchronises_after_damage(impl):
    walk = walk_segment(CASES["crc_failure"][0], policy=SALVAGE)
    assert list(walk.batches["base_offset"]) == [0, 1, 3, 4]
    (event,) = walk.events
    assert (event.start, event.end) == (2 * ONE, 3 * ONE) and event.row is not None
    walk = walk_segment(CASES["size_past_intact_batch"][0], policy=SALVAGE)
    assert list(walk.batches["base_offset"]) == [0, 1, 3, 4]
    assert "the next intact batch is at position" in walk.events[0].message


def test_where_an_outcome_is_reported_is_an_option(impl, caplog):
    policy = WalkPolicy(on_crc_failure="keep", report={Outcome.CRC_FAILURE: LOG})
    with caplog.at_level(logging.WARNING, logger="kafkalog.segment_walker"):
        walk = walk_segment(CASES["crc_failure"][0], policy=policy, path="p.log")
    assert walk.error is None and len(walk.batches) == 5
    assert "p.log: crc_mismatch at position" in caplog.text


def test_positions_are_the_files(impl):
    data = CASES["crc_failure"][0]
    walk = walk_segment(data[ONE:], policy=ITERATE, position_base=ONE, path="x.log")
    with pytest.raises(CorruptRecordError) as e:
        walk.raise_for_outcome()
    assert e.value.position == 2 * ONE


def _damaged(rng, data):
    kind = rng.randrange(5)
    b = bytearray(data)
    if kind == 0:
        b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
    elif kind == 1:
        del b[rng.randrange(len(b)):]
    elif kind == 2:
        b += bytes(rng.randrange(1, 3000))
    elif kind == 3:
        i = rng.randrange(len(b))
        b[i:i + 16] = bytes(rng.randrange(256) for _ in range(16))
    else:
        b += bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300)))
    return bytes(b)


def _facts(events):
    # what the kernel saw is the same in both forms; only the whole-buffer form looks past a
    # cut batch for an intact one (the streamed form does not read what it need not)
    return [(e.start, e.cut, e.reason) if e.outcome is not Outcome.CRC_FAILURE else
            (e.start, "crc") for e in events]


def test_the_streamed_walk_is_the_whole_buffer_walk(impl):
    rng = random.Random(28)
    data = log_bytes(20)
    for _ in range(150):
        damaged = _damaged(rng, data)
        whole = walk_segment(damaged, policy=DUMP)

        def read(pos, n):
            return damaged[pos:pos + n]
        streamed = FileWalk(read, len(damaged), len(damaged), policy=DUMP, first=100, most=300)
        rows = [whole.batches[:0]]
        for pos, _, batches in streamed:
            batches = batches.copy()
            batches["position"] += pos
            rows.append(batches)
        rows = np.concatenate(rows)
        assert np.array_equal(rows, whole.batches)
        assert _facts(streamed.events) == _facts(whole.events)


def test_the_streamed_walk_cut_by_max_bytes_is_no_damage(impl):
    data = log_bytes()
    walk = FileWalk(lambda p, n: data[p:p + n], 3 * ONE + 20, len(data), policy=DUMP)
    assert sum(len(b) for _, _, b in walk) == 3 and walk.events == []


def test_every_kafka_written_segment_walks_clean():
    for log in sorted(FIXTURES.glob("*/*.log")):
        if not log.parent.name.startswith(("corrupt", "crashed")):    # damaged on purpose
            assert walk_segment(log.read_bytes(), policy=SALVAGE).events == [], log


# ------------------------------------------------------------------------------ no second walker
KAFKALOG = pathlib.Path(__file__).resolve().parent.parent / "kafkalog"
WALK_KERNELS = {"walk_batches", "next_valid_batch"}
# The walker and the kernels themselves (and their selection point).
KERNEL_FILES = {"segment_walker.py", "_kernels.py"}

# Calls that keep only the batch array (``walk_batches(...)[0]``): they read the headers of
# bytes whose outcome is already known, so they judge nothing. Allowed in these files only.
HEADER_READS = {
    "log.py": "the producer's batches of an append, validated whole before they are read",
    "leader_epoch.py": "the producer's batches of an append, validated whole before their "
                       "leader epochs are read",
    "log_validator.py": "the producer's batches of an append: LogValidator reads their "
                        "headers to validate them (prepare_append refuses a torn or bad one)",
    "loader.py": "recovered segments (recovery judged them through the walker): producer "
                 "state rebuilt from them, an overflowed segment split",
    "cleaner.py": "a segment below the first dirty offset, recovered before it is cleaned",
    "segment.py": "the segment's own recovered bytes: index entries, the largest timestamp, "
                  "the roll time",
    "segment_recovery.py": "a sound segment's indexes rebuilt from its own bytes "
                           "(rebuild_index_files: recovery judged them)",
    "file_records.py": "the segment's own recovered bytes: the batch found for a timestamp "
                       "(FileRecords.search_for_timestamp)",
}
# Calls that look at the kernel's status: none outside the walker but these.
STATUS_READS = {
    ("segment.py", "batches"): "LogSegment.batches hands the kernel's tuple to read planning "
                               "(stop positions); a CRC failure stops it",
}


def _kernel_calls(path):
    tree = ast.parse(path.read_text())
    parents = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[child] = node
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else \
            func.attr if isinstance(func, ast.Attribute) else None
        if name not in WALK_KERNELS:
            continue
        parent = parents.get(node)
        header_read = (name == "walk_batches" and isinstance(parent, ast.Subscript)
                       and parent.value is node and isinstance(parent.slice, ast.Constant)
                       and parent.slice.value == 0)
        enclosing = parent
        while enclosing is not None and not isinstance(enclosing, (ast.FunctionDef,
                                                                   ast.AsyncFunctionDef)):
            enclosing = parents.get(enclosing)
        yield name, node.lineno, header_read, getattr(enclosing, "name", None)


def test_there_is_no_second_walker():
    """Every walk of a segment that judges what stops it goes through the walker: outside it
    (and the kernels) the walk kernels are called only to read headers of judged bytes, in
    the files listed with why, and the kernel's status is read only where listed."""
    found = []
    for path in sorted(KAFKALOG.rglob("*.py")):
        rel = path.relative_to(KAFKALOG).as_posix()
        if rel in KERNEL_FILES or (path.name.startswith("_") and path.name.endswith("_py.py")):
            continue                         # the pure-Python twins of the kernels
        for name, line, header_read, function in _kernel_calls(path):
            if header_read and rel in HEADER_READS:
                continue
            if name == "walk_batches" and (rel, function) in STATUS_READS:
                continue
            found.append(f"{rel}:{line} {name} in {function}")
    assert found == [], "walk the segment with kafkalog.segment_walker instead"


def test_the_allow_lists_name_what_exists():
    """An entry whose calls are gone goes too."""
    reads = set()
    for path in sorted(KAFKALOG.rglob("*.py")):
        rel = path.relative_to(KAFKALOG).as_posix()
        reads |= {rel for _, _, header_read, _ in _kernel_calls(path) if header_read}
    assert set(HEADER_READS) <= reads


def test_the_scan_reader_without_fail_on_data_loss_warns_and_stops(caplog):
    import kafkalog
    with caplog.at_level(logging.WARNING, logger="kafkalog.segment_walker"):
        table = kafkalog.read_arrow(FIXTURES / "corrupt_flip-0", fail_on_data_loss=False)
    assert table.num_rows == 1890
    [warning] = [r.getMessage() for r in caplog.records if r.name == "kafkalog.segment_walker"]
    assert "crc_mismatch at position 38490" in warning and "the walk stops there" in warning


def test_the_walk_says_what_ended_it(impl):
    assert walk_segment(log_bytes(), policy=RECOVER).outcome is Outcome.END
    assert walk_segment(CASES["zeros"][0], policy=RECOVER).outcome is Outcome.ZEROS
    # resynchronised past the damage, the walk ends at the end
    walk = walk_segment(CASES["crc_failure"][0], policy=SALVAGE)
    assert walk.outcome is Outcome.END and walk.stop == len(CASES["crc_failure"][0])
