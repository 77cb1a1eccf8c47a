"""``kafkalog dump``: the DUMP_JSON document (``docs/dump-json.md``) and a
kafka-dump-log style listing, both streamed.

``segments`` walks each ``.log`` with the segment walker (``kafkalog.segment_walker``'s ``DUMP``
policy) in bounded chunks and decodes their records; ``partition`` reads the other files of a
partition directory; ``log07`` lists a Kafka 0.7 partition directory's messages; ``document``
writes the JSON document and ``listing`` the text, both piece
by piece as the walk goes. Damage is reported where it is met (``DumpReport``) and the rest is
still dumped. ``dump`` never creates, resizes or rewrites a file: indexes are opened read-only.
"""
from kafkalog.dump.document import dump_partition, dump_path, dump_segment, iter_json
from kafkalog.dump.listing import iter_text
from kafkalog.dump.partition import KRAFT_SNAPSHOT, dump_snapshot
from kafkalog.dump.segments import (
    DECODER_CHOICES, PAYLOAD_FORMATS, RECORD_MODES, DumpOptions, DumpReport,
)

__all__ = ["DECODER_CHOICES", "KRAFT_SNAPSHOT", "PAYLOAD_FORMATS", "RECORD_MODES", "DumpOptions",
           "DumpReport", "dump_partition", "dump_path", "dump_segment", "dump_snapshot",
           "iter_json", "iter_text"]
