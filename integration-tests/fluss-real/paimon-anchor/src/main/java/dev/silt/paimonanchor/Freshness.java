package dev.silt.paimonanchor;

import org.apache.fluss.client.Connection;
import org.apache.fluss.client.admin.Admin;
import org.apache.fluss.client.metadata.LakeSnapshot;
import org.apache.fluss.client.table.Table;
import org.apache.fluss.client.table.writer.AppendWriter;
import org.apache.fluss.metadata.TablePath;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;

/**
 * Freshness at an offered load: a writer appends {@code rate} rows/s in flushes every
 * {@code flushMs} ms for {@code seconds} s; after each acknowledged flush it lists the buckets'
 * high watermarks. A poller reads the latest lake snapshot every 20 ms; a flush's sample is the
 * time from its acknowledgement until the first snapshot whose offsets reach those watermarks.
 */
final class Freshness {
    static final class Result {
        long rows;
        int flushes;
        int covered;
        double achievedRate;
        double p50;
        double p99;
        double max;
    }

    private static final class Sample {
        final long ackedNanos;
        final Map<Integer, Long> hw;
        volatile long coveredNanos = -1;

        Sample(long ackedNanos, Map<Integer, Long> hw) {
            this.ackedNanos = ackedNanos;
            this.hw = hw;
        }
    }

    static Result run(Connection connection, Admin admin, TablePath path, double rate, int seconds,
            int flushMs, long waitS, String label) throws Exception {
        List<Sample> samples = java.util.Collections.synchronizedList(new ArrayList<>());
        AtomicBoolean writing = new AtomicBoolean(true);
        AtomicReference<Throwable> pollerError = new AtomicReference<>();
        Thread poller = new Thread(() -> {
            int next = 0;
            try {
                while (true) {
                    boolean done = !writing.get();
                    LakeSnapshot s = Main.lakeSnapshot(admin, path);
                    long now = System.nanoTime();
                    while (next < samples.size() && Main.covers(s, samples.get(next).hw)) {
                        samples.get(next).coveredNanos = now;
                        next++;
                    }
                    if (done && next == samples.size()) {
                        return;
                    }
                    Thread.sleep(20);
                }
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            } catch (Throwable t) {
                pollerError.set(t);
            }
        }, "lake-poller");
        poller.setDaemon(true);
        poller.start();

        long perFlush = Math.max(1, Math.round(rate * flushMs / 1000.0));
        int flushes = (int) Math.round(seconds * 1000.0 / flushMs);
        long written = 0;
        long start = System.nanoTime();
        long lastAck = start;
        try (Table table = connection.getTable(path)) {
            AppendWriter w = table.newAppend().createWriter();
            for (int k = 0; k < flushes; k++) {
                long due = start + (long) k * flushMs * 1_000_000L;
                long wait = due - System.nanoTime();
                if (wait > 0) {
                    Thread.sleep(wait / 1_000_000L, (int) (wait % 1_000_000L));
                }
                for (long i = 0; i < perFlush; i++) {
                    w.append(Main.row(written + i));
                }
                w.flush();
                lastAck = System.nanoTime();
                written += perFlush;
                samples.add(new Sample(lastAck, Main.latest(admin, path)));
            }
        }
        writing.set(false);
        Result r = new Result();
        r.rows = written;
        r.flushes = flushes;
        r.achievedRate = written / ((lastAck - start) / 1e9);
        Main.say("[%s] writes done: %,d rows at %,.0f rows/s; waiting for the lake (at most %d s)",
                label, written, r.achievedRate, waitS);
        poller.join(waitS * 1000L);
        if (pollerError.get() != null) {
            throw new IllegalStateException("the lake poller failed", pollerError.get());
        }
        poller.interrupt();
        List<Double> lat = new ArrayList<>();
        synchronized (samples) {
            for (Sample s : samples) {
                if (s.coveredNanos >= 0) {
                    lat.add((s.coveredNanos - s.ackedNanos) / 1e9);
                }
            }
        }
        r.covered = lat.size();
        double[] v = lat.stream().mapToDouble(Double::doubleValue).toArray();
        Arrays.sort(v);
        // Samples never covered within the wait count as the wait itself (a lower bound).
        if (r.covered < flushes) {
            double[] all = Arrays.copyOf(v, flushes);
            Arrays.fill(all, v.length, flushes, Double.POSITIVE_INFINITY);
            v = all;
        }
        r.p50 = percentile(v, 0.50);
        r.p99 = percentile(v, 0.99);
        r.max = v.length == 0 ? Double.NaN : v[v.length - 1];
        return r;
    }

    /** The q quantile of sorted values: the one at rank round((n - 1) * q), as silt's bench. */
    static double percentile(double[] sorted, double q) {
        if (sorted.length == 0) {
            return Double.NaN;
        }
        return sorted[(int) Math.round((sorted.length - 1) * q)];
    }
}
