package io.kafkalog.spark;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.NoSuchFileException;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.util.zip.CRC32C;

import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.execution.vectorized.ConstantColumnVector;
import org.apache.spark.sql.execution.vectorized.OnHeapColumnVector;
import org.apache.spark.sql.execution.vectorized.WritableColumnVector;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.unsafe.types.UTF8String;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The records of one task, as Spark ColumnarBatches of the columns asked for: walks the v2
 * record batches of the task's byte range (CRC32C checked), skips control batches, batches
 * older than the pushed filters' {@code ts_lo} and, for read_committed, aborted transactions'
 * batches, and drops records outside the task's offsets. With no column asked for (count) a
 * batch wholly inside the offsets is counted from its header; nothing else of it is decoded.
 */
final class LogBatchReader implements PartitionReader<ColumnarBatch> {
    private static final Logger LOG = LoggerFactory.getLogger(LogBatchReader.class);

    // Record batch v2 (FORMAT.md): the header fields' offsets in the batch.
    private static final int BASE_OFFSET = 0;
    private static final int BATCH_LENGTH = 8;
    private static final int MAGIC = 16;
    private static final int CRC = 17;
    private static final int ATTRIBUTES = 21;
    private static final int LAST_OFFSET_DELTA = 23;
    private static final int BASE_TIMESTAMP = 27;
    private static final int MAX_TIMESTAMP = 35;
    private static final int PRODUCER_ID = 43;
    private static final int RECORD_COUNT = 57;
    private static final int HEADER_SIZE = 61;
    private static final int LOG_OVERHEAD = 12;       // baseOffset + batchLength
    private static final int PREFIX = 17;             // what tells the size and the magic
    private static final int MIN_RECORD_OVERHEAD = 14;   // of a v0 message: the smallest

    private static final int CODEC_MASK = 0x07;
    private static final int LOG_APPEND_TIME = 0x08;
    private static final int TRANSACTIONAL = 0x10;
    private static final int CONTROL = 0x20;

    // Spark's vectorized Parquet reader hands out 4096 rows a batch; a count with no column
    // carries nothing per row, so its batches can be big.
    private static final int TARGET_ROWS = 4096;
    private static final int COUNT_ONLY_ROWS = 1 << 24;

    private final ReadTask task;
    private final ByteBuffer log;          // [startPos, end of range) of the .log
    private final AbortedTxnFilter abortedFilter;
    private final CRC32C crc = new CRC32C();
    private int pos;
    private boolean done;

    private final ColumnVector[] columns;
    private final WritableColumnVector key;
    private final WritableColumnVector value;
    private final WritableColumnVector offset;
    private final WritableColumnVector timestamp;
    private final WritableColumnVector timestampType;
    private final WritableColumnVector headers;
    private final WritableColumnVector headerKey;
    private final WritableColumnVector headerValue;
    private final boolean countOnly;
    private final ColumnarBatch batch;

    private byte[] records = new byte[1 << 16];       // a batch's (decompressed) records
    private byte[] compressed = new byte[1 << 16];
    private final int[] size = new int[1];
    private int headerRows;                           // header elements in this ColumnarBatch

