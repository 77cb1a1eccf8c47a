package io.kafkalog.spark;

import java.io.Serializable;

import com.fasterxml.jackson.databind.JsonNode;

/**
 * One task of kafkalog's planner ({@code planner._segment_tasks} plus the common fields of
 * {@code planner._plan_tasks}): the byte range [startPos, endPos) of one {@code .log} and
 * the offsets [startOffset, endOffset) of it that are returned.
 */
final class ReadTask implements Serializable {
    private static final long serialVersionUID = 1L;

    final String topic;
    final int partition;
    final String logPath;
    final long startPos;
    final long endPos;             // Long.MAX_VALUE: the end of the file
    final long startOffset;
    final long endOffset;          // Long.MAX_VALUE: no end
    /** (producer id, first offset, last offset) of the aborted transactions of the range. */
    final long[][] aborted;
    final boolean committed;
    final boolean validateCrc;
    final boolean failOnDataLoss;
    /** Batches whose max timestamp (ms) is below it hold no record the filters keep. */
    final long tsLo;

    ReadTask(JsonNode t) {
        String dir = t.get("dir").asText();
        if (dir.contains("://")) {
            // remote reads go through fsspec and kafkalog.storage, on the Python side only
            throw new IllegalArgumentException("the JVM reader reads local logs only: " + dir);
        }
        topic = t.get("topic").asText();
        partition = t.get("partition").asInt();
        logPath = dir + "/" + String.format("%020d", t.get("segment").asLong()) + ".log";
        startPos = t.get("start_pos").asLong();
        endPos = longOr(t, "end_pos", Long.MAX_VALUE);
        startOffset = t.get("start_offset").asLong();
        endOffset = longOr(t, "end_offset", Long.MAX_VALUE);
        JsonNode list = t.get("aborted");
        int n = list == null ? 0 : list.size();
        aborted = new long[n][];
        for (int i = 0; i < n; i++) {
            JsonNode a = list.get(i);
            aborted[i] = new long[] {a.get(0).asLong(), a.get(1).asLong(), a.get(2).asLong()};
        }
        committed = t.path("committed").asBoolean(false);
        validateCrc = t.path("validate_crc").asBoolean(true);
        failOnDataLoss = t.path("fail_on_data_loss").asBoolean(true);
        // ts_hi and offset_in mask rows only: Spark applies the pushed filters again
        tsLo = longOr(t, "ts_lo", Long.MIN_VALUE);
    }

    private static long longOr(JsonNode t, String field, long absent) {
        JsonNode v = t.get(field);
        return v == null || v.isNull() ? absent : v.asLong();
    }
}
