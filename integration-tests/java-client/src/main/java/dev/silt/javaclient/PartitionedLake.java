package dev.silt.javaclient;

import static dev.silt.javaclient.Checks.await;
import static dev.silt.javaclient.Checks.awaitFailure;
import static dev.silt.javaclient.Checks.check;
import static dev.silt.javaclient.Checks.checkEquals;

import java.time.Duration;
import java.time.LocalDate;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.CompletableFuture;

import org.apache.fluss.client.admin.OffsetSpec;
import org.apache.fluss.client.lookup.LookupResult;
import org.apache.fluss.client.lookup.Lookuper;
import org.apache.fluss.client.table.Table;
import org.apache.fluss.client.table.scanner.ScanRecord;
import org.apache.fluss.client.table.scanner.log.LogScanner;
import org.apache.fluss.client.table.writer.AppendWriter;
import org.apache.fluss.client.table.writer.UpsertWriter;
import org.apache.fluss.config.AutoPartitionTimeUnit;
import org.apache.fluss.config.ConfigOptions;
import org.apache.fluss.exception.PartitionAlreadyExistsException;
import org.apache.fluss.exception.PartitionNotExistException;
import org.apache.fluss.metadata.DatabaseDescriptor;
import org.apache.fluss.metadata.PartitionInfo;
import org.apache.fluss.metadata.PartitionSpec;
import org.apache.fluss.metadata.Schema;
import org.apache.fluss.metadata.TableDescriptor;
import org.apache.fluss.metadata.TablePath;
import org.apache.fluss.record.ChangeType;
import org.apache.fluss.row.BinaryString;
import org.apache.fluss.row.GenericRow;
import org.apache.fluss.row.InternalRow;
import org.apache.fluss.types.DataTypes;

/**
 * Partitioned, lake-enabled tables (issue 17) as a Java user makes them, checked through the
 * client and left behind for a test to tier. In a fresh database {@code
 * silt_java_partitioned_<random>}:
 *
 * <ul>
 *   <li>{@code events (id INT, v STRING, dt STRING) PARTITIONED BY (dt)}: two days created with
 *       createPartition (again: PartitionAlreadyExists), a day created and dropped while empty
 *       (again: PartitionNotExist), and a third day the writer creates itself on its first row
 *       for it ({@code client.writer.dynamic-create-partition.enabled}, on by default); every
 *       partition id distinct.
 *   <li>{@code users (dt STRING, id INT, v STRING) PRIMARY KEY (dt, id) PARTITIONED BY (dt)}:
 *       upserts, updates and deletes in three days (the third again created by the writer),
 *       then a lookup of every key of every day.
 *   <li>{@code auto_events}, as events but with {@code table.auto-partition.enabled} (DAY, UTC):
 *       today's and tomorrow's partitions appear on their own, and take rows.
 * </ul>
 *
 * <p>Every partition is read back on its own: a log scanner subscribed to that partition's
 * buckets from the beginning, up to their latest offsets (ListOffsets by partition name). A log
 * table's partition must hold exactly that day's rows, a primary-key table's changelog folded by
 * key exactly that day's last images. listPartitionInfos with and without a partial spec.
 *
 * <p>With {@code JAVA_CLIENT_OUTPUT_DIR} set it writes what each table must hold to {@code
 * <dir>/<database>.<table>.rows}, one {@code dt|id|v} line per row, sorted (every row of a log
 * table; the last image per key of a primary-key table), for the test that tiers them
 * ({@code tests/partitioned_clients.rs}).
 */
final class PartitionedLake implements ConnectedScenario {
    static final Duration POLL_DEADLINE = Duration.ofSeconds(30);
    /** How long auto-partitioning may take to create a new table's partitions. */
    static final Duration AUTO_PARTITION_DEADLINE = Duration.ofSeconds(30);
    static final int BUCKETS = 2;
    static final String DAY_1 = "2026-11-29";
    static final String DAY_2 = "2026-11-30";
    /** Never created by an admin call: the writers create it. */
    static final String DAY_3 = "2026-12-01";
    static final String DROPPED_DAY = "2026-12-31";
    static final List<String> DAYS = List.of(DAY_1, DAY_2, DAY_3);
    static final int EVENTS_PER_DAY = 120;
    static final int KEYS_PER_DAY = 20;
    static final int AUTO_ROWS_PER_PARTITION = 30;
    static final DateTimeFormatter DAY_PARTITION = DateTimeFormatter.ofPattern("yyyyMMdd");

    /**
     * Round robin, so that the log tables' rows reach every bucket of every partition (the
     * default, sticky, fills one bucket per partition with this few rows).
     */
    @Override
    public Map<String, String> clientOptions() {
        return Map.of(ConfigOptions.CLIENT_WRITER_BUCKET_NO_KEY_ASSIGNER.key(), "ROUND_ROBIN");
    }

