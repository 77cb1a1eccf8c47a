package io.kafkalog.spark;

import java.util.Map;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;

/**
 * Hands a Python {@link TaskPlanner} to the table Spark makes from the {@code planner}
 * option: options are strings, so the planner waits here under an id until {@code getTable}
 * takes it. The table then holds it for as long as the DataFrame's plan lives (when the table
 * is collected, Py4J releases the Python object).
 */
public final class Planners {
    private static final Map<String, TaskPlanner> WAITING = new ConcurrentHashMap<>();

    private Planners() {
    }

    /** Keep {@code planner} until {@link #take}; returns its id. */
    public static String register(TaskPlanner planner) {
        String id = UUID.randomUUID().toString();
        WAITING.put(id, planner);
        return id;
    }

    /** Drop {@code id}'s planner if no table took it (the DataFrame was not made). */
    public static void discard(String id) {
        WAITING.remove(id);
    }

    static TaskPlanner take(String id) {
        TaskPlanner planner = WAITING.remove(id);
        if (planner == null) {
            throw new IllegalArgumentException("no kafkalog planner " + id + " is waiting: "
                + "make the DataFrame with kafkalog.spark.read(spark, paths)");
        }
        return planner;
    }
}
