package dev.silt.javaclient;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * The rows a scenario leaves for the test that tiers its tables: with {@link #OUTPUT_DIR_ENV}
 * set, one file {@code <dir>/<database>.<table>.rows} per table, the scenario's header lines and
 * then one line per row the table must hold.
 */
final class ExpectedRows {
    /** Where the test wants the files; unset, nothing is written. */
    static final String OUTPUT_DIR_ENV = "JAVA_CLIENT_OUTPUT_DIR";

    private ExpectedRows() {}

    /**
     * Writes each table's {@code header} and rows ({@code expected}: table name to lines); says
     * where it wrote, or that it did not, for the scenario's summary.
     */
    static String write(String database, List<String> header, Map<String, List<String>> expected)
            throws Exception {
        String dir = System.getenv(OUTPUT_DIR_ENV);
        if (dir == null || dir.isEmpty()) {
            return OUTPUT_DIR_ENV + " is not set, so the expected rows were not written";
        }
        for (Map.Entry<String, List<String>> table : expected.entrySet()) {
            List<String> lines = new ArrayList<>(header);
            lines.addAll(table.getValue());
            Files.write(Path.of(dir, database + "." + table.getKey() + ".rows"), lines);
        }
        return "expected rows in " + dir;
    }
}
