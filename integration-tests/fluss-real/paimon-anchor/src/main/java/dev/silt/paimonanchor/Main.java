package dev.silt.paimonanchor;

import org.apache.fluss.client.Connection;
import org.apache.fluss.client.ConnectionFactory;
import org.apache.fluss.client.admin.Admin;
import org.apache.fluss.client.admin.OffsetSpec;
import org.apache.fluss.client.metadata.LakeSnapshot;
import org.apache.fluss.client.table.Table;
import org.apache.fluss.client.table.writer.AppendWriter;
import org.apache.fluss.config.Configuration;
import org.apache.fluss.metadata.DatabaseDescriptor;
import org.apache.fluss.metadata.Schema;
import org.apache.fluss.metadata.TableBucket;
import org.apache.fluss.metadata.TableDescriptor;
import org.apache.fluss.metadata.TablePath;
import org.apache.fluss.row.BinaryString;
import org.apache.fluss.row.GenericRow;
import org.apache.fluss.types.DataTypes;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.ExecutionException;

/**
 * The control measurement: Apache Fluss's own lake tiering service (the Flink job of
 * fluss-flink-tiering, run here in a local MiniCluster inside this JVM) tiering a real Fluss
 * cluster into Paimon, measured in the shapes of silt's `silt bench tiering`.
 *
 * <ol>
 *   <li>Throughput: {@code bench.throughput} (12 columns, 4 buckets, lake enabled) is pre-filled
 *       with {@code --rows} rows before the tiering job starts; the clock runs from the job's
 *       start until the latest lake snapshot's per-bucket offsets reach every bucket's end
 *       offset.
 *   <li>Freshness: with the job running, {@code bench.freshness} gets {@code --rate} rows/s for
 *       {@code --seconds} s in flushes every {@code --flush-ms} ms; after every acknowledged
 *       flush the high watermarks are listed, and the time until the lake snapshot covers them
 *       is one sample.
 * </ol>
 *
 * <p>Prints progress on stderr and one tab-separated {@code RESULT} line per phase on stdout.
 */
public final class Main {
    private static final String DB = "bench";
    private static final int BUCKETS = 4;
    private static final BinaryString[] CITIES = {
        BinaryString.fromString("Lisbon"), BinaryString.fromString("Oslo"),
        BinaryString.fromString("Lyon"), BinaryString.fromString("Kyoto"),
        BinaryString.fromString("Quito")
    };
    /** The 50,000 distinct `sku` values, made once (String.format per row held the writer back). */
    private static final BinaryString[] SKUS = new BinaryString[50_000];

    static {
        for (int i = 0; i < SKUS.length; i++) {
            SKUS[i] = BinaryString.fromString(String.format(Locale.ROOT, "SKU-%06d", i));
        }
    }

    public static void main(String[] argv) {
        try {
            bench(argv);
        } catch (Throwable t) {
            t.printStackTrace();
            System.exit(1); // the MiniCluster's and client's threads would keep the JVM alive
        }
        System.out.flush();
        // The MiniCluster of the tiering job has no handle here (FlussLakeTiering keeps its
        // JobClient to itself); ending the JVM ends it.
        System.exit(0);
    }

