package dev.silt.javaclient;

/**
 * One scenario of the harness: it runs against a Fluss endpoint (silt's hotstore or a real
 * cluster) and either returns a one-line summary of what it saw or throws. A failed check throws
 * {@link Checks.Failed}; anything else thrown (a client exception, a deadline) fails it too.
 *
 * <p>To add a scenario, implement this interface (or {@link ConnectedScenario}, when one
 * connection serves the whole scenario) in a class of its own and list it by name in {@link
 * Main#SCENARIOS}. Scenarios create their own tables under fresh names, so they can run in any
 * order, repeatedly, against a long-lived server.
 */
interface Scenario {
    /** Runs the scenario against {@code bootstrap} (host:port) and summarises it in one line. */
    String run(String bootstrap) throws Exception;
}
