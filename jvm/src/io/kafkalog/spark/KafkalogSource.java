package io.kafkalog.spark;

import java.util.Arrays;
import java.util.EnumSet;
import java.util.Map;
import java.util.Set;

import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownFilters;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * The JVM reader of {@code kafkalog.spark.read}: {@code format("kafkalog-jvm")} with the
 * {@code planner} option, the id of a {@link TaskPlanner} registered in {@link Planners}.
 * Every scan Spark plans (every action) asks the planner for the tasks of the logs as they
 * are then, as Spark's KafkaRelation plans in buildScan, and reads them columnar.
 */
public final class KafkalogSource implements TableProvider, DataSourceRegister {

    @Override
    public String shortName() {
        return "kafkalog-jvm";
    }

    @Override
    public StructType inferSchema(CaseInsensitiveStringMap options) {
        return KafkaSchema.of(options.getBoolean("includeHeaders", false));
    }

    @Override
    public Table getTable(StructType schema, Transform[] partitioning,
                          Map<String, String> properties) {
        String id = new CaseInsensitiveStringMap(properties).get("planner");
        if (id == null) {
            throw new IllegalArgumentException("option 'planner' is required: make the "
                + "DataFrame with kafkalog.spark.read(spark, paths)");
        }
        return new LogTable(schema, Planners.take(id));
    }

    private static final class LogTable implements Table, SupportsRead {
        private final StructType schema;
        private final TaskPlanner planner;

        LogTable(StructType schema, TaskPlanner planner) {
            this.schema = schema;
            this.planner = planner;
        }

        @Override
        public String name() {
            return "kafkalog";
        }

        // columns() replaces it in Spark 4, but Spark 3.5's planner still calls schema()
        @Override
        @SuppressWarnings("deprecation")
        public StructType schema() {
            return schema;
        }

        @Override
        public Set<TableCapability> capabilities() {
            return EnumSet.of(TableCapability.BATCH_READ);
        }

        @Override
        public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
            return new LogScan(schema, planner);
        }
    }

    /** Scan builder, scan and batch at once: the columns and filters are pushed before the
     *  scan is built, and the scan only plans and reads. */
    private static final class LogScan implements ScanBuilder, SupportsPushDownRequiredColumns,
            SupportsPushDownFilters, Scan, Batch {
        private StructType readSchema;
        private final TaskPlanner planner;
        private PushedFilters filters = new PushedFilters(new Filter[0]);
        private InputPartition[] partitions;

        LogScan(StructType schema, TaskPlanner planner) {
            this.readSchema = schema;
            this.planner = planner;
        }

        @Override
        public void pruneColumns(StructType requiredSchema) {
            readSchema = requiredSchema;
        }

        /** Every filter is returned for Spark to apply after the scan: the planner's pushdown
         *  only prunes partitions, segments and batches, and the reader masks no rows. */
        @Override
        public Filter[] pushFilters(Filter[] given) {
            filters = new PushedFilters(given);
            return given;
        }

        @Override
        public Filter[] pushedFilters() {
            return filters.pushed;
        }

        @Override
        public Scan build() {
            return this;
        }

        @Override
        public StructType readSchema() {
            return readSchema;
        }

        // what explain shows of the scan
        @Override
        public String description() {
            return "kafkalog PushedFilters: " + Arrays.toString(filters.pushed);
        }

        @Override
        public Batch toBatch() {
            return this;
        }

        @Override
        public synchronized InputPartition[] planInputPartitions() {
            // Spark builds a scan for every action, and plans it here (again when it copies
            // the physical plan, which must not read another snapshot): each action reads the
            // logs as they are when it is planned
            if (partitions == null) {
                partitions = TaskGroup.parseAll(planner.planTasks(filters.json));
            }
            return partitions;
        }

        @Override
        public PartitionReaderFactory createReaderFactory() {
            return new ReaderFactory(readSchema);
        }
    }

    private static final class ReaderFactory implements PartitionReaderFactory {
        private final StructType readSchema;

        ReaderFactory(StructType readSchema) {
            this.readSchema = readSchema;
        }

        @Override
        public boolean supportColumnarReads(InputPartition partition) {
            return true;
        }

        @Override
        public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
            return ((TaskGroup) partition).reader(readSchema);
        }

        @Override
        public PartitionReader<InternalRow> createReader(InputPartition partition) {
            throw new UnsupportedOperationException("kafkalog reads columnar only");
        }
    }
}
