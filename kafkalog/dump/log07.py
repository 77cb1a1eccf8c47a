"""``kafkalog dump`` of a Kafka 0.7 partition directory (``.kafka`` files): each message's
offset, size, CRC32, codec and payload, as text or in the JSON document (``"format": "0.7"``);
a single ``.kafka`` file too.

Each file is walked up to its first invalid entry (0.7's rule: the size fits and the CRC32
matches), which is reported with the bytes left unread; the messages inside a compressed
wrapper are listed with the wrapper's offset (see ``kafkalog.log07.format``). Nothing is
written.
"""
from __future__ import annotations

import json
import os
from typing import Any, Iterator

from kafkalog._layout import WALK_END, WALK_PARTIAL
from kafkalog.errors import KafkaLogError
from kafkalog.files import log07_files, log07_topic_partition
from kafkalog.log07.format import Message07, messages_of, walk_all
from kafkalog.records import open_buffer
from kafkalog.dump.partition import file_sizes
from kafkalog.dump.segments import DumpOptions, DumpReport, b64


class _FileScan:
    """One ``.kafka`` file's messages in the options' range (``messages()``), then what the
    walk found: ``next_offset``, ``message_count``, ``problem`` (a report entry, or None)."""

    def __init__(self, path: str, base_offset: int, options: DumpOptions,
                 report: DumpReport) -> None:
        self.path, self.base_offset = path, base_offset
        self.options, self.report = options, report
        self.next_offset = base_offset
        self.message_count = 0
        self.size = 0
        self.problem: dict[str, Any] | None = None

    def messages(self) -> Iterator[Message07]:
        lo, hi = self.options.start_offset, self.options.end_offset
        buf = open_buffer(self.path)
        try:
            self.size = len(buf)
            end = self.size if self.options.max_bytes is None else \
                min(self.size, self.options.max_bytes)
            status, stop, message = WALK_END, 0, None
            for entries, status, stop, message in walk_all(buf, 0, end, True):
                try:
                    for m in messages_of(buf, entries, self.base_offset, True, self.path):
                        self.next_offset = m.next_offset
                        if (lo is None or m.offset >= lo) and (hi is None or m.offset < hi):
                            self.message_count += 1
                            yield m
                except KafkaLogError as e:
                    at = getattr(e, "position", None)
                    self.problem = self.report.add(self.path, at, str(e))
                    return
                self.next_offset = self.base_offset + stop
            if status != WALK_END and not (status == WALK_PARTIAL and end < self.size):
                why = message or "the last message is truncated"
                self.problem = self.report.add(
                    self.path, stop, f"{self.size - stop} invalid bytes from offset "
                                     f"{self.base_offset + stop}: {why}")
        finally:
            if hasattr(buf, "close"):
                buf.close()


def _files_in_range(path, options):
    files = log07_files(os.listdir(path))
    out = []
    for i, (base, name) in enumerate(files):
        if options.end_offset is not None and base >= options.end_offset:
            break
        nxt = files[i + 1][0] if i + 1 < len(files) else None
        if options.start_offset is not None and nxt is not None and nxt <= options.start_offset:
            continue
        out.append((base, os.path.join(path, name)))
    return out


def _message_dict(m: Message07) -> dict[str, Any]:
    return {"offset": m.offset, "next_offset": m.next_offset, "size": m.size, "crc": m.crc,
            "magic": m.magic, "codec": m.codec, "payload": b64(m.payload)}


def partition_json(path: str, options: DumpOptions, report: DumpReport) -> Iterator[str]:
    """The JSON document of a 0.7 partition directory, in pieces (one line when joined)."""
    first_problem = len(report.problems)
    name = os.path.basename(path)
    topic, partition = log07_topic_partition(name) or (name, None)
    head = {"dir": name, "format": "0.7", "topic": topic, "partition": partition,
            "records_mode": options.records,
            "files": file_sizes(path, sorted(os.listdir(path)))}
    if options.limits():
        head["limits"] = options.limits()
    yield json.dumps(head)[:-1] + ', "segments": ['
    for i, (base, file_path) in enumerate(_files_in_range(path, options)):
        if i:
            yield ", "
        yield from segment_json(file_path, base, options, report)
    yield f'], "problems": {json.dumps(report.problems[first_problem:])}}}'


def segment_json(path: str, base: int, options: DumpOptions, report: DumpReport
                 ) -> Iterator[str]:
    """The JSON object of one ``.kafka`` file whose first entry is at byte offset ``base``."""
    scan = _FileScan(path, base, options, report)
    yield "{" + f'"file": {json.dumps(os.path.basename(path))}, "base_offset": {base}, ' \
        '"messages": ['
    listed = 0
    for m in scan.messages():
        if options.records == "full":
            yield (", " if listed else "") + json.dumps(_message_dict(m))
            listed += 1
    yield (f'], "size": {scan.size}, "message_count": {scan.message_count}, '
           f'"next_offset": {scan.next_offset}, "error": '
           f'{json.dumps(scan.problem["message"] if scan.problem else None)}}}')


def partition_text(path: str, options: DumpOptions, report: DumpReport,
                   render: Any) -> Iterator[str]:
    """The listing of a 0.7 partition directory, in pieces of whole lines; ``render`` shows a
    list of payloads as the listing's ``--hex`` / ``--base64`` / text options say."""
    name = os.path.basename(path)
    tp = log07_topic_partition(name)
    yield (f"Kafka 0.7 partition directory {name} (topic {tp[0]}, partition {tp[1]})\n" if tp
           else f"Kafka 0.7 partition directory {name}\n")
    for base, file_path in _files_in_range(path, options):
        yield from segment_text(file_path, base, options, report, render)


def segment_text(path: str, base: int, options: DumpOptions, report: DumpReport,
                 render: Any) -> Iterator[str]:
    """The listing of one ``.kafka`` file whose first entry is at byte offset ``base``."""
    scan = _FileScan(path, base, options, report)
    yield f"Dumping {path}\nStarting offset: {base}\n"
    batch = []
    for m in scan.messages():
        if options.records == "full":
            batch.append(m)
            if len(batch) >= 1024:
                yield _message_lines(batch, render)
                batch = []
    yield _message_lines(batch, render)
    if scan.problem is not None:
        yield f"Found {scan.problem['message']}\n"
    yield f"Next offset: {scan.next_offset}  messages: {scan.message_count}\n"


def _message_lines(messages, render):
    payloads = render([m.payload for m in messages])
    return "".join(f"offset: {m.offset} next_offset: {m.next_offset} size: {m.size} "
                   f"magic: {m.magic} codec: {m.codec} crc: {m.crc} payload: {p}\n"
                   for m, p in zip(messages, payloads))