    @Override
    public String run(Client client) throws Exception {
        String database = "silt_java_partitioned_" + Client.randomSuffix();
        await(client.admin.createDatabase(database, DatabaseDescriptor.EMPTY, false), "create database");
        Map<String, List<String>> expected = new TreeMap<>();
        expected.put("events", events(client, TablePath.of(database, "events")));
        expected.put("users", users(client, TablePath.of(database, "users")));
        List<String> autoPartitions = new ArrayList<>();
        TablePath auto = TablePath.of(database, "auto_events");
        expected.put("auto_events", autoEvents(client, auto, autoPartitions));
        String output = ExpectedRows.write(database, List.of(), expected);
        return "database " + database + ": events " + expected.get("events").size()
                + " rows in 3 days (one created by the writer; one dropped while empty), users "
                + expected.get("users").size() + " live keys in 3 days after updates and deletes, "
                + "auto_events partitions " + autoPartitions + " created on their own; every "
                + "partition read back on its own; " + output;
    }

    private static TableDescriptor.Builder lakeTable(Schema schema) {
        return TableDescriptor.builder()
                .schema(schema)
                .partitionedBy("dt")
                .distributedBy(BUCKETS)
                .property(ConfigOptions.TABLE_DATALAKE_ENABLED, true)
                .property(ConfigOptions.TABLE_DATALAKE_FRESHNESS, Duration.ofMillis(300));
    }

    private static Schema eventsSchema() {
        return Schema.newBuilder()
                .column("id", DataTypes.INT())
                .column("v", DataTypes.STRING())
                .column("dt", DataTypes.STRING())
                .build();
    }

    /** The log table; returns its rows as {@code dt|id|v}. */
    private static List<String> events(Client client, TablePath path) throws Exception {
        var admin = client.admin;
        client.createTable(path, lakeTable(eventsSchema()).build());
        Set<Long> ids = new HashSet<>();
        for (String day : List.of(DAY_1, DAY_2)) {
            client.createPartition(path, "dt", day);
        }
        awaitFailure(
                admin.createPartition(path, spec(DAY_1), false),
                PartitionAlreadyExistsException.class,
                "create partition " + DAY_1 + " twice");
        await(admin.createPartition(path, spec(DAY_1), true), "create an existing partition, ignoring that");

        client.createPartition(path, "dt", DROPPED_DAY);
        ids.add(partition(client, path, DROPPED_DAY).getPartitionId());
        await(admin.dropPartition(path, spec(DROPPED_DAY), false), "drop partition " + DROPPED_DAY);
        checkEquals(List.of(DAY_1, DAY_2), names(client, path), "partitions of " + path + " after a drop");
        awaitFailure(
                admin.dropPartition(path, spec(DROPPED_DAY), false),
                PartitionNotExistException.class,
                "drop a dropped partition");
        await(admin.dropPartition(path, spec(DROPPED_DAY), true), "drop a dropped partition, ignoring that");

        List<String> rows = new ArrayList<>();
        try (Table table = client.connection.getTable(path)) {
            AppendWriter writer = table.newAppend().createWriter();
            // Days interleaved, so the writer's batches of every partition fill at once.
            for (int i = 0; i < EVENTS_PER_DAY; i++) {
                for (int d = 0; d < DAYS.size(); d++) {
                    String day = DAYS.get(d);
                    int id = d * 1000 + i;
                    String v = "event-" + day + "-" + i;
                    writer.append(GenericRow.of(id, string(v), string(day)));
                    rows.add(day + "|" + id + "|" + v);
                }
            }
            writer.flush();

            checkEquals(DAYS, names(client, path), "partitions of " + path + " after the writes");
            checkEquals(
                    List.of(DAY_2),
                    names(await(admin.listPartitionInfos(path, spec(DAY_2)), "list partitions dt=" + DAY_2)),
                    "partitions of " + path + " listed with the partial spec dt=" + DAY_2);
            for (PartitionInfo partition : await(admin.listPartitionInfos(path), "list partitions")) {
                ids.add(partition.getPartitionId());
                checkLogPartition(client, table, path, partition, rows);
            }
        }
        checkEquals(4, ids.size(), "distinct ids of the 4 partitions " + path + " had (the dropped one's too)");
        return sorted(rows);
    }

