"""The one walk over the record batches of a segment (or of any buffer of batches).

Kafka walks a ``.log`` file with ``FileRecords.batchIterator`` and judges what stops the walk
in several places (the consumer's ``ensureValid``, ``LogSegment.recover``, ``DumpLogSegments``).
Here one walker does it for every reader: dump, verify, salvage, ``iter_batches``, recovery's
report and the scan reader. It calls the ``walk_batches`` kernel once per stretch of whole
batches (and ``next_valid_batch`` to resynchronise after damage, when asked), and sorts what
it meets into ONE table of outcomes:

=================  =================  =====================================================
outcome            code               what the bytes are
=================  =================  =====================================================
``VALID``          ``valid``          a whole batch (its CRC valid, or not checked)
``CRC_FAILURE``    ``crc_mismatch``   a whole batch whose stored CRC does not match
``INVALID_HEADER`` ``corrupt_batch``  bytes where a batch should start that cannot be one (a
                                      size below the minimum, an unknown magic, a size running
                                      past a later intact batch, garbage at the end)
``TORN_TAIL``      ``torn_tail``      the last segment ends inside a batch (a write cut short)
``MISSING_DATA``   ``missing_data``   a segment that is not the last ends inside a batch: the
                                      rest of the batch is missing (no write tears it there)
``ZEROS``          ``log_zero_tail``  all-zero bytes to the end (a preallocated segment not
                                      trimmed: not closed cleanly)
``OUT_OF_ORDER``   ``offsets_not_``   a whole batch that does not start after the batch
                   ``increasing``     before it ended (or at or below the offset the walk
                                      must start above: its segment's base, the previous
                                      segment's last): its base offset, which the CRC does
                                      not cover, is damaged, or the batch is misplaced
``END``            ``end``            every byte walked (or the bytes asked for: a cut)
=================  =================  =====================================================

What a walk does at each outcome is its ``WalkPolicy``: a CRC failure stops it, is kept (its
size is intact, the walk goes on after it) or is skipped by resynchronising; an invalid
header stops it or is skipped by resynchronising; a batch out of order stops it, is kept or
is skipped (the next batch must then follow the one before it), or is not looked for (Kafka's
recovery, which splits a segment whose offsets do not fit its base instead); a cut batch or
zeros end it. Where each is
reported is the policy's too: ``raise`` (a ``CorruptRecordError`` after the batches before it,
``SegmentWalk.raise_for_outcome``), ``log`` (WARNING on ``kafkalog.segment_walker``),
``report`` (a ``WalkEvent`` in the walk's ``events`` only) or ``ignore``. ``judge_tail=False``
sees a cut batch as Kafka's iterator does (the end of the data, whatever its bytes);
otherwise its bytes are looked at to tell a torn write from zeros, missing data and garbage.
"""
from __future__ import annotations

import enum
import logging
import os
import struct
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, NamedTuple

import numpy as np

from kafkalog._kernels import next_valid_batch, walk_batches
from kafkalog._layout import (
    HEADER_SIZE_UP_TO_MAGIC, LEGACY_OVERHEAD_V0, LOG_OVERHEAD, WALK_END,
    WALK_INVALID, WALK_PARTIAL,
)
from kafkalog.errors import (
    CorruptRecordError, KafkaLogError, NotASegmentFileError, OffsetsOutOfOrderError,
)
from kafkalog.files import (
    CLEANER_OFFSET_CHECKPOINT, LEADER_EPOCH_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT,
    LOG_SUFFIX, META_PROPERTIES, PARTITION_METADATA, RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT, parse_file_name, parse_kraft_snapshot_name,
    parse_log07_file_name,
)
from kafkalog.storage_local import cut_under

if TYPE_CHECKING:
    from kafkalog._typing import StrPath

log = logging.getLogger(__name__)