    LogBatchReader(ReadTask task, StructType readSchema) {
        this.task = task;
        this.abortedFilter = task.committed ? new AbortedTxnFilter(task.aborted) : null;
        this.log = map(task);
        this.done = log == null;

        StructField[] fields = readSchema.fields();
        columns = new ColumnVector[fields.length];
        WritableColumnVector k = null, v = null, o = null, ts = null, tt = null, h = null;
        for (int i = 0; i < fields.length; i++) {
            String name = fields[i].name();
            if (name.equals("topic")) {
                ConstantColumnVector c = new ConstantColumnVector(TARGET_ROWS,
                                                                  fields[i].dataType());
                c.setUtf8String(UTF8String.fromString(task.topic));
                columns[i] = c;
                continue;
            }
            if (name.equals("partition")) {
                ConstantColumnVector c = new ConstantColumnVector(TARGET_ROWS,
                                                                  fields[i].dataType());
                c.setInt(task.partition);
                columns[i] = c;
                continue;
            }
            OnHeapColumnVector c = new OnHeapColumnVector(TARGET_ROWS, fields[i].dataType());
            columns[i] = c;
            switch (name) {
                case "key": k = c; break;
                case "value": v = c; break;
                case "offset": o = c; break;
                case "timestamp": ts = c; break;
                case "timestampType": tt = c; break;
                case "headers": h = c; break;
                default: throw new IllegalArgumentException("no column " + name);
            }
        }
        key = k;
        value = v;
        offset = o;
        timestamp = ts;
        timestampType = tt;
        headers = h;
        if (h != null) {
            // nested pruning may leave one of the element's fields
            StructType element = (StructType) ((ArrayType) readSchema.apply("headers")
                .dataType()).elementType();
            WritableColumnVector elements = h.arrayData();
            headerKey = child(elements, element, "key");
            headerValue = child(elements, element, "value");
        } else {
            headerKey = null;
            headerValue = null;
        }
        countOnly = k == null && v == null && o == null && ts == null && tt == null && h == null;
        batch = new ColumnarBatch(columns);
    }

    private static WritableColumnVector child(WritableColumnVector elements, StructType type,
                                              String name) {
        String[] names = type.fieldNames();
        for (int i = 0; i < names.length; i++) {
            if (names[i].equals(name)) {
                return elements.getChild(i);
            }
        }
        return null;
    }

    /** The task's byte range mapped, or null when the segment was deleted after planning and
     *  failOnDataLoss is false (planner.py's reader skips it the same way). */
    private static ByteBuffer map(ReadTask task) {
        try (FileChannel ch = FileChannel.open(Paths.get(task.logPath),
                                               StandardOpenOption.READ)) {
            long end = Math.min(task.endPos, ch.size());
            if (end <= task.startPos) {
                return ByteBuffer.allocate(0);
            }
            return ch.map(FileChannel.MapMode.READ_ONLY, task.startPos, end - task.startPos);
        } catch (NoSuchFileException e) {
            // Spark's Kafka source reports offsets gone after planning as data loss
            String lost = task.topic + "-" + task.partition + ": " + task.logPath
                + " was deleted after planning, offsets [" + task.startOffset + ", "
                + task.endOffset + ") are no longer in the log";
            if (task.failOnDataLoss) {
                throw new IllegalStateException(lost, e);
            }
            LOG.warn("{} (failOnDataLoss=false: skipped)", lost);
            return null;
        } catch (IOException e) {
            throw new UncheckedIOException(task.logPath, e);
        }
    }

    @Override
    public boolean next() throws IOException {
        if (done) {
            return false;
        }
        for (ColumnVector c : columns) {
            if (c instanceof WritableColumnVector) {
                ((WritableColumnVector) c).reset();
            }
        }
        headerRows = 0;
        int rows = 0;
        int target = countOnly ? COUNT_ONLY_ROWS : TARGET_ROWS;
        while (rows < target) {
            int added = nextBatch(rows);
            if (added < 0) {
                done = true;
                break;
            }
            rows += added;
        }
        batch.setNumRows(rows);
        return rows > 0 || !done;
    }

