"""The on-disk layout, named once, and the numpy dtypes the kernels fill.

Record batch, magic 2 (all big-endian):

    at  field                 type
    0   baseOffset            int64
    8   batchLength           int32   bytes after this field
    12  partitionLeaderEpoch  int32
    16  magic                 int8
    17  crc                   uint32  CRC32C of [21, end)
    21  attributes            int16
    23  lastOffsetDelta       int32
    27  baseTimestamp         int64
    35  maxTimestamp          int64
    43  producerId            int64
    51  producerEpoch         int16
    53  baseSequence          int32
    57  recordCount           int32
    61  records

Legacy entry, magic 0/1: offset int64, size int32, crc uint32 (CRC32 of [16, end)), magic int8,
attributes int8, timestamp int64 (v1 only), key int32-prefixed, value int32-prefixed.

Kafka 0.7 entry (a ``.kafka`` file is a sequence of them; no offset field: an entry's offset
is its byte position in the partition's stream, the file's base offset + its position):

    at    field        type
    0     length N     int32   bytes after this field
    4     magic        int8    0 or 1
    5     attributes   int8    magic 1 only; bits 0-1: codec of a wrapper (0, 1 gzip, 2 snappy)
    5/6   crc          uint32  CRC32 (zlib's, not CRC32C) of the payload
    9/10  payload              a wrapper's: a compressed sequence of entries

The struct dtypes below mirror the C structs in ``_core.pxd`` field for field (aligned, widest
first, so neither side has hidden padding in the middle).
"""
import numpy as np


# v2 batch attributes
COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

NO_SEQUENCE = -1
NO_PRODUCER_ID = -1
NO_PARTITION_LEADER_EPOCH = -1

LOG_OVERHEAD = 12            # offset + size, in front of every batch / legacy entry
HEADER_SIZE_UP_TO_MAGIC = 17
V2_HEADER_SIZE = 61
V2_CRC_START = 21
V2_LEADER_EPOCH_AT = 12      # partitionLeaderEpoch (int32), not covered by the CRC
LEGACY_OVERHEAD_V0 = 14      # crc, magic, attributes, key length, value length
LEGACY_OVERHEAD_V1 = 22      # ... plus the timestamp
LEGACY_CRC_START = 16        # CRC32 covers [magic, end) of the entry

OFFSET_INDEX_ENTRY_SIZE = 8
TIME_INDEX_ENTRY_SIZE = 12
TXN_INDEX_ENTRY_SIZE = 34

# Index search fields: which value of an entry is compared with the target.
OFFSET_KEY = 0     # offset index, relative offset (int32 at 0)
OFFSET_VALUE = 1   # offset index, position (int32 at 4)
TIME_KEY = 2       # time index, timestamp (int64 at 0)
TIME_VALUE = 3     # time index, relative offset (int32 at 8)

# Why a batch walk stopped.
WALK_END = 0        # every byte was consumed
WALK_PARTIAL = 1    # a tail shorter than its entry: a torn write, or a file still being written
WALK_CORRUPT = 2    # a structural error: size below the minimum, unknown magic
WALK_INVALID = 3    # a batch failed its CRC (only when asked to stop there)

BATCH_DTYPE = np.dtype([
    ("position", "<i8"),
    ("base_offset", "<i8"),
    ("last_offset", "<i8"),
    ("max_timestamp", "<i8"),
    ("base_timestamp", "<i8"),
    ("producer_id", "<i8"),
    ("size", "<i4"),              # size in bytes, including the 12-byte log overhead
    ("record_count", "<i4"),      # from the v2 header; -1 for legacy entries
    ("partition_leader_epoch", "<i4"),
    ("base_sequence", "<i4"),
    ("crc", "<u4"),
    ("attributes", "<i2"),
    ("producer_epoch", "<i2"),
    ("magic", "i1"),
    ("crc_valid", "i1"),
], align=True)

RECORD_DTYPE = np.dtype([
    ("offset", "<i8"),
    ("timestamp", "<i8"),
    ("key_pos", "<i8"),
    ("value_pos", "<i8"),
    ("header_start", "<i8"),      # index of the first header in the header table
    ("size", "<i4"),              # size in bytes as Kafka counts it
    ("key_len", "<i4"),           # -1 for a null key
    ("value_len", "<i4"),         # -1 for a null value
    ("header_count", "<i4"),
    ("attributes", "i1"),
], align=True)

LOG07_LENGTH_SIZE = 4        # the length field in front of every 0.7 entry
LOG07_MIN_SIZE_V0 = 5        # magic, crc
LOG07_MIN_SIZE_V1 = 6        # magic, attributes, crc
LOG07_CODEC_MASK = 3

LOG07_ENTRY_DTYPE = np.dtype([
    ("position", "<i8"),          # of the length field, in the buffer walked
    ("payload_position", "<i8"),
    ("size", "<i4"),              # the whole entry, length field included
    ("payload_size", "<i4"),
    ("crc", "<u4"),               # as stored
    ("magic", "i1"),
    ("attributes", "i1"),         # 0 for magic 0
    ("codec", "i1"),              # attributes & LOG07_CODEC_MASK
    ("crc_valid", "i1"),          # 1/0, -1 when not checked
], align=True)

HEADER_DTYPE = np.dtype([
    ("key_pos", "<i8"),
    ("value_pos", "<i8"),
    ("key_len", "<i4"),
    ("value_len", "<i4"),         # -1 for a null value
], align=True)
