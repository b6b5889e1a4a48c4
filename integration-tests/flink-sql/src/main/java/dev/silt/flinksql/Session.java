package dev.silt.flinksql;

import java.io.PrintStream;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Optional;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import org.apache.flink.api.common.RuntimeExecutionMode;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.ExecutionOptions;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.table.api.EnvironmentSettings;
import org.apache.flink.table.api.ResultKind;
import org.apache.flink.table.api.TableEnvironment;
import org.apache.flink.table.api.TableResult;
import org.apache.flink.types.Row;
import org.apache.flink.util.CloseableIterator;

/**
 * One script's SQL session: a table environment per runtime mode (Flink fixes the mode when it
 * creates one), so {@code SET 'execution.runtime-mode' = 'batch'} switches to the batch one,
 * created on first use with the session's catalogs, {@code USE}s and settings replayed into
 * it. Every statement is bounded by its deadline: a job still running then is cancelled and
 * the statement fails.
 */
final class Session {
    /** {@code SET 'key' = 'value'}, which the harness applies itself (see the class comment). */
    private static final Pattern SET =
            Pattern.compile("(?is)SET\\s+'([^']+)'\\s*=\\s*'([^']*)'");

    private final String script;
    private final Configuration base;
    private final long defaultTimeoutS;
    private final ScheduledExecutorService timers;
    private final PrintStream out;

    private final TableEnvironment[] envs = new TableEnvironment[2];
    /** How many of {@link #sessionStatements} each environment has executed. */
    private final int[] replayed = new int[2];
    /** Statements whose effect belongs to an environment: catalogs, USE, temporary objects. */
    private final List<String> sessionStatements = new ArrayList<>();
    private final List<String[]> settings = new ArrayList<>();
    private RuntimeExecutionMode mode = RuntimeExecutionMode.STREAMING;

    Session(
            String script,
            Configuration base,
            long defaultTimeoutS,
            ScheduledExecutorService timers,
            PrintStream out) {
        this.script = script;
        this.base = base;
        this.defaultTimeoutS = defaultTimeoutS;
        this.timers = timers;
        this.out = out;
    }