class Outcome(str, enum.Enum):
    """What the walk met (the values are ``kafkalog verify``'s codes)."""
    VALID = "valid"
    CRC_FAILURE = "crc_mismatch"
    INVALID_HEADER = "corrupt_batch"
    TORN_TAIL = "torn_tail"
    MISSING_DATA = "missing_data"
    ZEROS = "log_zero_tail"
    OUT_OF_ORDER = "offsets_not_increasing"
    END = "end"


# What the walk does at a CRC failure, an invalid header or a batch out of order.
STOP, KEEP, RESYNC, SKIP = "stop", "keep", "resync", "skip"
# Where an outcome is reported.
RAISE, LOG, REPORT, IGNORE = "raise", "log", "report", "ignore"

class WalkPolicy(NamedTuple):
    """What a walk does at each outcome and where it reports it.

    ``on_crc_failure``: ``"stop"``, ``"keep"`` (yield it, ``crc_valid`` 0, and go on after
    it) or ``"resync"``; ``on_invalid_header``: ``"stop"`` or ``"resync"`` (go on at the next
    position where a whole batch with a valid CRC begins); ``judge_tail``: look at the bytes of
    a cut batch (else it is a torn tail, as Kafka's iterator sees it); ``report``: outcome ->
    ``"raise"``, ``"log"``, ``"report"`` or ``"ignore"`` (an outcome left out is reported);
    ``on_out_of_order``: ``"stop"``, ``"keep"``, ``"skip"`` or None (offsets not checked).
    A raised outcome stops the walk."""
    on_crc_failure: str = STOP
    on_invalid_header: str = STOP
    judge_tail: bool = True
    report: Mapping[Outcome, str] = {}
    on_out_of_order: str | None = None

    def action(self, outcome: Outcome) -> str:
        return self.report.get(outcome, REPORT)


# Kafka's consumer: FileRecords.batchIterator, each batch's ensureValid; a cut batch is the end.
# A batch out of order is data loss, as Spark's Kafka source sees a gap (failOnDataLoss).
ITERATE = WalkPolicy(judge_tail=False, on_out_of_order=STOP, report={
    Outcome.CRC_FAILURE: RAISE, Outcome.INVALID_HEADER: RAISE, Outcome.TORN_TAIL: IGNORE,
    Outcome.OUT_OF_ORDER: RAISE})
# The scan reader with failOnDataLoss=false: as ITERATE, but damage is a WARNING, not an error
# (a batch out of order is skipped).
ITERATE_LENIENT = WalkPolicy(judge_tail=False, on_out_of_order=SKIP, report={
    Outcome.CRC_FAILURE: LOG, Outcome.INVALID_HEADER: LOG, Outcome.TORN_TAIL: IGNORE,
    Outcome.OUT_OF_ORDER: LOG})
# Bytes that must be whole batches (data to append, a compressed wrapper's inner set).
ITERATE_STRICT = WalkPolicy(judge_tail=False, on_out_of_order=STOP, report={
    Outcome.CRC_FAILURE: RAISE, Outcome.INVALID_HEADER: RAISE, Outcome.TORN_TAIL: RAISE,
    Outcome.OUT_OF_ORDER: RAISE})
# DumpLogSegments: a bad CRC or a batch out of order is shown and the walk goes on;
# structural damage ends it.
DUMP = WalkPolicy(on_crc_failure=KEEP, on_out_of_order=KEEP)
# Salvage and verify: every damaged region is skipped and reported.
SALVAGE = WalkPolicy(on_crc_failure=RESYNC, on_invalid_header=RESYNC, on_out_of_order=SKIP)
# LogSegment.recover: the first damage ends the valid bytes; the rest is cut. Offsets are not
# checked here: a segment whose offsets do not fit its base is split, as Kafka's recovery does.
RECOVER = WalkPolicy()