    private static void bench(String[] argv) throws Exception {
        Map<String, String> a = parseArgs(argv);
        String bootstrap = required(a, "bootstrap");
        String warehouse = required(a, "warehouse");
        String label = a.getOrDefault("label", "default");
        long rows = Long.parseLong(a.getOrDefault("rows", "1000000"));
        String freshness = a.getOrDefault("freshness", ""); // empty: Fluss's default (3min)
        int parallelism = Integer.parseInt(a.getOrDefault("parallelism", "1"));
        String pollInterval = a.getOrDefault("poll-interval", ""); // empty: default (30s)
        double rate = Double.parseDouble(a.getOrDefault("rate", "100000"));
        int seconds = Integer.parseInt(a.getOrDefault("seconds", "20"));
        int flushMs = Integer.parseInt(a.getOrDefault("flush-ms", "100"));
        long freshnessWaitS = Long.parseLong(a.getOrDefault("freshness-timeout-s", "600"));
        List<String> phases = Arrays.asList(a.getOrDefault("phases", "throughput,freshness").split(","));
        // Extra arguments for the tiering job, as `flink run ... fluss-flink-tiering.jar` takes
        // them (e.g. "--fluss.client.scanner.log.max-poll-records 2000"), space separated.
        String extraTieringArgs = a.getOrDefault("tiering-args", "");

        Configuration conf = new Configuration();
        conf.setString("bootstrap.servers", bootstrap);
        try (Connection connection = ConnectionFactory.createConnection(conf);
                Admin admin = connection.getAdmin()) {
            admin.createDatabase(DB, DatabaseDescriptor.EMPTY, true).get();

            // --- throughput -------------------------------------------------------------------
            TablePath throughput = TablePath.of(DB, "throughput");
            long createdMs = 0;
            Map<Integer, Long> preloadHw = null;
            if (phases.contains("throughput")) {
                createdMs = createTable(admin, throughput, freshness);
                long t = System.nanoTime();
                append(connection, throughput, 0, rows);
                double preloadS = (System.nanoTime() - t) / 1e9;
                preloadHw = latest(admin, throughput);
                long sum = preloadHw.values().stream().mapToLong(Long::longValue).sum();
                say("[%s] pre-filled %,d rows in %.1f s (%,.0f rows/s); end offsets %s (sum %,d)",
                        label, rows, preloadS, rows / preloadS, preloadHw, sum);
                // A new lake table is handed to a tiering service only once its freshness
                // interval has passed since it was created (LakeTableTieringManager schedules it
                // then). Wait that out, untimed, so the clock below measures tiering, not the
                // scheduler's first delay.
                long freshnessMs = freshnessMs(admin, throughput);
                long dueIn = createdMs + freshnessMs - System.currentTimeMillis();
                if (dueIn > 0) {
                    say("[%s] waiting %.1f s (untimed) until the table is due for tiering (freshness %d ms)",
                            label, dueIn / 1e3, freshnessMs);
                    Thread.sleep(dueIn + 200);
                }
            }

            // --- the tiering job ---------------------------------------------------------------
            List<String> tieringArgs = new ArrayList<>(List.of(
                    "--fluss.bootstrap.servers", bootstrap,
                    "--datalake.format", "paimon",
                    "--datalake.paimon.metastore", "filesystem",
                    "--datalake.paimon.warehouse", warehouse));
            if (!pollInterval.isEmpty()) {
                tieringArgs.addAll(List.of("--fluss.tiering.poll.table.interval", pollInterval));
            }
            if (!extraTieringArgs.isBlank()) {
                tieringArgs.addAll(Arrays.asList(extraTieringArgs.trim().split("\\s+")));
            }
            say("[%s] starting the tiering job: parallelism %d, args %s", label, parallelism, tieringArgs);
            long jobStart = System.nanoTime();
            LocalTiering.start(tieringArgs.toArray(new String[0]), parallelism);
            double submitS = (System.nanoTime() - jobStart) / 1e9;
            say("[%s] tiering job submitted in %.2f s (MiniCluster start included)", label, submitS);

            if (preloadHw != null) {
                long deadline = System.nanoTime() + 1800L * 1_000_000_000L;
                double firstCommitS = -1;
                int snapshots = 0;
                long lastSnapshotId = -1;
                while (true) {
                    LakeSnapshot s = lakeSnapshot(admin, throughput);
                    if (s != null && s.getSnapshotId() != lastSnapshotId) {
                        lastSnapshotId = s.getSnapshotId();
                        snapshots++;
                        if (firstCommitS < 0) {
                            firstCommitS = (System.nanoTime() - jobStart) / 1e9;
                        }
                    }
                    if (covers(s, preloadHw)) {
                        break;
                    }
                    if (System.nanoTime() > deadline) {
                        throw new IllegalStateException("the lake did not cover " + preloadHw + " in 30 min");
                    }
                    Thread.sleep(20);
                }
                double secs = (System.nanoTime() - jobStart) / 1e9;
                say("[%s] throughput: %,d rows in the lake %.2f s after the job started (first lake snapshot at %.2f s, %d snapshots seen): %,.0f rows/s",
                        label, rows, secs, firstCommitS, snapshots, rows / secs);
                System.out.printf(Locale.ROOT, "RESULT\t%s\tthroughput\trows=%d\tseconds=%.3f\trows_per_s=%.0f\tsubmit_s=%.3f\trows_per_s_after_submit=%.0f\tfirst_snapshot_s=%.3f\tsnapshots=%d%n",
                        label, rows, secs, rows / secs, submitS, rows / (secs - submitS), firstCommitS, snapshots);
            }

            // --- freshness -------------------------------------------------------------------
            if (phases.contains("freshness")) {
                TablePath fresh = TablePath.of(DB, "freshness");
                createTable(admin, fresh, freshness);
                Freshness.Result r = Freshness.run(connection, admin, fresh, rate, seconds, flushMs,
                        freshnessWaitS, label);
                say("[%s] freshness: %,d rows in %d flushes, achieved %,.0f rows/s; p50 %.3f s, p99 %.3f s, max %.3f s (%d of %d flushes covered)",
                        label, r.rows, r.flushes, r.achievedRate, r.p50, r.p99, r.max, r.covered, r.flushes);
                System.out.printf(Locale.ROOT, "RESULT\t%s\tfreshness\toffered=%.0f\tachieved=%.0f\tp50_s=%.3f\tp99_s=%.3f\tmax_s=%.3f\tflushes=%d\tcovered=%d%n",
                        label, rate, r.achievedRate, r.p50, r.p99, r.max, r.flushes, r.covered);
            }
        }
    }