    /** The primary-key table; returns its last image per key as {@code dt|id|v}. */
    private static List<String> users(Client client, TablePath path) throws Exception {
        Schema schema =
                Schema.newBuilder()
                        .column("dt", DataTypes.STRING())
                        .column("id", DataTypes.INT())
                        .column("v", DataTypes.STRING())
                        .primaryKey("dt", "id")
                        .build();
        client.createTable(path, lakeTable(schema).build());
        checkEquals(
                List.of("dt", "id"),
                await(client.admin.getTableInfo(path), "table info").getPrimaryKeys(),
                "primary key of " + path);
        for (String day : List.of(DAY_1, DAY_2)) {
            client.createPartition(path, "dt", day);
        }
        // "dt|id" to the last value written, null once deleted.
        Map<String, String> latest = new TreeMap<>();
        try (Table table = client.connection.getTable(path)) {
            UpsertWriter writer = table.newUpsert().createWriter();
            for (int round = 0; round < 2; round++) {
                for (String day : DAYS) {
                    for (int id = 0; id < KEYS_PER_DAY; id++) {
                        // Round 1 updates every third key.
                        if (round == 0 || id % 3 == 0) {
                            String v = "user-" + day + "-" + id + "-" + round;
                            writer.upsert(GenericRow.of(string(day), id, string(v)));
                            latest.put(day + "|" + id, v);
                        }
                    }
                }
            }
            for (String day : DAYS) {
                for (int id = 0; id < KEYS_PER_DAY; id += 5) {
                    writer.delete(GenericRow.of(string(day), id, string(latest.get(day + "|" + id))));
                    latest.put(day + "|" + id, null);
                }
            }
            writer.flush();
            checkEquals(DAYS, names(client, path), "partitions of " + path + " after the writes");

            Lookuper lookuper = table.newLookup().createLookuper();
            Map<String, CompletableFuture<LookupResult>> lookups = new TreeMap<>();
            for (String key : latest.keySet()) {
                String[] parts = key.split("\\|");
                GenericRow primaryKey = GenericRow.of(string(parts[0]), Integer.parseInt(parts[1]));
                lookups.put(key, lookuper.lookup(primaryKey));
            }
            Map<String, String> found = new TreeMap<>();
            for (var lookup : lookups.entrySet()) {
                InternalRow row = await(lookup.getValue(), "lookup " + lookup.getKey()).getSingletonRow();
                found.put(lookup.getKey(), row == null ? null : userLine(row));
            }
            Map<String, String> want = new TreeMap<>();
            latest.forEach((key, v) -> want.put(key, v == null ? null : key + "|" + v));
            checkEquals(want, found, "lookups of every key of " + path);

            for (PartitionInfo partition : await(client.admin.listPartitionInfos(path), "list partitions")) {
                Map<String, String> folded = new TreeMap<>();
                for (ScanRecord record : readPartition(client, table, path, partition)) {
                    String line = userLine(record.getRow());
                    String key = line.substring(0, line.lastIndexOf('|'));
                    ChangeType change = record.getChangeType();
                    if (change == ChangeType.INSERT || change == ChangeType.UPDATE_AFTER) {
                        folded.put(key, line);
                    } else if (change == ChangeType.DELETE) {
                        folded.remove(key);
                    }
                }
                checkEquals(
                        ofDay(liveRows(latest), partition.getPartitionName()),
                        sorted(new ArrayList<>(folded.values())),
                        "the changelog of " + path + " partition " + partition.getPartitionName()
                                + " folded by key");
            }
        }
        return liveRows(latest);
    }

    /** The auto-partitioned log table; returns its rows and puts its partitions' names in {@code names}. */
    private static List<String> autoEvents(Client client, TablePath path, List<String> names)
            throws Exception {
        String todayBefore = LocalDate.now(ZoneOffset.UTC).format(DAY_PARTITION);
        client.createTable(
                path,
                lakeTable(eventsSchema())
                        .property(ConfigOptions.TABLE_AUTO_PARTITION_ENABLED, true)
                        .property(ConfigOptions.TABLE_AUTO_PARTITION_TIME_UNIT, AutoPartitionTimeUnit.DAY)
                        .property(ConfigOptions.TABLE_AUTO_PARTITION_TIMEZONE, "UTC")
                        .build());
        long deadline = System.nanoTime() + AUTO_PARTITION_DEADLINE.toNanos();
        List<PartitionInfo> partitions = await(client.admin.listPartitionInfos(path), "list partitions");
        while (partitions.size() < 2 && System.nanoTime() - deadline < 0) {
            Thread.sleep(Client.TABLE_READY_RETRY.toMillis());
            partitions = await(client.admin.listPartitionInfos(path), "list partitions");
        }
        names.addAll(names(partitions));
        String todayAfter = LocalDate.now(ZoneOffset.UTC).format(DAY_PARTITION);
        // Today and tomorrow (num-precreate 2) in UTC, as of before or after the create (midnight).
        check(
                names.equals(todayAndTomorrow(todayBefore)) || names.equals(todayAndTomorrow(todayAfter)),
                "auto-partitions of " + path + ": expected " + todayAndTomorrow(todayBefore)
                        + " (as of the create, in UTC), got " + names);
        List<String> rows = new ArrayList<>();
        try (Table table = client.connection.getTable(path)) {
            AppendWriter writer = table.newAppend().createWriter();
            for (int p = 0; p < names.size(); p++) {
                client.awaitServing(path, names.get(p));
                for (int i = 0; i < AUTO_ROWS_PER_PARTITION; i++) {
                    int id = p * 1000 + i;
                    String v = "auto-" + names.get(p) + "-" + i;
                    writer.append(GenericRow.of(id, string(v), string(names.get(p))));
                    rows.add(names.get(p) + "|" + id + "|" + v);
                }
            }
            writer.flush();
            for (PartitionInfo partition : partitions) {
                checkLogPartition(client, table, path, partition, rows);
            }
        }
        return sorted(rows);
    }