class WalkEvent(NamedTuple):
    """One outcome other than a valid batch: bytes ``[start, end)`` (positions in the file,
    or in the buffer plus ``position_base``), where no intact batch begins.

    ``message`` says what they are for people; ``reason`` is the short why of an exception:
    the kernel's words for a CRC failure or a header that cannot be one, for a cut batch how
    many bytes it declares and how many remain; ``cut``: the bytes ended inside a batch; ``row``: the ``BATCH_DTYPE`` header of a batch
    failing its CRC, else None; ``offset``: the offset concerned when known (a CRC failure's
    base offset, a cut batch's header's)."""
    outcome: Outcome
    start: int
    end: int
    message: str
    reason: str | None
    cut: bool
    row: Any
    offset: int | None

    @property
    def code(self) -> str:
        """The outcome's code (``kafkalog verify``'s)."""
        return self.outcome.value


class SegmentWalk:
    """A walk's result: ``batches`` (``BATCH_DTYPE``, buffer positions, in walk order: the
    whole batches with a valid CRC, those with a bad one too when kept), ``events`` (a
    ``WalkEvent`` per other outcome met, in order) and ``stop`` (the buffer position where the
    walk ended: the end, or the start of the damage that ended it)."""
    __slots__ = ("batches", "events", "stop", "error", "ended_early")

    def __init__(self, batches, events, stop, error, ended_early):
        self.batches = batches
        self.events = events
        self.stop = stop
        self.error = error
        self.ended_early = ended_early

    @property
    def outcome(self) -> Outcome:
        """What ended the walk: ``END``, or the outcome of the damage it stopped at."""
        return self.events[-1].outcome if self.ended_early else Outcome.END

    def raise_for_outcome(self) -> None:
        """Raise the ``CorruptRecordError`` of the outcome that the policy raises, if one was
        met (after the caller has used the batches before it)."""
        if self.error is not None:
            raise self.error


_OTHER_FILES = (LEADER_EPOCH_CHECKPOINT, PARTITION_METADATA, META_PROPERTIES,
                RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT,
                REPLICATION_OFFSET_CHECKPOINT, CLEANER_OFFSET_CHECKPOINT)


def check_is_segment(path: StrPath | None, buf: Any) -> None:
    """Raise ``NotASegmentFileError`` when the file at ``path`` (``buf``: its bytes) is no
    segment of record batches: a file Kafka names otherwise (an index, a producer snapshot, a
    checkpoint, a 0.7 segment), or one not named as a segment whose first bytes are no batch
    header (a text file; Kafka's iterator would stop there and read nothing, silently). A
    segment named so (``.log``, a KRaft ``.checkpoint``) is left to the walk: its damage is
    reported as such. Nothing for a buffer (``path`` None)."""
    if path is None:
        return
    name = os.path.basename(os.fspath(path))
    parsed = parse_file_name(name)
    if parsed is not None and parsed[1] == LOG_SUFFIX or \
            parse_kraft_snapshot_name(name) is not None:
        return
    magic = bytes(buf[HEADER_SIZE_UP_TO_MAGIC - 1:HEADER_SIZE_UP_TO_MAGIC])
    if parsed is not None:
        what = f"a {parsed[1]} file of a partition"
    elif parse_log07_file_name(name) is not None:
        what = "a Kafka 0.7 segment (.kafka files are read with Log07)"
    elif name in _OTHER_FILES:
        what = f"Kafka's {name} file"
    elif magic and magic[0] > 2:
        what = (f"no record batch at position 0 (magic byte {magic[0]} at position "
                f"{HEADER_SIZE_UP_TO_MAGIC - 1}, where 0, 1 or 2 is expected)")
    else:
        return
    raise NotASegmentFileError(f"{path}: {what}, not a segment (.log) of record batches")