    /** Read the record batch at {@code pos} into rows from {@code row} on; returns the rows
     *  added, or -1 at the end of the range (or of the readable data). */
    private int nextBatch(int row) throws IOException {
        int limit = log.limit();
        // the checks and their order of Kafka's ByteBufferLogInputStream (and of kafkalog's
        // walk_batches): a tail too short for its size field's batch is a torn write, not
        // corruption, whatever its magic byte says
        if (limit - pos <= PREFIX) {
            return -1;
        }
        int length = log.getInt(pos + BATCH_LENGTH);
        if (length < MIN_RECORD_OVERHEAD) {
            return corrupt("record size " + length + " is smaller than the minimum record "
                           + "overhead (" + MIN_RECORD_OVERHEAD + ")");
        }
        if ((long) pos + LOG_OVERHEAD + length > limit) {
            return -1;
        }
        byte magic = log.get(pos + MAGIC);
        if (magic == 0 || magic == 1) {
            throw new IOException(where() + "legacy message set (magic " + magic + "): the "
                + "JVM reader reads record batches v2 only; read this partition with "
                + "kafkalog.spark.read(..., **{\"kafkalog.reader\": \"python\"}) or "
                + "format(\"kafkalog\")");
        }
        if (magic != 2) {
            return corrupt("unknown magic byte " + magic);
        }
        if (length < HEADER_SIZE - LOG_OVERHEAD) {
            return corrupt("batch size " + length + " is smaller than the v2 batch header ("
                           + (HEADER_SIZE - LOG_OVERHEAD) + ")");
        }
        int start = pos;
        int end = pos + LOG_OVERHEAD + length;
        if (task.validateCrc) {
            crc.reset();
            crc.update(log.slice(start + ATTRIBUTES, end - start - ATTRIBUTES));
            long stored = log.getInt(start + CRC) & 0xffffffffL;
            if (crc.getValue() != stored) {
                return corrupt("CRC32C " + Long.toHexString(crc.getValue())
                               + " does not match the stored " + Long.toHexString(stored));
            }
        }
        pos = end;

        long base = log.getLong(start + BASE_OFFSET);
        long last = base + log.getInt(start + LAST_OFFSET_DELTA);
        int attributes = log.getShort(start + ATTRIBUTES);
        boolean control = (attributes & CONTROL) != 0;
        // every batch in order: the filter follows the markers
        if (abortedFilter != null && abortedFilter.aborted(
                base, last, log.getLong(start + PRODUCER_ID),
                (attributes & TRANSACTIONAL) != 0, control)) {
            return 0;
        }
        if (control || last < task.startOffset || base >= task.endOffset
                || log.getLong(start + MAX_TIMESTAMP) < task.tsLo) {
            return 0;
        }
        int count = log.getInt(start + RECORD_COUNT);
        if (countOnly && base >= task.startOffset && last < task.endOffset) {
            return count;
        }
        return decode(start, end, row, base, attributes, count);
    }

    private int decode(int start, int end, int row, long base, int attributes, int count)
            throws IOException {
        int n = end - start - HEADER_SIZE;
        int codec = attributes & CODEC_MASK;
        byte[] data;
        int dataEnd;
        if (codec == Codecs.NONE) {
            if (records.length < n) {
                records = new byte[Math.max(n, records.length * 2)];
            }
            log.get(start + HEADER_SIZE, records, 0, n);
            data = records;
            dataEnd = n;
        } else {
            if (compressed.length < n) {
                compressed = new byte[Math.max(n, compressed.length * 2)];
            }
            log.get(start + HEADER_SIZE, compressed, 0, n);
            try {
                records = Codecs.decompress(codec, compressed, n, records, size);
            } catch (IOException | RuntimeException e) {
                throw new IOException(at(start) + "cannot decompress (codec " + codec + "): "
                                      + e, e);
            }
            data = records;
            dataEnd = size[0];
        }
        long baseTimestamp = log.getLong(start + BASE_TIMESTAMP);
        long maxTimestamp = log.getLong(start + MAX_TIMESTAMP);
        boolean logAppendTime = (attributes & LOG_APPEND_TIME) != 0;
        reserve(row + count);

        Varints in = new Varints(data, dataEnd, start);
        int added = 0;
        for (int i = 0; i < count; i++) {
            int length = in.varint();
            int recordEnd = in.pos + length;
            if (length < 0 || recordEnd > dataEnd) {
                throw corruptRecord(start, "record " + i + " runs past its batch");
            }
            in.pos++;                                   // attributes: unused
            long timestampDelta = in.varlong();
            long recordOffset = base + in.varint();
            if (recordOffset < task.startOffset || recordOffset >= task.endOffset) {
                in.pos = recordEnd;
                continue;
            }
            int r = row + added;
            if (offset != null) {
                offset.putLong(r, recordOffset);
            }
            if (timestamp != null) {
                // Spark's TimestampType is in microseconds
                timestamp.putLong(r, (logAppendTime ? maxTimestamp
                                      : baseTimestamp + timestampDelta) * 1000);
            }
            if (timestampType != null) {
                timestampType.putInt(r, logAppendTime ? 1 : 0);
            }
            bytes(in, key, r);
            bytes(in, value, r);
            int headerCount = in.varint();
            if (headerCount < 0) {
                throw corruptRecord(start, "negative header count");
            }
            if (headers != null) {
                if (headerCount == 0) {
                    headers.putNull(r);     // as Spark's Kafka source: null, not []
                } else {
                    headers.putArray(r, headerRows, headerCount);
                    reserveHeaders(headerRows + headerCount);
                }
            }
            for (int h = 0; h < headerCount; h++) {
                int keyLength = in.varint();
                if (keyLength < 0) {
                    throw corruptRecord(start, "null header key");
                }
                in.need(keyLength);
                if (headerKey != null) {
                    headerKey.putByteArray(headerRows, data, in.pos, keyLength);
                }
                in.pos += keyLength;
                bytes(in, headerValue, headerRows);
                if (headers != null) {
                    headerRows++;
                }
            }
            if (in.pos != recordEnd) {
                throw corruptRecord(start, "record " + i + " is " + length
                                    + " bytes long but its fields take "
                                    + (in.pos - recordEnd + length));
            }
            added++;
        }
        return added;
    }

