package dev.silt.javaclient;

import static dev.silt.javaclient.Checks.await;
import static dev.silt.javaclient.Checks.check;
import static dev.silt.javaclient.Checks.checkEquals;

import java.math.BigDecimal;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import org.apache.fluss.client.lookup.Lookuper;
import org.apache.fluss.client.table.Table;
import org.apache.fluss.client.table.scanner.ScanRecord;
import org.apache.fluss.client.table.scanner.log.LogScanner;
import org.apache.fluss.client.table.writer.AppendWriter;
import org.apache.fluss.client.table.writer.UpsertWriter;
import org.apache.fluss.metadata.DatabaseDescriptor;
import org.apache.fluss.metadata.Schema;
import org.apache.fluss.metadata.TableDescriptor;
import org.apache.fluss.metadata.TablePath;
import org.apache.fluss.row.BinaryString;
import org.apache.fluss.row.Decimal;
import org.apache.fluss.row.GenericArray;
import org.apache.fluss.row.GenericMap;
import org.apache.fluss.row.GenericRow;
import org.apache.fluss.row.InternalArray;
import org.apache.fluss.row.InternalMap;
import org.apache.fluss.row.InternalRow;
import org.apache.fluss.row.TimestampLtz;
import org.apache.fluss.row.TimestampNtz;
import org.apache.fluss.types.ArrayType;
import org.apache.fluss.types.DataField;
import org.apache.fluss.types.DataType;
import org.apache.fluss.types.DataTypes;
import org.apache.fluss.types.MapType;
import org.apache.fluss.types.RowType;

/**
 * Compound types written and read back through the Java client (issue 16, item 5). In a fresh
 * database {@code silt_java_types_<random>}, a lake-enabled log table {@code events} and a
 * lake-enabled primary-key table {@code users} (key {@code id BIGINT}) with arrays (of INT, of
 * STRING, of arrays, of rows), maps with STRING and INT keys, rows (one inside another), NOT NULL
 * inside them and at the top, and the scalars whose Arrow form differs from their Delta one
 * (DECIMAL, TIMESTAMP(3), TIMESTAMP_LTZ(6), BINARY(4), CHAR(5), DATE). Rows of values, of nulls
 * (wherever allowed) and of empty arrays and maps; the primary-key table then updates key 1 and
 * deletes key 3.
 *
 * <p>The log table is read back whole and projected onto its compound columns, the primary-key
 * table by a lookup of every key; both must equal what was written, rendered as text by one
 * function ({@link #render}). With {@code JAVA_CLIENT_OUTPUT_DIR} set it writes {@code
 * <dir>/<database>.<table>.rows}: a line {@code columns: id, ...}, then one line per row the
 * table must hold, sorted, in the form {@code tests/data_types.rs} renders Arrow values
 * ({@code a | b | c}; strings quoted, binaries {@code 0x..}, dates {@code date <days>},
 * timestamps {@code ts <nanoseconds>ns}, maps {@code map{k: v}} with their entries sorted, rows
 * {@code {name: v}}).
 */
final class DataTypesScenario implements ConnectedScenario {
    static final Duration POLL_DEADLINE = Duration.ofSeconds(30);
    static final int BUCKETS = 2;

    static final RowType POINT =
            DataTypes.ROW(field("x", notNull(DataTypes.INT())), field("y", DataTypes.STRING()));
    static final RowType INNER = DataTypes.ROW(
            field("d", DataTypes.DECIMAL(38, 10)), field("ts", notNull(DataTypes.TIMESTAMP_LTZ(6))));
    static final RowType NESTED = DataTypes.ROW(
            field("inner", INNER), field("tags", DataTypes.ARRAY(notNull(DataTypes.STRING()))));
    static final RowType R =
            DataTypes.ROW(field("a", notNull(DataTypes.INT())), field("b", DataTypes.STRING()));