def walk_segment(buf: Any, start: int = 0, end: int = -1, *, policy: WalkPolicy = ITERATE,
                 validate_crc: bool = True, last_segment: bool = True,
                 path: StrPath | None = None, position_base: int = 0,
                 legacy: bool = True, after: int | None = None,
                 before: int | None = None) -> SegmentWalk:
    """Walk the batches of ``buf[start:end]`` (a whole ``.log`` file or a slice of one starting
    at file position ``position_base``) with one kernel call per stretch of whole batches.

    ``last_segment``: whether the bytes end the partition's log (a cut batch there is a torn
    write; elsewhere, missing data); ``legacy``: also resynchronise on magic 0/1 entries;
    ``after``: the offset the first batch must start above (its segment's base offset - 1,
    or the last offset read before), None for no bound; each later batch must start above
    the one before it (when the policy checks offsets); ``before``: the offset every batch
    must end below (the next segment's base offset), None for no bound: a batch claiming a
    later segment's offsets is the one out of order, not every batch after it.
    Returns a ``SegmentWalk``; reports as ``policy`` says.
    """
    end = len(buf) if end < 0 or end > len(buf) else end
    keep_crc = validate_crc and _reaction(policy, Outcome.CRC_FAILURE) == KEEP
    order = policy.on_out_of_order
    runs, error, cut = [], None, None
    events: list[WalkEvent] = []
    pos = start
    while True:
        batches, status, stop, reason = walk_batches(buf, pos, end, validate_crc=validate_crc,
                                                     stop_on_invalid=not keep_crc)
        met = len(events)
        if order is not None and len(batches):
            batches, after, cut = _in_order(batches, after, before, order, events, policy,
                                            path, position_base, buf)
            if cut is not None:             # stopped at a batch out of order
                runs.append(batches)
                stop, error = cut
                break
        runs.append(batches)
        if keep_crc:
            for i in np.flatnonzero(batches["crc_valid"] == 0).tolist():
                events.append(_crc_event(batches[i], position_base, None))
                _report(events[-1], policy, path, position_base, buf)
            events[met:] = sorted(events[met:], key=_start)     # kept ones in file order
        if status == WALK_END:
            break
        event, resume = _judge(buf, status, stop, end, reason, policy, last_segment,
                               position_base, legacy, lambda: _zeros(buf, stop, end))
        events.append(event)
        error = _report(event, policy, path, position_base, buf)
        if error is not None or resume < 0:
            break
        pos = resume
    return SegmentWalk(_joined(runs), events, stop, error, status != WALK_END or cut is not None)


def _in_order(batches, after, before, order, events, policy, path, base, buf):
    """Check that each of ``batches`` starts above ``after`` and above the batch before it,
    and ends below ``before``: (the batches the walk keeps, the last offset the next must
    start above, None or, when the walk stops at a batch out of order, (its position, the
    error raised or None)). A batch skipped or kept out of order does not move the bound."""
    bases, lasts = batches["base_offset"], batches["last_offset"]
    if (after is None or bases[0] > after) and (bases[1:] > lasts[:-1]).all() and \
            (before is None or lasts.max() < before):
        return batches, int(lasts[-1]), None      # one comparison per batch: the usual case
    bad = []
    for i in range(len(batches)):          # damaged data only: one batch at a time
        late = before is not None and lasts[i] >= before
        if after is not None and bases[i] <= after or late:
            row = batches[i]
            start = int(row["position"])
            why = f"batch with offsets {int(bases[i])}-{int(lasts[i])} " + \
                (f"reaches the next segment's base offset {before}" if late else
                 f"does not follow offset {after}")
            events.append(WalkEvent(
                Outcome.OUT_OF_ORDER, base + start, base + start + int(row["size"]), why, why,
                False, row.copy(), int(bases[i])))
            error = _report(events[-1], policy, path, base, buf, after)
            if order == STOP or error is not None:
                return batches[:i], after, (start, error)
            bad.append(i)
        else:
            after = int(lasts[i])
    if order == SKIP:
        batches = np.delete(batches, bad)
    return batches, after, None