    /** Runs {@code statement}; prints its rows and an ok line, or throws with the reason. */
    void execute(Script.Statement statement, String label) throws Exception {
        long started = System.nanoTime();
        String sql = statement.sql;
        String upper = sql.toUpperCase(Locale.ROOT);
        long timeoutS = statement.timeoutS > 0 ? statement.timeoutS : defaultTimeoutS;
        Matcher set = SET.matcher(sql);
        long rows = 0;
        if (set.matches()) {
            set(set.group(1), set.group(2));
        } else if (isSessionStatement(upper)) {
            sessionStatements.add(sql);
            env();
        } else {
            TableResult result = env().executeSql(sql);
            if (isModification(upper)) {
                awaitJob(result, timeoutS);
            } else if (result.getResultKind() == ResultKind.SUCCESS_WITH_CONTENT) {
                rows = collect(result, statement, label, timeoutS);
            }
        }
        long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - started);
        out.println(
                head(label, statement)
                        + ",\"status\":\"ok\",\"rows\":"
                        + rows
                        + ",\"ms\":"
                        + ms
                        + ",\"mode\":"
                        + Json.string(mode.name().toLowerCase(Locale.ROOT))
                        + ",\"sql\":"
                        + Json.string(sql)
                        + "}");
        out.flush();
    }

    String head(String label, Script.Statement statement) {
        return "{\"script\":"
                + Json.string(script)
                + ",\"statement\":"
                + Json.string(label)
                + ",\"line\":"
                + statement.line;
    }

    private static boolean isSessionStatement(String upper) {
        return upper.startsWith("CREATE CATALOG")
                || upper.startsWith("DROP CATALOG")
                || upper.startsWith("USE ")
                || upper.startsWith("CREATE TEMPORARY")
                || upper.startsWith("DROP TEMPORARY")
                || upper.startsWith("LOAD MODULE")
                || upper.startsWith("UNLOAD MODULE");
    }

    private static boolean isModification(String upper) {
        return upper.startsWith("INSERT")
                || upper.startsWith("UPDATE")
                || upper.startsWith("DELETE")
                || upper.startsWith("EXECUTE");
    }

    private void set(String key, String value) {
        if (key.equals(ExecutionOptions.RUNTIME_MODE.key())) {
            mode = RuntimeExecutionMode.valueOf(value.trim().toUpperCase(Locale.ROOT));
            env();
            return;
        }
        settings.add(new String[] {key, value});
        for (TableEnvironment env : envs) {
            if (env != null) {
                env.getConfig().set(key, value);
            }
        }
    }

    /** The environment of the current mode, created or brought up to date with the session. */
    private TableEnvironment env() {
        int i = mode == RuntimeExecutionMode.BATCH ? 1 : 0;
        if (envs[i] == null) {
            EnvironmentSettings.Builder builder =
                    EnvironmentSettings.newInstance().withConfiguration(base);
            builder = i == 1 ? builder.inBatchMode() : builder.inStreamingMode();
            envs[i] = TableEnvironment.create(builder.build());
            for (String[] setting : settings) {
                envs[i].getConfig().set(setting[0], setting[1]);
            }
        }
        while (replayed[i] < sessionStatements.size()) {
            envs[i].executeSql(sessionStatements.get(replayed[i]));
            replayed[i]++;
        }
        return envs[i];
    }

    private void awaitJob(TableResult result, long timeoutS) throws Exception {
        try {
            result.await(timeoutS, TimeUnit.SECONDS);
        } catch (TimeoutException e) {
            cancel(result.getJobClient());
            throw new TimeoutException("the job did not finish within " + timeoutS + " s");
        } catch (ExecutionException e) {
            throw e.getCause() instanceof Exception ? (Exception) e.getCause() : e;
        }
    }

    /**
     * Prints the result's rows as they arrive; returns how many. A statement with
     * {@code @rows N} ends, cancelled, once N rows came and the settle time passed; any other
     * must end by itself within its deadline.
     */
    private long collect(
            TableResult result, Script.Statement statement, String label, long timeoutS)
            throws Exception {
        Optional<JobClient> job = result.getJobClient();
        AtomicBoolean timedOut = new AtomicBoolean();
        AtomicBoolean settled = new AtomicBoolean();
        ScheduledFuture<?> deadline =
                timers.schedule(
                        () -> {
                            timedOut.set(true);
                            cancel(job);
                        },
                        timeoutS,
                        TimeUnit.SECONDS);
        ScheduledFuture<?> settle = statement.rows == 0 ? settle(job, settled, statement) : null;
        long rows = 0;
        try (CloseableIterator<Row> it = result.collect()) {
            while (it.hasNext()) {
                Row row = it.next();
                rows++;
                out.println(
                        head(label, statement)
                                + ",\"kind\":"
                                + Json.string(row.getKind().shortString())
                                + ",\"row\":"
                                + Json.row(row)
                                + "}");
                if (rows == statement.rows) {
                    out.flush();
                    settle = settle(job, settled, statement);
                }
            }
        } catch (Exception e) {
            // A job cancelled by the harness ends the iteration with an error; that is the
            // expected end of a statement with @rows once it settled.
            if (!settled.get() || timedOut.get()) {
                throw ended(e, timedOut.get(), rows, statement, timeoutS);
            }
        } finally {
            deadline.cancel(false);
            if (settle != null) {
                settle.cancel(false);
            }
        }
        if (timedOut.get()) {
            throw ended(null, true, rows, statement, timeoutS);
        }
        if (statement.rows >= 0 && rows < statement.rows) {
            throw new IllegalStateException(
                    "the query ended after " + rows + " of the " + statement.rows + " rows expected");
        }
        return rows;
    }

    private ScheduledFuture<?> settle(
            Optional<JobClient> job, AtomicBoolean settled, Script.Statement statement) {
        return timers.schedule(
                () -> {
                    settled.set(true);
                    cancel(job);
                },
                statement.settleMs,
                TimeUnit.MILLISECONDS);
    }

    private static Exception ended(
            Exception cause, boolean timedOut, long rows, Script.Statement statement, long timeoutS) {
        if (!timedOut) {
            return cause;
        }
        String expected =
                statement.rows >= 0
                        ? rows + " of the " + statement.rows + " rows expected (-- @rows)"
                        : rows
                                + " rows and no end (a streaming read needs -- @rows N to"
                                + " be bounded)";
        return new TimeoutException(
                "the query did not finish within " + timeoutS + " s: it gave " + expected);
    }

    private static void cancel(Optional<JobClient> job) {
        job.ifPresent(
                client -> {
                    try {
                        client.cancel().get(30, TimeUnit.SECONDS);
                    } catch (Exception e) {
                        // Finished already, or the collect iterator's close cancels it.
                    }
                });
    }
}