    /** The columns of both tables, {@code id} first; {@link #row} fills them by position. */
    static final RowType COLUMNS = DataTypes.ROW(
            field("id", notNull(DataTypes.BIGINT())),
            field("c_decimal", DataTypes.DECIMAL(10, 2)),
            field("c_timestamp_3", DataTypes.TIMESTAMP(3)),
            field("c_timestamp_ltz_6", DataTypes.TIMESTAMP_LTZ(6)),
            field("c_binary", DataTypes.BINARY(4)),
            field("c_char", DataTypes.CHAR(5)),
            field("c_date", DataTypes.DATE()),
            field("a_int", DataTypes.ARRAY(DataTypes.INT())),
            field("a_string", DataTypes.ARRAY(DataTypes.STRING())),
            field("a_nested", DataTypes.ARRAY(DataTypes.ARRAY(DataTypes.INT()))),
            field("a_row", DataTypes.ARRAY(POINT)),
            field("m_string_int", DataTypes.MAP(notNull(DataTypes.STRING()), DataTypes.INT())),
            field("m_int_string", DataTypes.MAP(notNull(DataTypes.INT()), DataTypes.STRING())),
            field("r", R),
            field("r_nested", NESTED),
            field("tags_not_null", notNull(DataTypes.ARRAY(notNull(DataTypes.STRING())))));

    /** The positions of {@link #COLUMNS}' arrays, maps and rows. */
    static final int[] COMPOUNDS = {7, 8, 9, 10, 11, 12, 13, 14, 15};

    private static DataField field(String name, DataType type) {
        return DataTypes.FIELD(name, type);
    }

    private static DataType notNull(DataType type) {
        return type.copy(false);
    }

    @Override
    public String run(Client client) throws Exception {
        String database = "silt_java_types_" + Client.randomSuffix();
        await(
                client.admin.createDatabase(database, DatabaseDescriptor.EMPTY, false),
                "create database");
        Map<String, List<String>> expected = new TreeMap<>();
        expected.put("events", events(client, TablePath.of(database, "events")));
        expected.put("users", users(client, TablePath.of(database, "users")));
        List<String> header = List.of("columns: " + String.join(", ", COLUMNS.getFieldNames()));
        String output = ExpectedRows.write(database, header, expected);
        return "database " + database + ": events " + expected.get("events").size()
                + " rows read back whole and projected onto its compound columns, users "
                + expected.get("users").size()
                + " live keys looked up after an update and a delete; "
                + output;
    }

    private static TableDescriptor descriptor(boolean primaryKey) {
        Schema.Builder schema = Schema.newBuilder();
        for (DataField f : COLUMNS.getFields()) {
            schema.column(f.getName(), f.getType());
        }
        if (primaryKey) {
            schema.primaryKey("id");
        }
        return TableDescriptor.builder()
                .schema(schema.build())
                .distributedBy(BUCKETS, primaryKey ? List.of("id") : List.of())
                .property("table.datalake.enabled", "true")
                .property("table.datalake.freshness", "1s")
                .build();
    }

