package dev.silt.flinksql;

import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;

import java.net.URI;

import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.CoreOptions;
import org.apache.flink.configuration.DeploymentOptions;
import org.apache.flink.configuration.RestOptions;
import org.apache.flink.runtime.minicluster.MiniCluster;
import org.apache.flink.runtime.minicluster.MiniClusterConfiguration;

/**
 * Runs SQL scripts through Flink (in this JVM: one local mini cluster that every job is submitted
 * to through its REST endpoint, which saves starting a cluster per job) with the official
 * Apache Fluss connector, against the Fluss endpoint given as the first argument: every
 * {@code ${bootstrap}} in a script is replaced by it.
 *
 * <pre>
 *   Main &lt;host:port&gt; &lt;script.sql&gt;...
 * </pre>
 *
 * <p>Stdout carries only JSON lines: one per result row,
 * {@code {"script":..,"statement":..,"line":..,"kind":"+I","row":[..]}}, and one per statement
 * when it ends, with {@code "status":"ok"} (and its row count, milliseconds, mode and SQL) or
 * {@code "status":"error"} and the error with its causes. A script stops at its first error;
 * the next script runs in a fresh session. Exit codes: 0 every statement succeeded, 1 one
 * failed, 2 usage. Stderr has Flink's and the client's warnings and the stack of each error.
 *
 * <p>Environment: FLINK_SQL_STATEMENT_TIMEOUT_S (default 120) bounds each statement;
 * FLINK_SQL_PARALLELISM (default 1) is {@code parallelism.default}; the cluster has
 * {@link #SLOTS} slots.
 */
public final class Main {
    /** Task slots of the mini cluster: a job at a time, and room for one being cancelled. */
    static final int SLOTS = 4;

    private Main() {}

    public static void main(String[] args) {
        if (args.length < 2) {
            System.err.println("usage: Main <host:port> <script.sql>...");
            System.exit(2);
        }
        // Flink and the client write to System.out here and there; keep stdout for results.
        PrintStream out = new PrintStream(System.out, false, StandardCharsets.UTF_8);
        System.setOut(System.err);
        int failed = 0;
        ScheduledExecutorService timers =
                Executors.newSingleThreadScheduledExecutor(
                        r -> {
                            Thread t = new Thread(r, "flink-sql-deadlines");
                            t.setDaemon(true);
                            return t;
                        });
        Configuration configuration;
        try {
            configuration = startCluster();
        } catch (Exception e) {
            System.err.println("flink-sql: cannot start the mini cluster:");
            e.printStackTrace();
            System.exit(1);
            return;
        }
        for (int i = 1; i < args.length; i++) {
            if (!runScript(args[0], Path.of(args[i]), configuration, timers, out)) {
                failed++;
            }
        }
        out.flush();
        // The connector's and Flink's threads are not all daemons; do not wait for them.
        System.exit(failed == 0 ? 0 : 1);
    }

    private static boolean runScript(
            String bootstrap,
            Path path,
            Configuration configuration,
            ScheduledExecutorService timers,
            PrintStream out) {
        String name = path.getFileName().toString();
        List<Script.Statement> statements;
        try {
            String text = Files.readString(path, StandardCharsets.UTF_8);
            statements = Script.parse(text.replace("${bootstrap}", bootstrap));
        } catch (Exception e) {
            out.println(
                    "{\"script\":"
                            + Json.string(name)
                            + ",\"status\":\"error\",\"error\":"
                            + Json.string(describe(e))
                            + "}");
            return false;
        }
        Session session = new Session(name, configuration, timeoutS(), timers, out);
        int number = 0;
        for (Script.Statement statement : statements) {
            number++;
            String label = statement.name != null ? statement.name : Integer.toString(number);
            try {
                session.execute(statement, label);
            } catch (Throwable e) {
                System.err.println("flink-sql: " + name + " statement " + label + " failed:");
                e.printStackTrace();
                out.println(
                        session.head(label, statement)
                                + ",\"status\":\"error\",\"error\":"
                                + Json.string(describe(e))
                                + ",\"sql\":"
                                + Json.string(statement.sql)
                                + "}");
                out.flush();
                return false;
            }
        }
        return true;
    }

    /**
     * Starts the mini cluster (it lives as long as the JVM) and returns the configuration of
     * table environments that submit to it.
     */
    private static Configuration startCluster() throws Exception {
        Configuration cluster = new Configuration();
        // An ephemeral port for the REST endpoint, so runs can overlap.
        cluster.set(RestOptions.BIND_PORT, "0");
        MiniCluster miniCluster =
                new MiniCluster(
                        new MiniClusterConfiguration.Builder()
                                .setConfiguration(cluster)
                                .setNumTaskManagers(1)
                                .setNumSlotsPerTaskManager(SLOTS)
                                .withRandomPorts()
                                .build());
        miniCluster.start();
        URI rest = miniCluster.getRestAddress().get();
        Configuration conf = new Configuration();
        conf.set(CoreOptions.DEFAULT_PARALLELISM, parallelism());
        conf.set(DeploymentOptions.TARGET, "remote");
        conf.set(RestOptions.ADDRESS, rest.getHost());
        conf.set(RestOptions.PORT, rest.getPort());
        return conf;
    }

    private static long timeoutS() {
        return envLong("FLINK_SQL_STATEMENT_TIMEOUT_S", 120);
    }

    private static int parallelism() {
        return (int) envLong("FLINK_SQL_PARALLELISM", 1);
    }

    private static long envLong(String name, long fallback) {
        String value = System.getenv(name);
        return value == null || value.isBlank() ? fallback : Long.parseLong(value.trim());
    }

    /** The error and every cause, one per line, innermost last. */
    static String describe(Throwable e) {
        StringBuilder text = new StringBuilder();
        for (Throwable t = e; t != null; t = t.getCause() == t ? null : t.getCause()) {
            text.append(text.length() == 0 ? "" : "\ncaused by: ")
                    .append(t.getClass().getName())
                    .append(": ")
                    .append(t.getMessage());
        }
        return text.toString();
    }
}
