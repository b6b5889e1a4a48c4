package dev.silt.javaclient;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.FutureTask;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * The official Apache Fluss Java client as a test client of a Fluss endpoint.
 *
 * <pre>java -cp ... dev.silt.javaclient.Main &lt;host:port&gt; &lt;scenario&gt;... | all</pre>
 *
 * <p>Prints one line per scenario to stdout, {@code <name> ok: <summary>} or {@code <name>
 * FAILED: <what>}, and the stack trace of a failure to stderr. A scenario stuck past {@link
 * #SCENARIO_DEADLINE} fails with the stacks of all threads on stderr and ends the run. Exit code:
 * 0 when every scenario passed, 1 when one failed, 2 on a usage error.
 */
public final class Main {
    /** Every scenario by its name on the command line, in the order {@code all} runs them. */
    static final Map<String, Scenario> SCENARIOS =
            inOrder(
                    Map.entry("sanity", new Sanity()),
                    Map.entry("three-batches", new ThreeBatches()),
                    Map.entry("limit-scan", new LimitScan()),
                    Map.entry("kv-snapshots", new KvSnapshotsScenario()),
                    Map.entry("prefix-lookup-alter-table", new PrefixLookupAndAlterTable()),
                    Map.entry("indexed-log", new IndexedLog()),
                    Map.entry("fluss-1-keys", new FlussOneKeys()),
                    Map.entry("partitioned-lake", new PartitionedLake()),
                    Map.entry("data-types", new DataTypesScenario()));

    /**
     * Scenarios run by name only, not by {@code all}: they check what an earlier scenario left,
     * once a lake tiered it.
     */
    static final Map<String, Scenario> BY_NAME_ONLY =
            inOrder(Map.entry("partitioned-lake-snapshot", new PartitionedLakeSnapshot()));

    /**
     * Bound on one scenario. A scenario that fails every check still ends well within it:
     * three-batches at worst waits its 10 s poll deadline in each of its 20 rounds.
     */
    static final Duration SCENARIO_DEADLINE = Duration.ofSeconds(300);

    private Main() {}

    @SafeVarargs
    private static Map<String, Scenario> inOrder(Map.Entry<String, Scenario>... byName) {
        Map<String, Scenario> scenarios = new LinkedHashMap<>();
        for (Map.Entry<String, Scenario> entry : byName) {
            scenarios.put(entry.getKey(), entry.getValue());
        }
        return Collections.unmodifiableMap(scenarios);
    }

    public static void main(String[] args) {
        System.exit(run(args));
    }

    static int run(String[] args) {
        Map<String, Scenario> byName = new LinkedHashMap<>(SCENARIOS);
        byName.putAll(BY_NAME_ONLY);
        String known = "all, " + String.join(", ", byName.keySet());
        if (args.length < 2) {
            System.err.println("usage: Main <host:port> <scenario>... (scenarios: " + known + ")");
            return 2;
        }
        String bootstrap = args[0];
        List<String> chosen = new ArrayList<>();
        for (int i = 1; i < args.length; i++) {
            if (args[i].equals("all")) {
                chosen.addAll(SCENARIOS.keySet());
            } else if (byName.containsKey(args[i])) {
                chosen.add(args[i]);
            } else {
                System.err.println("unknown scenario " + args[i] + " (known: " + known + ")");
                return 2;
            }
        }
        System.err.println("fluss-client " + Client.clientVersion() + " against " + bootstrap);
        boolean allPassed = true;
        for (String name : chosen) {
            long started = System.nanoTime();
            Outcome outcome = runBounded(name, byName.get(name), bootstrap);
            allPassed &= outcome.passed;
            double seconds = (System.nanoTime() - started) / 1e9;
            System.out.printf(
                    "%s %s (fluss-client %s, %.1f s)%n",
                    name, outcome.line, Client.clientVersion(), seconds);
            System.out.flush();
            if (outcome.stuck) {
                // Stop here: the stuck thread keeps its client's threads and connections, and
                // whatever hung is likely to hang the next scenario too.
                return 1;
            }
        }
        return allPassed ? 0 : 1;
    }

    private record Outcome(boolean passed, boolean stuck, String line) {}

    /**
     * Runs a scenario on a thread of its own and waits at most {@link #SCENARIO_DEADLINE}: some
     * client calls (connect, flush, close) have no timeout of their own, and a hang must end in
     * a failure that says where it hung, not in a killed JVM.
     */
    private static Outcome runBounded(String name, Scenario scenario, String bootstrap) {
        FutureTask<String> task = new FutureTask<>(() -> scenario.run(bootstrap));
        Thread thread = new Thread(task, "scenario-" + name);
        thread.setDaemon(true);
        thread.start();
        try {
            String summary = task.get(SCENARIO_DEADLINE.toSeconds(), TimeUnit.SECONDS);
            return new Outcome(true, false, "ok: " + summary);
        } catch (TimeoutException e) {
            printThreadDump();
            return new Outcome(false, true, "FAILED: no result within " + SCENARIO_DEADLINE.toSeconds()
                    + " s; the stack of every thread is on stderr");
        } catch (ExecutionException e) {
            Throwable cause = e.getCause();
            cause.printStackTrace();
            return new Outcome(false, false, "FAILED: " + describe(cause));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return new Outcome(false, true, "FAILED: interrupted");
        }
    }

    private static void printThreadDump() {
        System.err.println("java-client: a scenario is stuck; stacks of all threads:");
        Thread.getAllStackTraces().forEach((thread, stack) -> {
            System.err.println("\"" + thread.getName() + "\" " + thread.getState());
            for (StackTraceElement frame : stack) {
                System.err.println("    at " + frame);
            }
        });
        System.err.flush();
    }

    /** A failed check's message, or an exception and its causes, on one line. */
    private static String describe(Throwable e) {
        StringBuilder text = new StringBuilder(e instanceof Checks.Failed ? e.getMessage() : e.toString());
        for (Throwable cause = e.getCause(); cause != null; cause = cause.getCause()) {
            if (!text.toString().contains(cause.toString())) {
                text.append(" <- ").append(cause);
            }
        }
        // One line per scenario: client messages may span lines.
        return text.toString().replaceAll("\\s*\\R\\s*", " ");
    }
}
