package dev.silt.javaclient;

import static dev.silt.javaclient.Checks.await;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

import org.apache.fluss.client.table.Table;
import org.apache.fluss.client.table.scanner.ScanRecord;
import org.apache.fluss.client.table.scanner.log.LogScanner;
import org.apache.fluss.client.table.writer.AppendWriter;
import org.apache.fluss.metadata.Schema;
import org.apache.fluss.metadata.TableDescriptor;
import org.apache.fluss.metadata.TablePath;
import org.apache.fluss.row.BinaryString;
import org.apache.fluss.row.GenericRow;
import org.apache.fluss.types.DataTypes;

/**
 * A log table in the INDEXED log format ({@code table.log.format = INDEXED}): the Java client
 * writes its rows as IndexedRow records, not Arrow, and the server stores and serves the batches
 * as written. Ten rows with a null among them, appended in two flushes, must read back once each
 * through a log scanner, and ListOffsets(latest) must be 10.
 */
final class IndexedLog implements ConnectedScenario {
    static final String DATABASE = "silt_java";
    static final int ROWS = 10;

    @Override
    public String run(Client client) throws Exception {
        TableDescriptor descriptor =
                TableDescriptor.builder()
                        .schema(
                                Schema.newBuilder()
                                        .column("id", DataTypes.INT())
                                        .column("name", DataTypes.STRING())
                                        .build())
                        .distributedBy(1)
                        .property("table.log.format", "INDEXED")
                        .build();
        TablePath path = client.createFreshTable(DATABASE, "indexed", descriptor);
        List<String> seen = new ArrayList<>();
        try (Table table = client.connection.getTable(path);
                LogScanner scanner = table.newScan().createLogScanner()) {
            Checks.check(
                    "INDEXED".equals(
                            table.getTableInfo().getProperties().toMap().get("table.log.format")),
                    "the table's log format is INDEXED: " + table.getTableInfo().getProperties());
            AppendWriter writer = table.newAppend().createWriter();
            for (int id = 0; id < ROWS; id++) {
                BinaryString name = id == 3 ? null : BinaryString.fromString("name-" + id);
                await(writer.append(GenericRow.of(id, name)), "append to " + path);
                if (id == ROWS / 2) {
                    writer.flush();
                }
            }
            writer.flush();
            scanner.subscribe(0, 0L);
            for (ScanRecord record : Client.pollUntil(scanner, ROWS, Duration.ofSeconds(10))) {
                String name = record.getRow().isNullAt(1) ? "null" : record.getRow().getString(1).toString();
                seen.add(record.getRow().getInt(0) + ":" + name);
            }
            long latest = client.latestOffset(path, 0);
            Checks.check(latest == ROWS, "latest offset " + latest + ", expected " + ROWS);
        }
        await(client.admin.dropTable(path, false), "drop table " + path);
        List<String> expected = new ArrayList<>();
        for (int id = 0; id < ROWS; id++) {
            expected.add(id + ":" + (id == 3 ? "null" : "name-" + id));
        }
        Checks.check(seen.equals(expected), "read " + seen + ", expected " + expected);
        return ROWS + " rows written as IndexedRow records and read back in order";
    }
}
