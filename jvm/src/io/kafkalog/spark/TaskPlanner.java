package io.kafkalog.spark;

/**
 * Plans a read when Spark plans a scan: implemented in Python by {@code kafkalog.spark.jvm}
 * (a Py4J callback into the driver's Python process), which runs kafkalog's planner over the
 * logs as they are at that moment.
 */
public interface TaskPlanner {
    /** The JSON list of Spark partitions, each a JSON list of planner tasks, of a plan pruned
     *  with {@code pushedFiltersJson} (the JSON list of {@link PushedFilters}). */
    String planTasks(String pushedFiltersJson);
}
