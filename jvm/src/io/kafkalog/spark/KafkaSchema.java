package io.kafkalog.spark;

import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;

/** The schema of Spark's Kafka source (kafkalog/spark/schema.py's kafka_schema). */
final class KafkaSchema {
    private KafkaSchema() {
    }

    static StructType of(boolean includeHeaders) {
        StructType schema = new StructType()
            .add("key", DataTypes.BinaryType)
            .add("value", DataTypes.BinaryType)
            .add("topic", DataTypes.StringType)
            .add("partition", DataTypes.IntegerType)
            .add("offset", DataTypes.LongType)
            .add("timestamp", DataTypes.TimestampType)
            .add("timestampType", DataTypes.IntegerType);
        if (includeHeaders) {
            schema = schema.add("headers", DataTypes.createArrayType(new StructType()
                .add("key", DataTypes.StringType)
                .add("value", DataTypes.BinaryType)));
        }
        return schema;
    }
}
