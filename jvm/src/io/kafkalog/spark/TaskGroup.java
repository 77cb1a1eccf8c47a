package io.kafkalog.spark;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.List;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * One Spark partition: planner tasks read one after the other (the planner groups a log's
 * many small segments into partitions of about {@code maxBytesPerTask}).
 */
final class TaskGroup implements InputPartition {
    private static final long serialVersionUID = 1L;

    private final ReadTask[] tasks;

    private TaskGroup(ReadTask[] tasks) {
        this.tasks = tasks;
    }

    /** The partitions of {@link TaskPlanner#planTasks}' JSON. */
    static InputPartition[] parseAll(String json) {
        JsonNode root;
        try {
            root = new ObjectMapper().readTree(json);
        } catch (IOException e) {
            throw new UncheckedIOException("kafkalog's plan is not JSON", e);
        }
        if (!root.isArray()) {
            throw new IllegalArgumentException("kafkalog's plan must be a JSON list of lists");
        }
        List<InputPartition> groups = new ArrayList<>(root.size());
        for (JsonNode group : root) {
            ReadTask[] tasks = new ReadTask[group.size()];
            for (int i = 0; i < tasks.length; i++) {
                tasks[i] = new ReadTask(group.get(i));
            }
            groups.add(new TaskGroup(tasks));
        }
        return groups.toArray(new InputPartition[0]);
    }

    PartitionReader<ColumnarBatch> reader(StructType readSchema) {
        return new PartitionReader<ColumnarBatch>() {
            private int next;
            private LogBatchReader current;

            @Override
            public boolean next() throws IOException {
                while (true) {
                    if (current != null && current.next()) {
                        return true;
                    }
                    close();
                    if (next == tasks.length) {
                        return false;
                    }
                    current = new LogBatchReader(tasks[next++], readSchema);
                }
            }

            @Override
            public ColumnarBatch get() {
                return current.get();
            }

            @Override
            public void close() {
                if (current != null) {
                    current.close();
                    current = null;
                }
            }
        };
    }
}
