package dev.silt.javaclient;

import static dev.silt.javaclient.Checks.await;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.UUID;

import org.apache.fluss.client.Connection;
import org.apache.fluss.client.ConnectionFactory;
import org.apache.fluss.client.admin.Admin;
import org.apache.fluss.client.admin.ListOffsetsResult;
import org.apache.fluss.client.admin.OffsetSpec;
import org.apache.fluss.client.table.scanner.ScanRecord;
import org.apache.fluss.client.table.scanner.log.LogScanner;
import org.apache.fluss.config.Configuration;
import org.apache.fluss.metadata.DatabaseDescriptor;
import org.apache.fluss.metadata.PartitionSpec;
import org.apache.fluss.metadata.TableDescriptor;
import org.apache.fluss.metadata.TablePath;

/** A connection of the official Java client with its admin, and the steps scenarios share. */
final class Client implements AutoCloseable {
    /** How long one poll call of a log scanner blocks at most. */
    static final Duration POLL_INTERVAL = Duration.ofMillis(200);

    /** How long a new table's buckets may take to get a leader, and the wait between checks. */
    static final Duration TABLE_READY_DEADLINE = Duration.ofSeconds(30);
    static final Duration TABLE_READY_RETRY = Duration.ofMillis(100);

    final Connection connection;
    final Admin admin;

    private Client(Connection connection) {
        this.connection = connection;
        this.admin = connection.getAdmin();
    }

    /** Connects to {@code bootstrap} with the client's defaults overridden by {@code options}. */
    static Client connect(String bootstrap, Map<String, String> options) {
        Configuration config = new Configuration();
        config.setString("bootstrap.servers", bootstrap);
        options.forEach(config::setString);
        return new Client(ConnectionFactory.createConnection(config));
    }

    /** The version of fluss-client on the class path, from its jar's manifest. */
    static String clientVersion() {
        String version = ConnectionFactory.class.getPackage().getImplementationVersion();
        return version == null ? "unknown" : version;
    }

    /**
     * Creates {@code database} if it is missing and a table {@code <prefix>_<random>} in it, so
     * reruns against a long-lived server never collide, and waits until its buckets serve.
     */
    TablePath createFreshTable(String database, String prefix, TableDescriptor descriptor)
            throws Exception {
        await(
                admin.createDatabase(database, DatabaseDescriptor.EMPTY, true),
                "create database " + database);
        TablePath path = TablePath.of(database, prefix + "_" + randomSuffix());
        createTable(path, descriptor);
        return path;
    }

    /**
     * Creates a table and, unless it is partitioned, waits until its buckets serve (see {@link
     * #awaitServing}). A partitioned table has no buckets of its own: each partition's serve
     * once it exists, see {@link #createPartition}.
     */
    void createTable(TablePath path, TableDescriptor descriptor) throws Exception {
        await(admin.createTable(path, descriptor, false), "create table " + path);
        if (!descriptor.isPartitioned()) {
            awaitServing(path, null);
        }
    }

    /**
     * Creates the partition {@code key=value} of {@code path}, a table partitioned by {@code key}
     * alone (so the partition is named {@code value}), and waits until it serves.
     */
    void createPartition(TablePath path, String key, String value) throws Exception {
        await(
                admin.createPartition(path, new PartitionSpec(Map.of(key, value)), false),
                "create partition " + key + "=" + value + " of " + path);
        awaitServing(path, value);
    }

    /**
     * Waits, at most {@link #TABLE_READY_DEADLINE}, until ListOffsets answers for each bucket of
     * the table (or of its partition {@code partitionName}, when not null), i.e. every bucket
     * has a leader. A Fluss cluster places buckets after CreateTable (CreatePartition) returns,
     * and the client's writer retries a bucket without a leader for ever (flush has no
     * timeout), so a table that never gets one must fail here, by name.
     */
    void awaitServing(TablePath path, String partitionName) throws Exception {
        int buckets = await(admin.getTableInfo(path), "table info of " + path).getNumBuckets();
        List<Integer> all = new ArrayList<>();
        for (int bucket = 0; bucket < buckets; bucket++) {
            all.add(bucket);
        }
        String what = partitionName == null ? path.toString() : path + " partition " + partitionName;
        long deadline = System.nanoTime() + TABLE_READY_DEADLINE.toNanos();
        while (true) {
            try {
                ListOffsetsResult offsets =
                        partitionName == null
                                ? admin.listOffsets(path, all, new OffsetSpec.LatestSpec())
                                : admin.listOffsets(path, partitionName, all, new OffsetSpec.LatestSpec());
                await(offsets.all(), "list offsets of " + what);
                return;
            } catch (Exception e) {
                if (System.nanoTime() - deadline > 0) {
                    throw new Checks.Failed(
                            "the buckets of " + what + " did not all serve within "
                                    + TABLE_READY_DEADLINE.toSeconds()
                                    + " s of its creation: " + e.getMessage());
                }
                Thread.sleep(TABLE_READY_RETRY.toMillis());
            }
        }
    }

    static String randomSuffix() {
        return UUID.randomUUID().toString().replace("-", "").substring(0, 8);
    }

    /** Polls until {@code expected} records arrived or {@code deadline} passed; returns them all. */
    static List<ScanRecord> pollUntil(LogScanner scanner, int expected, Duration deadline) {
        List<ScanRecord> records = new ArrayList<>();
        long deadlineNanos = System.nanoTime() + deadline.toNanos();
        while (records.size() < expected && System.nanoTime() - deadlineNanos < 0) {
            scanner.poll(POLL_INTERVAL).forEach(records::add);
        }
        return records;
    }

    /** ListOffsets(latest) of one bucket: the high watermark. */
    long latestOffset(TablePath path, int bucket) throws Exception {
        Map<Integer, Long> offsets =
                await(
                        admin.listOffsets(path, List.of(bucket), new OffsetSpec.LatestSpec()).all(),
                        "list offsets of " + path);
        return offsets.get(bucket);
    }

    @Override
    public void close() throws Exception {
        admin.close();
        connection.close();
    }
}