def intact_extent(buf: Any, start: int = 0, end: int = -1) -> tuple[int, int | None, int | None]:
    """What a salvage read keeps of ``buf[start:end]`` (the ``SALVAGE`` walk: damage skipped):
    ``(records, first offset, last offset)`` of its whole batches with a valid CRC, offsets
    None when there is none. A legacy compressed wrapper counts as one record (its header says
    no more without decompressing it)."""
    batches = walk_segment(buf, start, end, policy=SALVAGE).batches
    if not len(batches):
        return 0, None, None
    records = int(np.where(batches["magic"] == 2, batches["record_count"], 1).sum())
    return records, int(batches["base_offset"].min()), int(batches["last_offset"].max())


def _start(event):
    return event.start


def _joined(runs):
    return runs[0] if len(runs) == 1 else np.concatenate(runs)


def _zeros(buf, start, end):
    return not np.frombuffer(buf, np.uint8, end - start, start).any()


def _reaction(policy, outcome):
    if policy.action(outcome) == RAISE:
        return STOP
    if outcome is Outcome.CRC_FAILURE:
        return policy.on_crc_failure
    if outcome is Outcome.OUT_OF_ORDER:
        return policy.on_out_of_order
    return policy.on_invalid_header if outcome is Outcome.INVALID_HEADER else STOP


def _judge(buf, status, stop, end, reason, policy, last_segment, base, legacy, all_zero,
           probe=True, extent=None):
    """(the ``WalkEvent`` of what stopped the kernel's walk at ``stop``, the buffer position
    where the walk goes on or -1). ``extent``: the bytes from ``stop`` to the end of the data
    when ``buf`` holds fewer (``end - stop`` by default)."""
    if status == WALK_INVALID:
        row = walk_batches(buf, stop, end, validate_crc=False, max_batches=1)[0][0]
        reaction = _reaction(policy, Outcome.CRC_FAILURE)
        if reaction == STOP:
            return _crc_event(row, base, None, reason), -1
        resume = _next_valid(buf, stop, end, legacy) if reaction == RESYNC else \
            int(row["position"] + row["size"])
        return _crc_event(row, base, resume, reason, end), resume
    n = end - stop if extent is None else extent
    cut = status == WALK_PARTIAL
    resync = _reaction(policy, Outcome.INVALID_HEADER) == RESYNC
    why = partial_tail_message(buf, stop, n) if cut else reason
    if cut and not policy.judge_tail:
        return _event(Outcome.TORN_TAIL, stop, stop + n, base, why, why, True,
                      _header_offset(buf, stop, end)), -1
    resume = _next_valid(buf, stop, end, legacy) if probe and (cut or resync) else -1
    if policy.judge_tail and resume < 0 and all_zero():
        return _event(Outcome.ZEROS, stop, stop + n, base,
                      f"{n} all-zero bytes at the end of the file (left at a preallocated "
                      f"size, log.preallocate: not closed cleanly)", why, cut, None), -1
    until = resume if resume >= 0 else stop + n
    go_on = resume if resync else -1
    if not cut or resume >= 0:
        return _event(Outcome.INVALID_HEADER, stop, until, base, why + _after(resume, base),
                      why, cut, None), go_on
    if not _plausible_header(buf, stop, end):
        return _event(Outcome.INVALID_HEADER, stop, stop + n, base,
                      f"{n} bytes at the end of the file are not a batch: {why}", why, True,
                      None), -1
    offset = _header_offset(buf, stop, end)
    if last_segment:
        return _event(Outcome.TORN_TAIL, stop, stop + n, base,
                      f"incomplete batch, {n} bytes at the end of the file (a torn write): "
                      f"{why}", why, True, offset), -1
    return _event(Outcome.MISSING_DATA, stop, stop + n, base,
                  f"the last {n} bytes are an incomplete batch and this is not the last "
                  f"segment: the rest of the batch is missing (not a torn write): {why}", why,
                  True, offset), -1


def _event(outcome, stop, until, base, message, reason, cut, offset):
    return WalkEvent(outcome, base + stop, base + until, message, reason, cut, None, offset)


