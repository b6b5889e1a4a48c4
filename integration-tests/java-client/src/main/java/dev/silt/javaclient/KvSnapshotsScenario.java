package dev.silt.javaclient;

import static dev.silt.javaclient.Checks.await;
import static dev.silt.javaclient.Checks.awaitFailure;
import static dev.silt.javaclient.Checks.check;
import static dev.silt.javaclient.Checks.checkEquals;

import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;

import org.apache.fluss.client.admin.KvSnapshotLease;
import org.apache.fluss.client.admin.OffsetSpec;
import org.apache.fluss.client.metadata.KvSnapshots;
import org.apache.fluss.client.table.Table;
import org.apache.fluss.client.table.scanner.ScanRecord;
import org.apache.fluss.client.table.scanner.log.LogScanner;
import org.apache.fluss.client.table.writer.UpsertWriter;
import org.apache.fluss.exception.KvSnapshotNotExistException;
import org.apache.fluss.exception.NonPrimaryKeyTableException;
import org.apache.fluss.metadata.Schema;
import org.apache.fluss.metadata.TableBucket;
import org.apache.fluss.metadata.TableDescriptor;
import org.apache.fluss.metadata.TablePath;
import org.apache.fluss.record.ChangeType;
import org.apache.fluss.row.BinaryString;
import org.apache.fluss.row.GenericRow;
import org.apache.fluss.types.DataTypes;

/**
 * {@code Admin.getLatestKvSnapshots} and what Flink's default primary-key source
 * ({@code scan.startup.mode=full}) does with its answer: a bucket without a snapshot is read from
 * its earliest changelog offset, and folded by key that changelog must be the table. Also the
 * snapshot calls that follow from "no snapshot": its metadata is KvSnapshotNotExist, a lease of
 * it succeeds (silt answers it unavailable), release and drop succeed; a log table has no kv
 * snapshots.
 */
final class KvSnapshotsScenario implements ConnectedScenario {
    static final Duration POLL_DEADLINE = Duration.ofSeconds(20);
    static final int KEYS = 30;

    @Override
    public String run(Client client) throws Exception {
        String leaseOutcome;
        TablePath path = client.createFreshTable("silt_java", "snapshots", table(true, 2));
        try (Table table = client.connection.getTable(path)) {
            long tableId = table.getTableInfo().getTableId();
            write(table);
            var admin = client.admin;
            KvSnapshots snapshots = await(admin.getLatestKvSnapshots(path), "latest kv snapshots");
            checkEquals(tableId, snapshots.getTableId(), "table id of the snapshots");
            checkEquals(Set.of(0, 1), snapshots.getBucketIds(), "buckets of the snapshots");
            for (int bucket : snapshots.getBucketIds()) {
                check(
                        snapshots.getSnapshotId(bucket).isEmpty()
                                && snapshots.getLogOffset(bucket).isEmpty(),
                        "bucket " + bucket + " has a snapshot silt does not keep");
            }
            fullRead(client, table, path);

            TableBucket bucket0 = new TableBucket(tableId, 0);
            awaitFailure(
                    admin.getKvSnapshotMetadata(bucket0, 1L),
                    KvSnapshotNotExistException.class,
                    "metadata of a snapshot that does not exist");
            KvSnapshotLease lease = admin.createKvSnapshotLease("silt-java-" + Client.randomSuffix(), 60_000);
            // silt answers the snapshot unavailable (it does not exist); Fluss 0.9.1 leases
            // whatever it is asked (its existence check is a TODO) and answers none.
            Set<TableBucket> unavailable =
                    await(lease.acquireSnapshots(Map.of(bucket0, 1L)), "acquire a lease")
                            .getUnavailableTableBucketSet();
            check(
                    Set.of(bucket0).containsAll(unavailable),
                    "snapshots the lease could not take: " + unavailable);
            await(lease.releaseSnapshots(Set.of(bucket0)), "release a lease");
            await(lease.dropLease(), "drop a lease");
            leaseOutcome = unavailable.isEmpty() ? "leased" : "unavailable";
        }
        TablePath log = client.createFreshTable("silt_java", "snapshots_log", table(false, 1));
        awaitFailure(
                client.admin.getLatestKvSnapshots(log),
                NonPrimaryKeyTableException.class,
                "kv snapshots of a log table");
        return "no snapshot in either bucket; the changelog from the earliest offsets folds into "
                + "the table; metadata KvSnapshotNotExist, lease of a missing snapshot "
                + leaseOutcome + ", release and drop ok; a log table has none";
    }

    /** Three rounds of upserts of every key, then a delete of every seventh. */
    private static void write(Table table) throws Exception {
        UpsertWriter writer = table.newUpsert().createWriter();
        for (int round = 0; round < 3; round++) {
            for (int id = 0; id < KEYS; id++) {
                writer.upsert(row(id, "round-" + round));
            }
        }
        for (int id = 0; id < KEYS; id += 7) {
            writer.delete(row(id, "round-2"));
        }
        writer.flush();
    }

    /** The snapshot-less full read: each bucket's changelog from its earliest offset. */
    private static void fullRead(Client client, Table table, TablePath path) throws Exception {
        List<Integer> buckets = List.of(0, 1);
        Map<Integer, Long> earliest =
                await(client.admin.listOffsets(path, buckets, new OffsetSpec.EarliestSpec()).all(), "earliest offsets");
        Map<Integer, Long> latest =
                await(client.admin.listOffsets(path, buckets, new OffsetSpec.LatestSpec()).all(), "latest offsets");
        long changes = latest.values().stream().mapToLong(Long::longValue).sum();
        Map<Integer, String> state = new TreeMap<>();
        try (LogScanner scanner = table.newScan().createLogScanner()) {
            for (int bucket : buckets) {
                scanner.subscribe(bucket, earliest.get(bucket));
            }
            List<ScanRecord> records = Client.pollUntil(scanner, (int) changes, POLL_DEADLINE);
            checkEquals(changes, (long) records.size(), "changes read from the earliest offsets");
            for (ScanRecord record : records) {
                int id = record.getRow().getInt(0);
                ChangeType change = record.getChangeType();
                if (change == ChangeType.INSERT || change == ChangeType.UPDATE_AFTER) {
                    state.put(id, record.getRow().getString(1).toString());
                } else {
                    state.remove(id);
                }
            }
        }
        Map<Integer, String> expected = new TreeMap<>();
        for (int id = 0; id < KEYS; id++) {
            if (id % 7 != 0) {
                expected.put(id, "round-2");
            }
        }
        checkEquals(expected, state, "the table as the full read folds it");
    }

    private static TableDescriptor table(boolean primaryKey, int buckets) {
        Schema.Builder schema =
                Schema.newBuilder().column("id", DataTypes.INT()).column("name", DataTypes.STRING());
        if (primaryKey) {
            schema.primaryKey("id");
        }
        return TableDescriptor.builder().schema(schema.build()).distributedBy(buckets).build();
    }

    private static GenericRow row(int id, String name) {
        return GenericRow.of(id, BinaryString.fromString(name));
    }
}
