package dev.silt.flinksql;

import java.math.BigDecimal;
import java.util.Base64;
import java.util.Iterator;
import java.util.Map;

import org.apache.flink.types.Row;

/**
 * The harness's output as JSON, written by hand so that the program needs nothing beyond Flink
 * and the connector: strings, numbers, booleans and nulls as JSON has them; BINARY as base64;
 * arrays, maps (as arrays of [key, value]) and rows nested; anything else (dates, times,
 * timestamps) as its {@code toString()}, which for java.time values is ISO-8601.
 */
final class Json {
    private Json() {}

    static String string(String s) {
        StringBuilder out = new StringBuilder(s.length() + 2);
        out.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"' -> out.append("\\\"");
                case '\\' -> out.append("\\\\");
                case '\n' -> out.append("\\n");
                case '\r' -> out.append("\\r");
                case '\t' -> out.append("\\t");
                default -> {
                    if (c < 0x20) {
                        out.append(String.format("\\u%04x", (int) c));
                    } else {
                        out.append(c);
                    }
                }
            }
        }
        return out.append('"').toString();
    }

    static String value(Object v) {
        if (v == null) {
            return "null";
        }
        if (v instanceof Boolean
                || v instanceof Byte
                || v instanceof Short
                || v instanceof Integer
                || v instanceof Long) {
            return v.toString();
        }
        if (v instanceof BigDecimal) {
            return ((BigDecimal) v).toPlainString();
        }
        if (v instanceof Float || v instanceof Double) {
            double d = ((Number) v).doubleValue();
            return Double.isFinite(d) ? v.toString() : string(v.toString());
        }
        if (v instanceof byte[]) {
            return string(Base64.getEncoder().encodeToString((byte[]) v));
        }
        if (v instanceof Row) {
            return row((Row) v);
        }
        if (v instanceof Object[]) {
            StringBuilder out = new StringBuilder("[");
            Object[] items = (Object[]) v;
            for (int i = 0; i < items.length; i++) {
                out.append(i == 0 ? "" : ",").append(value(items[i]));
            }
            return out.append(']').toString();
        }
        if (v instanceof Map) {
            StringBuilder out = new StringBuilder("[");
            Iterator<? extends Map.Entry<?, ?>> entries = ((Map<?, ?>) v).entrySet().iterator();
            for (boolean first = true; entries.hasNext(); first = false) {
                Map.Entry<?, ?> e = entries.next();
                out.append(first ? "" : ",")
                        .append('[')
                        .append(value(e.getKey()))
                        .append(',')
                        .append(value(e.getValue()))
                        .append(']');
            }
            return out.append(']').toString();
        }
        return string(v.toString());
    }

    /** The fields of {@code row} as a JSON array (its kind is written beside it, not in it). */
    static String row(Row row) {
        StringBuilder out = new StringBuilder("[");
        for (int i = 0; i < row.getArity(); i++) {
            out.append(i == 0 ? "" : ",").append(value(row.getField(i)));
        }
        return out.append(']').toString();
    }
}