def _crc_event(row, base, resume, reason="record is corrupt (CRC mismatch)", end=None):
    """A CRC failure's event: its bytes are the batch's, or (resynchronising: ``resume``,
    -1 for none before ``end``) up to the next intact batch."""
    start = int(row["position"])
    until = own = int(row["position"] + row["size"])
    if resume is not None:
        until = resume if resume >= 0 else end
    after = "" if until == own else _after(resume, base)
    return WalkEvent(Outcome.CRC_FAILURE, base + start, base + until,
                     f"batch with offsets {int(row['base_offset'])}-{int(row['last_offset'])} "
                     f"fails its CRC check (stored {int(row['crc'])}){after}", reason, False,
                     row.copy(), int(row["base_offset"]))


def _after(resume, base):
    if resume < 0:
        return "; no intact batch follows"
    return f"; the next intact batch is at position {base + resume}"


def _next_valid(buf, stop, end, legacy):
    return next_valid_batch(buf, stop + 1, end, legacy)[0] if stop < end else -1


def _header_offset(buf, pos, end):
    return struct.unpack_from(">q", buf, pos)[0] if end - pos >= 8 else None


_MAX_PLAUSIBLE_SIZE = 2**30     # a cut batch declaring more is taken for garbage


def _plausible_header(buf, pos, end):
    """Whether the bytes of a cut batch look like the start of a batch header (a torn write)
    rather than garbage: a non-negative base offset, a size of at least a batch's minimum and
    a known magic, as far as the bytes go."""
    remaining = end - pos
    if remaining >= 8 and struct.unpack_from(">q", buf, pos)[0] < 0:
        return False
    if remaining >= 12 and not LEGACY_OVERHEAD_V0 <= struct.unpack_from(">i", buf, pos + 8)[0] \
            <= _MAX_PLAUSIBLE_SIZE:
        return False
    return remaining < HEADER_SIZE_UP_TO_MAGIC or buf[pos + 16] in (0, 1, 2)


def partial_tail_message(buf: Any, position: int, remaining: int | None = None) -> str:
    """Why the ``remaining`` bytes at ``position`` (default: to the buffer's end) are not a
    whole batch."""
    if remaining is None:
        remaining = len(buf) - position
    if remaining < HEADER_SIZE_UP_TO_MAGIC:
        return f"{remaining} trailing bytes are too few for a batch header"
    declared = struct.unpack_from(">i", buf, position + 8)[0]
    return f"batch declares {declared} bytes after its length field but only " \
           f"{remaining - LOG_OVERHEAD} remain"


def _report(event, policy, path, base, buf, previous=None):
    """Log the event or make its exception, as the policy says; returns the exception.
    ``previous``: the offset a batch out of order had to start above."""
    action = policy.action(event.outcome)
    if action == LOG:
        reaction = _reaction(policy, event.outcome)
        log.warning("%s: %s at position %d: %s%s", path or "<buffer>", event.outcome.value,
                    event.start, event.message,
                    "; the walk stops there" if reaction == STOP else
                    " (failOnDataLoss=false: the batch is skipped)" if reaction == SKIP else "")
    if action != RAISE:
        return None
    cut = cut_under(buf)       # a file cut under its mapping explains any outcome
    if cut is not None:
        return cut
    if event.outcome is Outcome.OUT_OF_ORDER:
        return OffsetsOutOfOrderError(
            f"{event.reason}: offsets would repeat or come out of order (data loss; "
            f"read_arrow and Spark skip such a batch with a warning with failOnDataLoss=false)",
            position=event.start, path=path, base_offset=event.offset,
            previous_offset=previous)
    offset = None
    if event.outcome is Outcome.CRC_FAILURE:
        offset = event.offset
    elif not event.cut:
        offset = _header_offset(buf, event.start - base, len(buf))
    return CorruptRecordError(event.reason, position=event.start, path=path, base_offset=offset)


# ----------------------------------------------------------------------------------------------
# A file read in bounded stretches (dump: the first lines come at once, memory stays bounded)

