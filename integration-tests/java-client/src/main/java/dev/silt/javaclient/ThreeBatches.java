package dev.silt.javaclient;

import static dev.silt.javaclient.Checks.await;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;

import org.apache.fluss.client.table.Table;
import org.apache.fluss.client.table.scanner.ScanRecord;
import org.apache.fluss.client.table.scanner.log.LogScanner;
import org.apache.fluss.client.table.writer.AppendResult;
import org.apache.fluss.client.table.writer.AppendWriter;
import org.apache.fluss.metadata.Schema;
import org.apache.fluss.metadata.TableDescriptor;
import org.apache.fluss.metadata.TablePath;
import org.apache.fluss.row.GenericRow;
import org.apache.fluss.types.DataTypes;

/**
 * Regression (issue 12, acknowledged writes lost): three batches of one writer, [1,2], [3,4] and
 * [5,6], appended back to back and flushed must all be stored; silt kept only some of them when
 * a later batch reached the server first.
 *
 * <p>The Java client has no public way to append an Arrow batch, so the six rows are appended
 * without waiting for each. With its defaults the client gathers them into one batch, which
 * pipelines nothing; the rounds are therefore run twice: with the defaults, and with write
 * buffers so small that every row is a batch of its own (an Arrow batch takes at least one buffer
 * page, and a batch always accepts its first row), so one writer has up to five batches of one
 * bucket in flight at once (the default {@code max-inflight-requests-per-bucket}), as in the
 * issue. That the small buffers give six one-row batches was checked by reading the batch
 * headers of silt's log segment, with fluss-client 0.9.1-incubating and 1.0.0.
 *
 * <p>Each round: a fresh one-bucket log table, a log scanner subscribed at offset 0 before the
 * writes, six appends, flush, poll until six rows or {@link #POLL_DEADLINE}, then
 * ListOffsets(latest) must be 6. A round that reads anything but exactly ids 1 to 6 once each,
 * or another latest offset, is lost.
 */
final class ThreeBatches implements Scenario {
    static final String DATABASE = "silt_java";
    static final int ROUNDS = 10;
    static final Duration POLL_DEADLINE = Duration.ofSeconds(10);
    static final long[][] BATCHES = {{1, 2}, {3, 4}, {5, 6}};
    static final List<Long> EXPECTED = List.of(1L, 2L, 3L, 4L, 5L, 6L);

    /** Writer configurations the rounds run under, by name. */
    static final Map<String, Map<String, String>> WRITER_CONFIGS =
            Map.of(
                    "default", Map.of(),
                    "one-row-batches",
                    Map.of(
                            "client.writer.buffer.page-size", "128b",
                            "client.writer.batch-size", "128b",
                            "client.writer.dynamic-batch-size.enabled", "false"));
    static final List<String> WRITER_CONFIG_ORDER = List.of("default", "one-row-batches");

    @Override
    public String run(String bootstrap) throws Exception {
        List<String> lost = new ArrayList<>();
        int rounds = 0;
        for (String configName : WRITER_CONFIG_ORDER) {
            try (Client client = Client.connect(bootstrap, WRITER_CONFIGS.get(configName))) {
                for (int round = 0; round < ROUNDS; round++) {
                    String outcome = round(client);
                    rounds++;
                    if (outcome != null) {
                        lost.add(configName + " round " + round + ": " + outcome);
                    }
                }
            }
        }
        Checks.check(
                lost.isEmpty(),
                "lost " + lost.size() + " of " + rounds + " rounds: " + String.join("; ", lost));
        return rounds + " rounds (" + ROUNDS + " with the default writer, " + ROUNDS
                + " with one-row batches), 0 lost";
    }

    /** One round on a fresh table; null if all six rows were kept, else what was seen. */
    private static String round(Client client) throws Exception {
        TableDescriptor descriptor =
                TableDescriptor.builder()
                        .schema(Schema.newBuilder().column("id", DataTypes.BIGINT()).build())
                        .distributedBy(1)
                        .build();
        TablePath path = client.createFreshTable(DATABASE, "three", descriptor);
        List<Long> seen = new ArrayList<>();
        long latest;
        try (Table table = client.connection.getTable(path);
                LogScanner scanner = table.newScan().createLogScanner()) {
            scanner.subscribe(0, 0L);
            AppendWriter writer = table.newAppend().createWriter();
            List<CompletableFuture<AppendResult>> appends = new ArrayList<>();
            for (long[] batch : BATCHES) {
                for (long id : batch) {
                    appends.add(writer.append(GenericRow.of(id)));
                }
            }
            writer.flush();
            for (CompletableFuture<AppendResult> append : appends) {
                await(append, "append to " + path);
            }
            for (ScanRecord record : Client.pollUntil(scanner, EXPECTED.size(), POLL_DEADLINE)) {
                seen.add(record.getRow().getLong(0));
            }
            latest = client.latestOffset(path, 0);
        }
        await(client.admin.dropTable(path, false), "drop table " + path);
        seen.sort(null);
        if (seen.equals(EXPECTED) && latest == EXPECTED.size()) {
            return null;
        }
        return "read " + seen + ", latest offset " + latest;
    }
}
