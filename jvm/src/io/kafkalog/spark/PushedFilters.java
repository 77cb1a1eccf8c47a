package io.kafkalog.spark;

import java.sql.Timestamp;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.spark.sql.sources.EqualNullSafe;
import org.apache.spark.sql.sources.EqualTo;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.sources.GreaterThan;
import org.apache.spark.sql.sources.GreaterThanOrEqual;
import org.apache.spark.sql.sources.In;
import org.apache.spark.sql.sources.IsNotNull;
import org.apache.spark.sql.sources.LessThan;
import org.apache.spark.sql.sources.LessThanOrEqual;
import org.apache.spark.sql.sources.Not;

/**
 * The filters of a scan that kafkalog's planner prunes with ({@code planner.Pushdown}: topic,
 * partition, offset and timestamp; comparisons, IN, NOT, IS NOT NULL), as the JSON list
 * {@code kafkalog.spark.jvm} turns back into PySpark's filters, e.g.
 * {@code [{"kind":"GreaterThanOrEqual","column":"offset","value":990000},
 * {"kind":"Not","child":{"kind":"In","column":"partition","values":[0,1]}}]}.
 * Timestamps are sent as microseconds since the epoch.
 */
final class PushedFilters {
    private static final JsonNodeFactory JSON = JsonNodeFactory.instance;
    private static final Set<Class<?>> COMPARISONS = Set.of(
        EqualTo.class, EqualNullSafe.class, GreaterThan.class, GreaterThanOrEqual.class,
        LessThan.class, LessThanOrEqual.class);

    /** The filters converted, in the order given. */
    final Filter[] pushed;
    /** Their JSON list. */
    final String json;

    PushedFilters(Filter[] filters) {
        List<Filter> kept = new ArrayList<>();
        ArrayNode list = JSON.arrayNode();
        for (Filter f : filters) {
            ObjectNode node = convert(f);
            if (node != null) {
                kept.add(f);
                list.add(node);
            }
        }
        pushed = kept.toArray(new Filter[0]);
        json = list.toString();
    }

    /** {@code f} as JSON, or null when the planner cannot prune with it. */
    private static ObjectNode convert(Filter f) {
        if (f instanceof Not) {
            ObjectNode child = convert(((Not) f).child());
            return child == null ? null : JSON.objectNode().put("kind", "Not")
                .set("child", child);
        }
        if (f instanceof IsNotNull) {
            return compared("IsNotNull", ((IsNotNull) f).attribute());
        }
        if (f instanceof In) {
            In in = (In) f;
            ObjectNode node = compared("In", in.attribute());
            if (node == null) {
                return null;
            }
            ArrayNode values = node.putArray("values");
            for (Object v : in.values()) {
                JsonNode value = v == null ? JSON.nullNode() : value(in.attribute(), v);
                if (value == null) {
                    return null;
                }
                values.add(value);
            }
            return node;
        }
        if (!COMPARISONS.contains(f.getClass())) {
            return null;
        }
        // case classes of (attribute, value), named as PySpark's filters are
        scala.Product comparison = (scala.Product) f;
        String kind = f.getClass().getSimpleName();
        String column = (String) comparison.productElement(0);
        Object v = comparison.productElement(1);
        ObjectNode node = compared(kind, column);
        JsonNode value = v == null ? null : value(column, v);
        return node == null || value == null ? null : node.set("value", value);
    }

    /** A node of {@code kind} on {@code column}, or null when the planner ignores the column. */
    private static ObjectNode compared(String kind, String column) {
        switch (column) {
            case "topic": case "partition": case "offset": case "timestamp":
                return JSON.objectNode().put("kind", kind).put("column", column);
            default:
                return null;
        }
    }

    /** A literal compared with {@code column} as JSON, or null for a type it never has. */
    private static JsonNode value(String column, Object v) {
        switch (column) {
            case "topic":
                return v instanceof String ? JSON.textNode((String) v) : null;
            case "partition": case "offset":
                return v instanceof Integer || v instanceof Long
                    ? JSON.numberNode(((Number) v).longValue()) : null;
            default:
                // java.time.Instant with spark.sql.datetime.java8API.enabled
                Instant t = v instanceof Timestamp ? ((Timestamp) v).toInstant()
                    : v instanceof Instant ? (Instant) v : null;
                return t == null ? null : JSON.numberNode(
                    Math.addExact(Math.multiplyExact(t.getEpochSecond(), 1_000_000L),
                                  t.getNano() / 1000));
        }
    }
}