    static Schema schema12() {
        return Schema.newBuilder()
                .column("id", DataTypes.BIGINT())
                .column("user_id", DataTypes.INT())
                .column("region", DataTypes.SMALLINT())
                .column("amount", DataTypes.DOUBLE())
                .column("discount", DataTypes.FLOAT())
                .column("paid", DataTypes.BOOLEAN())
                .column("sku", DataTypes.STRING())
                .column("city", DataTypes.STRING())
                .column("note", DataTypes.STRING())
                .column("created_ms", DataTypes.BIGINT())
                .column("qty", DataTypes.INT())
                .column("tax", DataTypes.DOUBLE())
                .build();
    }

    /** Row {@code i} of the bench table, the same values as silt's bench `make_batch`. */
    static GenericRow row(long i) {
        GenericRow r = new GenericRow(12);
        r.setField(0, i);
        r.setField(1, (int) (i % 10_007));
        r.setField(2, (short) (i % 17));
        r.setField(3, (i % 9973) * 0.25);
        r.setField(4, (i % 7) * 0.05f);
        r.setField(5, i % 3 == 0);
        r.setField(6, SKUS[(int) (i % 50_000)]);
        r.setField(7, CITIES[(int) (i % 5)]);
        r.setField(8, BinaryString.fromString("order note " + i + " with some text"));
        r.setField(9, i * 1000);
        r.setField(10, (int) (i % 10_007));
        r.setField(11, (i % 9973) * 0.25);
        return r;
    }

    /** Creates a lake-enabled log table of 4 buckets; the wall-clock millis it was created. */
    static long createTable(Admin admin, TablePath path, String freshness) throws Exception {
        TableDescriptor.Builder b = TableDescriptor.builder()
                .schema(schema12())
                .distributedBy(BUCKETS)
                .property("table.datalake.enabled", "true");
        if (!freshness.isEmpty()) {
            b.property("table.datalake.freshness", freshness);
        }
        admin.createTable(path, b.build(), false).get();
        return System.currentTimeMillis();
    }

    static long freshnessMs(Admin admin, TablePath path) throws Exception {
        return admin.getTableInfo(path).get().getTableConfig().getDataLakeFreshness().toMillis();
    }

    static void append(Connection connection, TablePath path, long from, long n) throws Exception {
        try (Table table = connection.getTable(path)) {
            AppendWriter w = table.newAppend().createWriter();
            for (long i = from; i < from + n; i++) {
                w.append(row(i));
            }
            w.flush();
        }
    }

    static Map<Integer, Long> latest(Admin admin, TablePath path) throws Exception {
        List<Integer> buckets = new ArrayList<>();
        for (int b = 0; b < BUCKETS; b++) {
            buckets.add(b);
        }
        return new HashMap<>(admin.listOffsets(path, buckets, new OffsetSpec.LatestSpec()).all().get());
    }

    /** The table's latest lake snapshot, or null while there is none. */
    static LakeSnapshot lakeSnapshot(Admin admin, TablePath path) throws Exception {
        try {
            return admin.getLatestLakeSnapshot(path).get();
        } catch (ExecutionException e) {
            // LakeTableSnapshotNotExistException until the first commit.
            if (e.getCause() != null
                    && e.getCause().getClass().getSimpleName().contains("SnapshotNotExist")) {
                return null;
            }
            throw e;
        }
    }

    /** Whether the lake snapshot's offset of every bucket reaches the given end offsets. */
    static boolean covers(LakeSnapshot s, Map<Integer, Long> hw) {
        if (s == null) {
            return false;
        }
        Map<Integer, Long> lake = new HashMap<>();
        for (Map.Entry<TableBucket, Long> e : s.getTableBucketsOffset().entrySet()) {
            lake.put(e.getKey().getBucket(), e.getValue());
        }
        for (Map.Entry<Integer, Long> e : hw.entrySet()) {
            if (e.getValue() == 0) {
                continue; // an empty bucket is covered by any lake
            }
            Long l = lake.get(e.getKey());
            if (l == null || l < e.getValue()) {
                return false;
            }
        }
        return true;
    }

    static void say(String fmt, Object... args) {
        System.err.println(String.format(Locale.ROOT, fmt, args));
    }

    private static Map<String, String> parseArgs(String[] argv) {
        Map<String, String> m = new LinkedHashMap<>();
        for (int i = 0; i < argv.length; i++) {
            if (!argv[i].startsWith("--") || i + 1 >= argv.length) {
                throw new IllegalArgumentException("expected --name value pairs, got " + Arrays.toString(argv));
            }
            m.put(argv[i].substring(2), argv[++i]);
        }
        return m;
    }

    private static String required(Map<String, String> a, String key) {
        String v = a.get(key);
        if (v == null) {
            throw new IllegalArgumentException("--" + key + " is required");
        }
        return v;
    }
}