    /**
     * Reads one partition of a log table ({@code id INT, v STRING, dt STRING}) and checks that it
     * holds exactly {@code rows}' lines of its day, every record an append.
     */
    private static void checkLogPartition(
            Client client, Table table, TablePath path, PartitionInfo partition, List<String> rows)
            throws Exception {
        List<String> read = new ArrayList<>();
        for (ScanRecord record : readPartition(client, table, path, partition)) {
            check(
                    record.getChangeType() == ChangeType.APPEND_ONLY,
                    "a log table's record is " + record.getChangeType());
            InternalRow row = record.getRow();
            read.add(row.getString(2) + "|" + row.getInt(0) + "|" + row.getString(1));
        }
        checkEquals(
                sorted(ofDay(rows, partition.getPartitionName())),
                sorted(read),
                "rows of " + path + " partition " + partition.getPartitionName());
    }

    private static List<String> todayAndTomorrow(String today) {
        LocalDate day = LocalDate.parse(today, DAY_PARTITION);
        return List.of(today, day.plusDays(1).format(DAY_PARTITION));
    }

    /**
     * Every record of one partition: its buckets subscribed from the beginning, polled until
     * their latest offsets' worth arrived (the scan of a partition filter).
     */
    private static List<ScanRecord> readPartition(
            Client client, Table table, TablePath path, PartitionInfo partition) throws Exception {
        String name = partition.getPartitionName();
        List<Integer> buckets = new ArrayList<>();
        for (int bucket = 0; bucket < BUCKETS; bucket++) {
            buckets.add(bucket);
        }
        Map<Integer, Long> latest =
                await(
                        client.admin.listOffsets(path, name, buckets, new OffsetSpec.LatestSpec()).all(),
                        "latest offsets of " + path + " partition " + name);
        long total = latest.values().stream().mapToLong(Long::longValue).sum();
        try (LogScanner scanner = table.newScan().createLogScanner()) {
            for (int bucket : buckets) {
                scanner.subscribeFromBeginning(partition.getPartitionId(), bucket);
            }
            List<ScanRecord> records = Client.pollUntil(scanner, (int) total, POLL_DEADLINE);
            checkEquals(total, (long) records.size(), "records read from " + path + " partition " + name
                    + " (its latest offsets " + latest + ")");
            return records;
        }
    }

    private static PartitionInfo partition(Client client, TablePath path, String name) throws Exception {
        for (PartitionInfo partition : await(client.admin.listPartitionInfos(path), "list partitions")) {
            if (partition.getPartitionName().equals(name)) {
                return partition;
            }
        }
        throw new Checks.Failed("partition " + name + " of " + path + " is not listed");
    }

    private static List<String> names(Client client, TablePath path) throws Exception {
        return names(await(client.admin.listPartitionInfos(path), "list partitions of " + path));
    }

    private static List<String> names(List<PartitionInfo> partitions) {
        List<String> names = new ArrayList<>();
        partitions.forEach(p -> names.add(p.getPartitionName()));
        return sorted(names);
    }

    private static PartitionSpec spec(String day) {
        return new PartitionSpec(Map.of("dt", day));
    }

    private static BinaryString string(String text) {
        return BinaryString.fromString(text);
    }

    /** dt|id|v of a row of the users table. */
    private static String userLine(InternalRow row) {
        return row.getString(0) + "|" + row.getInt(1) + "|" + row.getString(2);
    }

    /** The dt|id|v lines of the keys not deleted, sorted. */
    private static List<String> liveRows(Map<String, String> latest) {
        Map<String, String> live = new HashMap<>();
        latest.forEach((key, v) -> {
            if (v != null) {
                live.put(key, key + "|" + v);
            }
        });
        return sorted(new ArrayList<>(live.values()));
    }

    /** The lines of {@code rows} whose dt (first field) is {@code day}. */
    private static List<String> ofDay(List<String> rows, String day) {
        List<String> of = new ArrayList<>();
        for (String row : rows) {
            if (row.startsWith(day + "|")) {
                of.add(row);
            }
        }
        return of;
    }

    private static List<String> sorted(List<String> lines) {
        List<String> copy = new ArrayList<>(lines);
        copy.sort(null);
        return copy;
    }
}