class FileWalk:
    """The walk of bytes ``[0, end)`` of a file of ``size`` bytes, read by ``read(position,
    n)`` in stretches of whole batches (``first`` bytes growing to ``most``; more only for one
    batch larger than that). Iterating yields ``(position, buf, batches)`` per stretch
    (``batches`` with positions in ``buf``, which starts at file position ``position``); then
    ``events`` holds what the walk met (file positions) and ``stop`` where it ended. A cut at
    ``end`` < ``size`` (bytes not asked for) is no damage. It stops at the first damage other
    than a kept CRC failure (it does not resynchronise, nor read past a cut batch for an
    intact one: only, for zeros, the rest of the file). ``after``, ``before``: as
    ``walk_segment``'s."""

    def __init__(self, read: Callable[[int, int], bytes], end: int, size: int, *,
                 policy: WalkPolicy = DUMP, validate_crc: bool = True,
                 last_segment: bool = True, path: StrPath | None = None,
                 first: int = 64 * 1024, most: int = 256 * 1024,
                 after: int | None = None, before: int | None = None) -> None:
        self.read = read
        self.end = end
        self.size = size
        self.policy = policy
        self.validate_crc = validate_crc
        self.last_segment = last_segment
        self.path = path
        self.first = first
        self.most = most
        self.after = after
        self.before = before
        self.events: list[WalkEvent] = []
        self.stop = 0
        self.error: KafkaLogError | None = None

    def __iter__(self) -> Iterator[tuple[int, Any, np.ndarray]]:
        policy, end = self.policy, self.end
        keep_crc = self.validate_crc and _reaction(policy, Outcome.CRC_FAILURE) == KEEP
        want, pos = self.first, 0
        while pos < end:
            buf = self.read(pos, min(want, end - pos))
            if not buf:                        # the file shrank meanwhile
                break
            at_end = pos + len(buf) >= end
            batches, status, stop, reason = walk_batches(
                buf, validate_crc=self.validate_crc, stop_on_invalid=not keep_crc)
            cut, met = None, len(self.events)
            if policy.on_out_of_order is not None and len(batches):
                batches, self.after, cut = _in_order(batches, self.after, self.before,
                                                     policy.on_out_of_order, self.events,
                                                     policy, self.path, pos, buf)
            if keep_crc:
                for i in np.flatnonzero(batches["crc_valid"] == 0).tolist():
                    self._add(_crc_event(batches[i], pos, None), buf, pos)
                self.events[met:] = sorted(self.events[met:], key=_start)
            if len(batches):
                yield pos, buf, batches
            if cut is not None:                # stopped at a batch out of order
                self.stop = pos + cut[0]
                self.error = self.error or cut[1]
                return
            self.stop = pos + stop
            if status == WALK_END:
                pos += stop
                want = min(want * 2, self.most)
                continue
            if status == WALK_PARTIAL and not at_end:
                if len(batches):
                    pos += stop
                    want = min(want * 2, self.most)
                    continue
                declared = struct.unpack_from(">i", buf, stop + 8)[0]
                if pos + stop + LOG_OVERHEAD + declared <= end:
                    want = max(want * 2, declared + LOG_OVERHEAD)
                    continue
            if status == WALK_PARTIAL and end < self.size:
                return                         # cut by the bytes asked for: no damage
            # Judged on what was read: the rest is read only to see whether it is all zeros.
            event, _ = _judge(buf, status, stop, len(buf), reason, policy, self.last_segment,
                              pos, True, lambda: self._zeros(buf, stop, pos), probe=False,
                              extent=end - pos - stop)
            self._add(event, buf, pos)
            return

    def _add(self, event, buf, pos):
        self.events.append(event)
        error = _report(event, self.policy, self.path, pos, buf)
        if error is not None and self.error is None:
            self.error = error

    def _zeros(self, buf, stop, pos):
        if not _zeros(buf, stop, len(buf)):
            return False
        at = pos + len(buf)
        while at < self.end:
            more = self.read(at, min(self.most, self.end - at))
            if not more:
                break
            if more.strip(b"\0"):
                return False
            at += len(more)
        return True