    /** A varint-length-prefixed byte field (-1: null) into {@code column} (null: skipped). */
    private static void bytes(Varints in, WritableColumnVector column, int r) throws IOException {
        int length = in.varint();
        if (length < 0) {
            if (column != null) {
                column.putNull(r);
            }
            return;
        }
        in.need(length);
        if (column != null) {
            column.putByteArray(r, in.data, in.pos, length);
        }
        in.pos += length;
    }

    private void reserve(int capacity) {
        for (WritableColumnVector c : new WritableColumnVector[] {
                key, value, offset, timestamp, timestampType, headers}) {
            if (c != null) {
                c.reserve(capacity);
            }
        }
    }

    private void reserveHeaders(int capacity) {
        headers.arrayData().reserve(capacity);
        if (headerKey != null) {
            headerKey.reserve(capacity);
        }
        if (headerValue != null) {
            headerValue.reserve(capacity);
        }
    }

    private String at(int batchStart) {
        return task.logPath + " at position " + (task.startPos + batchStart) + ": ";
    }

    private String where() {
        return at(pos);
    }

    /** Bad bytes at {@code pos}: an error, or with failOnDataLoss=false the end of the read
     *  (kafkalog's Python reader logs and stops there too); never returned as records. */
    private int corrupt(String what) throws IOException {
        String message = where() + what;
        if (task.failOnDataLoss) {
            throw new IOException(message);
        }
        LOG.warn("stopping at corrupt data (failOnDataLoss=false): {}", message);
        return -1;
    }

    // A JDK exception class: a class of this jar added with ADD JAR is not visible to the
    // driver thread that deserializes a failed task's reason (the message would be lost).
    private IOException corruptRecord(int batchStart, String what) {
        return new IOException(at(batchStart) + what);
    }

    @Override
    public ColumnarBatch get() {
        return batch;
    }

    @Override
    public void close() {
        batch.close();
    }

    /** Zig-zag varints over the records of one batch, bounds-checked. */
    private final class Varints {
        final byte[] data;
        final int end;
        final int batchStart;
        int pos;

        Varints(byte[] data, int end, int batchStart) {
            this.data = data;
            this.end = end;
            this.batchStart = batchStart;
        }

        int varint() throws IOException {
            long v = varlong();
            if (v < Integer.MIN_VALUE || v > Integer.MAX_VALUE) {
                throw corruptRecord(batchStart, "varint out of the int32 range");
            }
            return (int) v;
        }

        long varlong() throws IOException {
            long raw = 0;
            for (int shift = 0; shift < 64; shift += 7) {
                if (pos >= end) {
                    throw corruptRecord(batchStart, "record runs past its batch");
                }
                byte b = data[pos++];
                raw |= (long) (b & 0x7f) << shift;
                if (b >= 0) {
                    return (raw >>> 1) ^ -(raw & 1);
                }
            }
            throw corruptRecord(batchStart, "varint longer than 10 bytes");
        }

        void need(int n) throws IOException {
            if (n > end - pos) {
                throw corruptRecord(batchStart, "field runs past its batch");
            }
        }
    }
}
