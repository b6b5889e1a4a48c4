package dev.silt.javaclient;

import static dev.silt.javaclient.Checks.await;

import java.lang.reflect.Method;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.CompletableFuture;

import org.apache.fluss.client.table.Table;
import org.apache.fluss.client.table.scanner.batch.BatchScanner;
import org.apache.fluss.client.table.writer.UpsertWriter;
import org.apache.fluss.metadata.DatabaseInfo;
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
 * The RPCs Fluss 1.0 added that its Java client sends: AlterDatabase ({@code
 * Admin.alterDatabase}: a custom property set, then reset, and the comment), GetClusterHealth
 * ({@code Admin.getClusterHealth}: GREEN, a replica per bucket) and ScanKv ({@code
 * createBatchScanner(bucket)} of a primary-key table, which 1.0 answers from the tablet
 * server's kv state in batches): 3,000 keys, 300 updated and 100 deleted, read back whole in
 * batches of at most 64 KiB, exactly the table's current rows. The 1.0 calls go through
 * reflection so the harness compiles against 0.9.1 too; with 0.9.1 on the class path (which has
 * none of them) the scenario says so and passes nothing.
 */
final class FlussOneKeys implements ConnectedScenario {
    static final String DATABASE_PREFIX = "silt_java_v1_";
    static final int KEYS = 3_000;

    @Override
    public Map<String, String> clientOptions() {
        return Map.of("client.scanner.kv.fetch.max-bytes", "64kb");
    }

    @Override
    public String run(Client client) throws Exception {
        Class<?> changes;
        try {
            changes = Class.forName("org.apache.fluss.metadata.DatabaseChange");
        } catch (ClassNotFoundException e) {
            return "not run: fluss-client " + Client.clientVersion() + " has no Fluss 1.0 RPCs";
        }
        String database = DATABASE_PREFIX + Long.toHexString(System.nanoTime());
        await(
                client.admin.createDatabase(
                        database, org.apache.fluss.metadata.DatabaseDescriptor.EMPTY, false),
                "create database " + database);
        String altered = alterDatabase(client, changes, database);
        String health = clusterHealth(client);
        String scanned = scanKv(client, database);
        await(client.admin.dropDatabase(database, false, true), "drop database " + database);
        return altered + "; " + health + "; " + scanned;
    }

    private static Object invoke(Object target, String method, Class<?>[] types, Object... args)
            throws Exception {
        Method m = target instanceof Class<?> c
                ? c.getMethod(method, types)
                : target.getClass().getMethod(method, types);
        m.setAccessible(true);
        return m.invoke(target instanceof Class<?> ? null : target, args);
    }

    private static String alterDatabase(Client client, Class<?> changes, String database)
            throws Exception {
        Object set = invoke(changes, "set", new Class<?>[] {String.class, String.class}, "owner", "alice");
        Object other = invoke(changes, "set", new Class<?>[] {String.class, String.class}, "team", "lake");
        Object comment = invoke(changes, "updateComment", new Class<?>[] {String.class}, "altered by silt's test");
        Method alter = client.admin.getClass().getMethod("alterDatabase", String.class, List.class, boolean.class);
        alter.setAccessible(true);
        await((CompletableFuture<?>) alter.invoke(client.admin, database, List.of(set, other, comment), false),
                "alter database " + database);
        DatabaseInfo info = await(client.admin.getDatabaseInfo(database), "database info");
        Map<String, String> properties = info.getDatabaseDescriptor().getCustomProperties();
        Checks.check("alice".equals(properties.get("owner")) && "lake".equals(properties.get("team")),
                "custom properties after set: " + properties);
        Checks.check(info.getDatabaseDescriptor().getComment().orElse("").equals("altered by silt's test"),
                "comment after update: " + info.getDatabaseDescriptor().getComment());
        Object reset = invoke(changes, "reset", new Class<?>[] {String.class}, "owner");
        await((CompletableFuture<?>) alter.invoke(client.admin, database, List.of(reset), false),
                "reset a property of " + database);
        properties = await(client.admin.getDatabaseInfo(database), "database info")
                .getDatabaseDescriptor().getCustomProperties();
        Checks.check(!properties.containsKey("owner") && "lake".equals(properties.get("team")),
                "custom properties after reset: " + properties);
        boolean missingRefused;
        try {
            await((CompletableFuture<?>) alter.invoke(client.admin, database + "_missing", List.of(set), false),
                    "alter a missing database");
            missingRefused = false;
        } catch (Exception e) {
            missingRefused = String.valueOf(e).contains("DatabaseNotExist");
        }
        Checks.check(missingRefused, "altering a missing database must fail with DatabaseNotExistException");
        return "alterDatabase set, reset and commented";
    }

    private static String clusterHealth(Client client) throws Exception {
        Method method = client.admin.getClass().getMethod("getClusterHealth");
        method.setAccessible(true);
        Object health = await((CompletableFuture<?>) method.invoke(client.admin), "cluster health");
        int replicas = (int) invoke(health, "getNumReplicas", new Class<?>[0]);
        int leaders = (int) invoke(health, "getActiveLeaderReplicas", new Class<?>[0]);
        String status = String.valueOf(invoke(health, "getStatus", new Class<?>[0]));
        Checks.check("GREEN".equals(status) && replicas >= 1 && leaders == replicas,
                "cluster health " + health);
        return "getClusterHealth " + status + " over " + replicas + " buckets";
    }

    private static String scanKv(Client client, String database) throws Exception {
        TableDescriptor descriptor = TableDescriptor.builder()
                .schema(Schema.newBuilder()
                        .column("id", DataTypes.INT())
                        .column("v", DataTypes.STRING())
                        .primaryKey("id")
                        .build())
                .distributedBy(1)
                .build();
        TablePath path = TablePath.of(database, "scanned");
        client.createTable(path, descriptor);
        Map<Integer, String> expected = new TreeMap<>();
        try (Table table = client.connection.getTable(path)) {
            UpsertWriter writer = table.newUpsert().createWriter();
            for (int id = 0; id < KEYS; id++) {
                String v = "value-" + id + "-" + "x".repeat(100);
                writer.upsert(GenericRow.of(id, BinaryString.fromString(v)));
                expected.put(id, v);
            }
            for (int id = 0; id < KEYS; id += 10) {
                String v = "updated-" + id;
                writer.upsert(GenericRow.of(id, BinaryString.fromString(v)));
                expected.put(id, v);
            }
            for (int id = 5; id < KEYS; id += 30) {
                writer.delete(GenericRow.of(id, null));
                expected.remove(id);
            }
            writer.flush();
            long tableId = table.getTableInfo().getTableId();
            Map<Integer, String> seen = new TreeMap<>();
            int batches = 0;
            List<Integer> duplicates = new ArrayList<>();
            long deadline = System.nanoTime() + Duration.ofSeconds(60).toNanos();
            try (BatchScanner scanner = table.newScan().createBatchScanner(new TableBucket(tableId, 0))) {
                while (true) {
                    CloseableIterator<InternalRow> batch = scanner.pollBatch(Client.POLL_INTERVAL);
                    if (batch == null) {
                        break;
                    }
                    batches++;
                    try (batch) {
                        while (batch.hasNext()) {
                            InternalRow row = batch.next();
                            if (seen.put(row.getInt(0), row.getString(1).toString()) != null) {
                                duplicates.add(row.getInt(0));
                            }
                        }
                    }
                    Checks.check(System.nanoTime() - deadline < 0, "the kv scan gave no end within 60 s");
                }
            }
            Checks.check(duplicates.isEmpty(), "keys read twice: " + duplicates);
            Checks.check(seen.equals(expected), "scanned " + seen.size() + " keys, expected " + expected.size()
                    + "; first difference at " + firstDifference(seen, expected));
            Checks.check(batches > 1, "the 64 KiB batches made one batch of " + seen.size() + " keys");
            return "ScanKv read " + seen.size() + " current keys in " + batches + " batches";
        }
    }

    private static Integer firstDifference(Map<Integer, String> a, Map<Integer, String> b) {
        for (int id = 0; id < KEYS; id++) {
            if (!java.util.Objects.equals(a.get(id), b.get(id))) {
                return id;
            }
        }
        return null;
    }
}
