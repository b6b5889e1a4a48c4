package dev.silt.flinksql;

import java.util.ArrayList;
import java.util.List;

/**
 * A SQL script cut into statements: statements end with {@code ;} outside quotes and comments,
 * {@code --} comments run to the end of the line, and a comment line of the form
 * {@code -- @name value} is a directive for the statement that follows it:
 *
 * <ul>
 *   <li>{@code -- @rows N}: the query is unbounded (a streaming read); stop after N result rows,
 *       having read on for the settle time to see any row past N, and cancel the job.
 *   <li>{@code -- @settle-ms MS}: how long to read on after N rows (default 3000).
 *   <li>{@code -- @timeout-s S}: the statement's deadline (default FLINK_SQL_STATEMENT_TIMEOUT_S).
 *   <li>{@code -- @name NAME}: the name its output lines carry (default: its number, from 1).
 * </ul>
 */
final class Script {
    static final class Statement {
        final String sql;
        /** The line of the script the statement starts on (1-based). */
        final int line;

        /** {@code @rows}: -1 when the statement is read to its end. */
        final long rows;

        final long settleMs;
        /** {@code @timeout-s}: -1 for the run's default. */
        final long timeoutS;
        /** {@code @name}: null for none. */
        final String name;

        Statement(String sql, int line, long rows, long settleMs, long timeoutS, String name) {
            this.sql = sql;
            this.name = name;
            this.line = line;
            this.rows = rows;
            this.settleMs = settleMs;
            this.timeoutS = timeoutS;
        }
    }

    static final long SETTLE_MS_DEFAULT = 3000;

    private Script() {}

    static List<Statement> parse(String text) {
        List<Statement> statements = new ArrayList<>();
        StringBuilder sql = new StringBuilder();
        int line = 1;
        int startLine = -1;
        long rows = -1;
        long settleMs = SETTLE_MS_DEFAULT;
        long timeoutS = -1;
        String name = null;
        boolean quoted = false;
        int i = 0;
        while (i < text.length()) {
            char c = text.charAt(i);
            if (!quoted && c == '-' && i + 1 < text.length() && text.charAt(i + 1) == '-') {
                int end = text.indexOf('\n', i);
                if (end < 0) {
                    end = text.length();
                }
                String comment = text.substring(i + 2, end).trim();
                if (comment.startsWith("@")) {
                    String[] parts = comment.substring(1).trim().split("\\s+", 2);
                    if (parts.length != 2) {
                        throw new IllegalArgumentException(
                                "line " + line + ": a directive needs a value: -- " + comment);
                    }
                    switch (parts[0]) {
                        case "rows":
                            rows = parseLong(parts[1], line, comment);
                            break;
                        case "settle-ms":
                            settleMs = parseLong(parts[1], line, comment);
                            break;
                        case "timeout-s":
                            timeoutS = parseLong(parts[1], line, comment);
                            break;
                        case "name":
                            name = parts[1].trim();
                            break;
                        default:
                            throw new IllegalArgumentException(
                                    "line "
                                            + line
                                            + ": unknown directive @"
                                            + parts[0]
                                            + " (known: @rows, @settle-ms, @timeout-s, @name)");
                    }
                }
                i = end;
                continue;
            }
            if (c == '\'') {
                quoted = !quoted;
            }
            if (c == '\n') {
                line++;
            }
            if (!quoted && c == ';') {
                String statement = sql.toString().trim();
                if (!statement.isEmpty()) {
                    statements.add(
                            new Statement(statement, startLine, rows, settleMs, timeoutS, name));
                }
                sql.setLength(0);
                startLine = -1;
                rows = -1;
                settleMs = SETTLE_MS_DEFAULT;
                timeoutS = -1;
                name = null;
            } else {
                if (startLine < 0 && !Character.isWhitespace(c)) {
                    startLine = line;
                }
                sql.append(c);
            }
            i++;
        }
        if (quoted) {
            throw new IllegalArgumentException("the script ends inside a quoted string");
        }
        String rest = sql.toString().trim();
        if (!rest.isEmpty()) {
            statements.add(new Statement(rest, startLine, rows, settleMs, timeoutS, name));
        }
        return statements;
    }

    private static long parseLong(String value, int line, String comment) {
        try {
            return Long.parseLong(value.trim());
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException(
                    "line " + line + ": not a number in -- " + comment, e);
        }
    }
}
