package dev.silt.javaclient;

import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/** Checks and bounded waits shared by the scenarios. */
final class Checks {
    /** Upper bound on every single client call a scenario waits for. */
    static final Duration CALL_DEADLINE = Duration.ofSeconds(30);

    /** A client call slower than this is reported on stderr (with its time), not failed. */
    static final Duration SLOW_CALL = Duration.ofSeconds(2);

    private Checks() {}

    /** A check of a scenario did not hold; the message says what was expected and what was seen. */
    static final class Failed extends Exception {
        private static final long serialVersionUID = 1L;

        Failed(String message) {
            super(message);
        }
    }

    static void check(boolean condition, String message) throws Failed {
        if (!condition) {
            throw new Failed(message);
        }
    }

    static void checkEquals(Object expected, Object actual, String what) throws Failed {
        if (!expected.equals(actual)) {
            throw new Failed(what + ": expected " + expected + ", got " + actual);
        }
    }

    /** Waits for a client future, at most {@link #CALL_DEADLINE}; unwraps its failure. */
    static <T> T await(CompletableFuture<T> future, String what) throws Exception {
        long started = System.nanoTime();
        try {
            T value = future.get(CALL_DEADLINE.toMillis(), TimeUnit.MILLISECONDS);
            reportIfSlow(what, started);
            return value;
        } catch (TimeoutException e) {
            throw new Failed(what + ": no answer within " + CALL_DEADLINE.toSeconds() + " s");
        } catch (ExecutionException e) {
            Throwable cause = e.getCause() == null ? e : e.getCause();
            throw new Exception(what + " failed: " + cause, cause);
        }
    }

    static void reportIfSlow(String what, long startedNanos) {
        long elapsedMs = (System.nanoTime() - startedNanos) / 1_000_000;
        if (elapsedMs > SLOW_CALL.toMillis()) {
            System.err.println("java-client: slow: " + what + " took " + elapsedMs + " ms");
        }
    }

    /**
     * Waits for a future that must fail with {@code expected} (or a cause of that class) and
     * returns the exception's simple class name, or fails the check.
     */
    static String awaitFailure(
            CompletableFuture<?> future, Class<? extends Throwable> expected, String what)
            throws Exception {
        try {
            Object value = future.get(CALL_DEADLINE.toMillis(), TimeUnit.MILLISECONDS);
            throw new Failed(
                    what + ": expected " + expected.getSimpleName() + ", it succeeded with " + value);
        } catch (TimeoutException e) {
            throw new Failed(what + ": no answer within " + CALL_DEADLINE.toSeconds() + " s");
        } catch (ExecutionException e) {
            for (Throwable cause = e.getCause(); cause != null; cause = cause.getCause()) {
                if (expected.isInstance(cause)) {
                    return cause.getClass().getSimpleName();
                }
            }
            throw new Failed(
                    what + ": expected " + expected.getSimpleName() + ", got " + e.getCause());
        }
    }
}