    /** Row {@code id}: values derived from {@code seed}, nulls (seed 0) or empty compounds (-1). */
    static GenericRow row(long id, int seed) {
        boolean nulls = seed == 0;
        boolean empty = seed < 0;
        int s = Math.abs(seed);
        GenericRow row = new GenericRow(COLUMNS.getFieldCount());
        row.setField(0, id);
        if (nulls) {
            // Only the NOT NULL column holds something: one element (NOT NULL elements).
            row.setField(15, new GenericArray(new Object[] {BinaryString.fromString("only")}));
            return row;
        }
        row.setField(1, Decimal.fromBigDecimal(new BigDecimal(s * 1234 + ".5" + s % 10), 10, 2));
        row.setField(2, TimestampNtz.fromMillis(1_700_000_000_123L + s * 86_400_000L));
        row.setField(
                3, TimestampLtz.fromEpochMillis(1_700_000_000_123L - s * 3_600_000L, s * 1_000 % 1_000_000));
        row.setField(4, new byte[] {(byte) s, 0, (byte) 0xAB, (byte) 0xFF});
        row.setField(5, BinaryString.fromString(String.format("%05d", s)));
        row.setField(6, 19_000 + s);
        if (empty) {
            Object[] none = new Object[0];
            row.setField(7, new GenericArray(none));
            row.setField(8, new GenericArray(none));
            row.setField(9, new GenericArray(none));
            row.setField(10, new GenericArray(none));
            row.setField(11, new GenericMap(Map.of()));
            row.setField(12, new GenericMap(Map.of()));
            row.setField(15, new GenericArray(none));
        } else {
            row.setField(7, new GenericArray(new Object[] {s, null, s + 1}));
            row.setField(8, new GenericArray(new Object[] {str("a" + s), null, str("")}));
            row.setField(9, new GenericArray(new Object[] {
                new GenericArray(new Object[] {s, s * 2}), null, new GenericArray(new Object[0])}));
            row.setField(10, new GenericArray(new Object[] {point(s, "p" + s), null, point(-s, null)}));
            Map<Object, Object> byName = new LinkedHashMap<>();
            byName.put(str("k" + s), s);
            byName.put(str("none"), null);
            row.setField(11, new GenericMap(byName));
            Map<Object, Object> byNumber = new LinkedHashMap<>();
            byNumber.put(s, str("v" + s));
            byNumber.put(-s, null);
            row.setField(12, new GenericMap(byNumber));
            row.setField(15, new GenericArray(new Object[] {str("t" + s), str("u")}));
        }
        row.setField(13, GenericRow.of(s * 10, empty ? null : str("b" + s)));
        GenericRow inner = GenericRow.of(
                Decimal.fromBigDecimal(
                        new BigDecimal("-" + s + "12345678901234567890.0123456789"), 38, 10),
                // After the epoch: both client versions fail to read back a TIMESTAMP_LTZ(6)
                // before it with a fraction of a millisecond (ArrowTimestampLtzColumnVector takes
                // the remainder of a negative number of microseconds: IllegalArgumentException).
                TimestampLtz.fromEpochMillis(86_400_000L * s + 7, 999_000));
        Object[] tags = empty ? new Object[0] : new Object[] {str("x")};
        row.setField(14, GenericRow.of(inner, new GenericArray(tags)));
        return row;
    }

    private static BinaryString str(String s) {
        return BinaryString.fromString(s);
    }

    private static GenericRow point(int x, String y) {
        return GenericRow.of(x, y == null ? null : str(y));
    }

    /** The log table: three rows appended, read back whole and projected. */
    private List<String> events(Client client, TablePath path) throws Exception {
        client.createTable(path, descriptor(false));
        List<GenericRow> rows = List.of(row(1, 1), row(2, 0), row(3, -3));
        try (Table table = client.connection.getTable(path)) {
            AppendWriter writer = table.newAppend().createWriter();
            for (GenericRow row : rows) {
                writer.append(row);
            }
            writer.flush();
            List<String> expected = sorted(rows.stream().map(r -> render(r, COLUMNS)).toList());
            checkEquals(expected, scan(table, null, rows.size()), "events read back");

            int[] compounds = COMPOUNDS;
            RowType projected = COLUMNS.project(compounds);
            List<String> expectedProjection = new ArrayList<>();
            for (GenericRow row : rows) {
                GenericRow part = new GenericRow(compounds.length);
                for (int i = 0; i < compounds.length; i++) {
                    part.setField(i, row.getField(compounds[i]));
                }
                expectedProjection.add(render(part, projected));
            }
            checkEquals(
                    sorted(expectedProjection),
                    scan(table, compounds, rows.size()),
                    "events projected onto " + projected.getFieldNames());
            return expected;
        }
    }

    /** Every row of the table (the columns {@code projection}, all if null), rendered, sorted. */
    private static List<String> scan(Table table, int[] projection, int rows) throws Exception {
        RowType type = projection == null ? COLUMNS : COLUMNS.project(projection);
        try (LogScanner scanner =
                (projection == null ? table.newScan() : table.newScan().project(projection))
                        .createLogScanner()) {
            for (int bucket = 0; bucket < BUCKETS; bucket++) {
                scanner.subscribeFromBeginning(bucket);
            }
            List<ScanRecord> records = Client.pollUntil(scanner, rows, POLL_DEADLINE);
            check(records.size() == rows, "scanned " + records.size() + " of " + rows + " rows");
            return sorted(records.stream().map(r -> render(r.getRow(), type)).toList());
        }
    }

