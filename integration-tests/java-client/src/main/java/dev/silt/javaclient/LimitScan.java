package dev.silt.javaclient;

import static dev.silt.javaclient.Checks.checkEquals;

import java.io.IOException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

import org.apache.fluss.client.table.Table;
import org.apache.fluss.client.table.scanner.Scan;
import org.apache.fluss.client.table.scanner.batch.BatchScanner;
import org.apache.fluss.client.table.writer.AppendWriter;
import org.apache.fluss.client.table.writer.UpsertWriter;
import org.apache.fluss.metadata.Schema;
import org.apache.fluss.metadata.TableBucket;
import org.apache.fluss.metadata.TableDescriptor;
import org.apache.fluss.metadata.TablePath;
import org.apache.fluss.row.BinaryString;
import org.apache.fluss.row.GenericRow;
import org.apache.fluss.row.InternalRow;
import org.apache.fluss.types.DataTypes;
import org.apache.fluss.utils.CloseableIterator;

/**
 * {@code Scan.limit(n).createBatchScanner(bucket)}, the call behind Flink's {@code SELECT ...
 * LIMIT n}: a log table answers its last n rows (projected when asked), a primary-key table the
 * current values of its first n keys; an empty primary-key table answers no rows.
 */
final class LimitScan implements ConnectedScenario {
    static final Duration SCAN_DEADLINE = Duration.ofSeconds(30);

    @Override
    public String run(Client client) throws Exception {
        logTable(client);
        primaryKeyTable(client);
        return "log table: the last 3 of 10 rows, all 10 under limit 100, projected names; "
                + "PK table: empty, then the first 3 keys' current values and all 4 live keys";
    }

    private static void logTable(Client client) throws Exception {
        TablePath path = client.createFreshTable("silt_java", "limit_log", table(false));
        try (Table table = client.connection.getTable(path)) {
            AppendWriter writer = table.newAppend().createWriter();
            // Two flushes, two batches: the last rows' batch and one before it.
            for (int id = 1; id <= 10; id++) {
                writer.append(row(id, "event-" + id));
                if (id == 5) {
                    writer.flush();
                }
            }
            writer.flush();
            long tableId = table.getTableInfo().getTableId();
            checkEquals(
                    List.of("(8,event-8)", "(9,event-9)", "(10,event-10)"),
                    scan(table.newScan().limit(3), tableId),
                    "limit 3 of " + path);
            checkEquals(10, scan(table.newScan().limit(100), tableId).size(), "limit 100 of " + path);
            checkEquals(
                    List.of("(event-9)", "(event-10)"),
                    scan(table.newScan().limit(2).project(new int[] {1}), tableId),
                    "limit 2 of " + path + " projected to name");
        }
    }

    private static void primaryKeyTable(Client client) throws Exception {
        TablePath path = client.createFreshTable("silt_java", "limit_pk", table(true));
        try (Table table = client.connection.getTable(path)) {
            long tableId = table.getTableInfo().getTableId();
            checkEquals(List.of(), scan(table.newScan().limit(5), tableId), "limit 5 of empty " + path);
            UpsertWriter writer = table.newUpsert().createWriter();
            for (int id = 1; id <= 5; id++) {
                writer.upsert(row(id, "user-" + id));
            }
            writer.upsert(row(2, "user-2-again"));
            writer.delete(row(4, "user-4"));
            writer.flush();
            // Keys 1..5 encode as one byte each, so key order is id order.
            checkEquals(
                    List.of("(1,user-1)", "(2,user-2-again)", "(3,user-3)"),
                    scan(table.newScan().limit(3), tableId),
                    "limit 3 of " + path);
            checkEquals(
                    List.of("(1,user-1)", "(2,user-2-again)", "(3,user-3)", "(5,user-5)"),
                    scan(table.newScan().limit(10), tableId),
                    "limit 10 of " + path);
        }
    }

    private static TableDescriptor table(boolean primaryKey) {
        Schema.Builder schema =
                Schema.newBuilder().column("id", DataTypes.INT()).column("name", DataTypes.STRING());
        if (primaryKey) {
            schema.primaryKey("id");
        }
        return TableDescriptor.builder().schema(schema.build()).distributedBy(1).build();
    }

    /** Every row bucket 0's batch scanner gives, bounded by {@link #SCAN_DEADLINE}. */
    private static List<String> scan(Scan scan, long tableId) throws Exception {
        List<String> rows = new ArrayList<>();
        long deadline = System.nanoTime() + SCAN_DEADLINE.toNanos();
        try (BatchScanner scanner = scan.createBatchScanner(new TableBucket(tableId, 0))) {
            while (true) {
                CloseableIterator<InternalRow> batch = scanner.pollBatch(Client.POLL_INTERVAL);
                if (batch == null) {
                    return rows;
                }
                try (batch) {
                    batch.forEachRemaining(row -> rows.add(describe(row)));
                }
                if (System.nanoTime() - deadline > 0) {
                    throw new Checks.Failed(
                            "the limit scan gave no end within " + SCAN_DEADLINE.toSeconds() + " s");
                }
            }
        } catch (IOException e) {
            throw new Exception("limit scan failed: " + e, e);
        }
    }

    private static GenericRow row(int id, String name) {
        return GenericRow.of(id, BinaryString.fromString(name));
    }

    /** (id,name) of a row, or (name) of a row projected to its name. */
    private static String describe(InternalRow row) {
        if (row.getFieldCount() == 1) {
            return "(" + row.getString(0) + ")";
        }
        return "(" + row.getInt(0) + "," + row.getString(1) + ")";
    }
}