    /** The primary-key table: three keys, key 1 updated, key 3 deleted; a lookup of each. */
    private List<String> users(Client client, TablePath path) throws Exception {
        client.createTable(path, descriptor(true));
        Map<Long, GenericRow> live = new TreeMap<>();
        try (Table table = client.connection.getTable(path)) {
            UpsertWriter writer = table.newUpsert().createWriter();
            for (GenericRow row : List.of(row(1, 1), row(2, 0), row(3, -3))) {
                writer.upsert(row);
                live.put(row.getLong(0), row);
            }
            writer.flush();
            GenericRow updated = row(1, 11);
            writer.upsert(updated);
            live.put(1L, updated);
            writer.delete(live.remove(3L));
            writer.flush();
            Lookuper lookuper = table.newLookup().createLookuper();
            for (long id = 1; id <= 3; id++) {
                List<InternalRow> found =
                        await(lookuper.lookup(GenericRow.of(id)), "lookup " + id).getRowList();
                List<String> got = found.stream().map(r -> render(r, COLUMNS)).toList();
                GenericRow want = live.get(id);
                List<String> expected = want == null ? List.of() : List.of(render(want, COLUMNS));
                checkEquals(expected, got, "lookup " + id);
            }
        }
        return sorted(live.values().stream().map(r -> render(r, COLUMNS)).toList());
    }

    private static List<String> sorted(List<String> rows) {
        List<String> copy = new ArrayList<>(rows);
        copy.sort(null);
        return copy;
    }

    /** A row as {@code a | b | c}: see the class comment. */
    static String render(InternalRow row, RowType type) {
        List<String> cells = new ArrayList<>();
        for (int i = 0; i < type.getFieldCount(); i++) {
            DataType column = type.getTypeAt(i);
            cells.add(value(InternalRow.createFieldGetter(column, i).getFieldOrNull(row), column));
        }
        return String.join(" | ", cells);
    }

    private static String value(Object v, DataType type) {
        if (v == null) {
            return "null";
        }
        switch (type.getTypeRoot()) {
            case CHAR:
            case STRING:
                return "\"" + v + "\"";
            case BINARY:
            case BYTES:
                StringBuilder hex = new StringBuilder("0x");
                for (byte b : (byte[]) v) {
                    hex.append(String.format("%02x", b));
                }
                return hex.toString();
            case DECIMAL:
                return ((Decimal) v).toBigDecimal().toPlainString();
            case DATE:
                return "date " + v;
            case TIMESTAMP_WITHOUT_TIME_ZONE:
                TimestampNtz ntz = (TimestampNtz) v;
                return "ts " + (ntz.getMillisecond() * 1_000_000L + ntz.getNanoOfMillisecond()) + "ns";
            case TIMESTAMP_WITH_LOCAL_TIME_ZONE:
                TimestampLtz ltz = (TimestampLtz) v;
                long nanos = ltz.getEpochMillisecond() * 1_000_000L + ltz.getNanoOfMillisecond();
                return "ts " + nanos + "ns";
            case ARRAY:
                DataType element = ((ArrayType) type).getElementType();
                return "[" + String.join(", ", elements((InternalArray) v, element)) + "]";
            case MAP:
                MapType map = (MapType) type;
                InternalMap m = (InternalMap) v;
                List<String> keys = elements(m.keyArray(), map.getKeyType());
                List<String> values = elements(m.valueArray(), map.getValueType());
                List<String> entries = new ArrayList<>();
                for (int i = 0; i < keys.size(); i++) {
                    entries.add(keys.get(i) + ": " + values.get(i));
                }
                // A map has no order (GenericMap does not keep its entries').
                entries.sort(null);
                return "map{" + String.join(", ", entries) + "}";
            case ROW:
                RowType row = (RowType) type;
                List<String> fields = new ArrayList<>();
                for (int i = 0; i < row.getFieldCount(); i++) {
                    Object f =
                            InternalRow.createFieldGetter(row.getTypeAt(i), i).getFieldOrNull((InternalRow) v);
                    fields.add(row.getFieldNames().get(i) + ": " + value(f, row.getTypeAt(i)));
                }
                return "{" + String.join(", ", fields) + "}";
            default:
                return String.valueOf(v);
        }
    }

    private static List<String> elements(InternalArray array, DataType element) {
        InternalArray.ElementGetter getter = InternalArray.createElementGetter(element);
        List<String> out = new ArrayList<>();
        for (int i = 0; i < array.size(); i++) {
            out.add(value(getter.getElementOrNull(array, i), element));
        }
        return out;
    }
}
