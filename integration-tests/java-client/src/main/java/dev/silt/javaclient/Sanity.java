package dev.silt.javaclient;

import static dev.silt.javaclient.Checks.await;
import static dev.silt.javaclient.Checks.awaitFailure;
import static dev.silt.javaclient.Checks.check;
import static dev.silt.javaclient.Checks.checkEquals;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

import org.apache.fluss.client.lookup.Lookuper;
import org.apache.fluss.client.table.Table;
import org.apache.fluss.client.table.scanner.ScanRecord;
import org.apache.fluss.client.table.scanner.log.LogScanner;
import org.apache.fluss.client.table.writer.AppendWriter;
import org.apache.fluss.client.table.writer.UpsertWriter;
import org.apache.fluss.exception.DatabaseAlreadyExistException;
import org.apache.fluss.exception.DatabaseNotExistException;
import org.apache.fluss.exception.TableAlreadyExistException;
import org.apache.fluss.exception.TableNotExistException;
import org.apache.fluss.metadata.DatabaseDescriptor;
import org.apache.fluss.metadata.Schema;
import org.apache.fluss.metadata.TableDescriptor;
import org.apache.fluss.metadata.TablePath;
import org.apache.fluss.row.BinaryString;
import org.apache.fluss.row.GenericRow;
import org.apache.fluss.row.InternalRow;
import org.apache.fluss.types.DataTypes;

/**
 * The everyday calls of the Java client, each checked: create, list and drop a database and
 * tables (and the errors for a duplicate or a missing one); append to a log table and read it
 * back; upsert and delete on a primary-key table, look keys up, and read its changelog, which
 * must be {@code +I +I -U +U -D} at offsets 0 to 4.
 */
final class Sanity implements ConnectedScenario {
    static final Duration POLL_DEADLINE = Duration.ofSeconds(10);

    @Override
    public String run(Client client) throws Exception {
        String database = "silt_java_sanity_" + Client.randomSuffix();
        TablePath events = TablePath.of(database, "events");
        TablePath users = TablePath.of(database, "users");
        ddl(client, database, events, users);
        logRoundTrip(client, events);
        primaryKey(client, users);
        drop(client, database, events, users);
        return "database and table DDL with its errors, log append and scan, "
                + "upsert/delete/lookup, changelog +I +I -U +U -D";
    }

    private static TableDescriptor eventsTable() {
        return oneBucket(idAndName().build());
    }

    private static TableDescriptor usersTable() {
        return oneBucket(idAndName().primaryKey("id").build());
    }

    /** The columns of both tables: (id INT, name STRING). */
    private static Schema.Builder idAndName() {
        return Schema.newBuilder().column("id", DataTypes.INT()).column("name", DataTypes.STRING());
    }

    private static TableDescriptor oneBucket(Schema schema) {
        return TableDescriptor.builder().schema(schema).distributedBy(1).build();
    }

    private static void ddl(Client client, String database, TablePath events, TablePath users)
            throws Exception {
        var admin = client.admin;
        await(admin.createDatabase(database, DatabaseDescriptor.EMPTY, false), "create database");
        check(
                await(admin.databaseExists(database), "database exists"),
                "database " + database + " does not exist after create");
        check(
                await(admin.listDatabases(), "list databases").contains(database),
                "list databases lacks " + database);
        awaitFailure(
                admin.createDatabase(database, DatabaseDescriptor.EMPTY, false),
                DatabaseAlreadyExistException.class,
                "create database twice");

        client.createTable(events, eventsTable());
        client.createTable(users, usersTable());
        checkEquals(
                List.of("events", "users"),
                sorted(await(admin.listTables(database), "list tables")),
                "list tables");
        check(await(admin.tableExists(users), "table exists"), users + " does not exist after create");
        var info = await(admin.getTableInfo(users), "get table info");
        checkEquals(1, info.getNumBuckets(), "bucket count of " + users);
        checkEquals(List.of("id"), info.getPrimaryKeys(), "primary key of " + users);
        awaitFailure(
                admin.createTable(events, eventsTable(), false),
                TableAlreadyExistException.class,
                "create table twice");
        awaitFailure(
                admin.getTableInfo(TablePath.of(database, "no_such_table")),
                TableNotExistException.class,
                "table info of a missing table");
    }

    private static void logRoundTrip(Client client, TablePath events) throws Exception {
        try (Table table = client.connection.getTable(events);
                LogScanner scanner = table.newScan().createLogScanner()) {
            AppendWriter writer = table.newAppend().createWriter();
            for (int id = 1; id <= 3; id++) {
                writer.append(row(id, "event-" + id));
            }
            writer.flush();
            scanner.subscribeFromBeginning(0);
            List<String> seen = new ArrayList<>();
            for (ScanRecord record : Client.pollUntil(scanner, 3, POLL_DEADLINE)) {
                seen.add(describe(record));
            }
            checkEquals(
                    List.of("0:+A(1,event-1)", "1:+A(2,event-2)", "2:+A(3,event-3)"),
                    seen,
                    "log table read back");
            checkEquals(3L, client.latestOffset(events, 0), "latest offset of " + events);
        }
    }

    private static void primaryKey(Client client, TablePath users) throws Exception {
        try (Table table = client.connection.getTable(users);
                LogScanner scanner = table.newScan().createLogScanner()) {
            UpsertWriter writer = table.newUpsert().createWriter();
            // Each write awaited, so the changelog's order is the order written.
            await(writer.upsert(row(1, "alice")), "upsert 1");
            await(writer.upsert(row(2, "bob")), "upsert 2");
            await(writer.upsert(row(1, "alice2")), "upsert 1 again");
            await(writer.delete(row(2, "bob")), "delete 2");

            Lookuper lookuper = table.newLookup().createLookuper();
            InternalRow found = await(lookuper.lookup(GenericRow.of(1)), "lookup 1").getSingletonRow();
            InternalRow missing = await(lookuper.lookup(GenericRow.of(2)), "lookup 2").getSingletonRow();
            checkEquals("(1,alice2)", describe(found), "lookup of key 1");
            check(missing == null, "lookup of deleted key 2: expected nothing, got " + describe(missing));

            scanner.subscribeFromBeginning(0);
            List<String> changelog = new ArrayList<>();
            for (ScanRecord record : Client.pollUntil(scanner, 5, POLL_DEADLINE)) {
                changelog.add(describe(record));
            }
            checkEquals(
                    List.of(
                            "0:+I(1,alice)",
                            "1:+I(2,bob)",
                            "2:-U(1,alice)",
                            "3:+U(1,alice2)",
                            "4:-D(2,bob)"),
                    changelog,
                    "changelog of " + users);
        }
    }

    private static void drop(Client client, String database, TablePath events, TablePath users)
            throws Exception {
        var admin = client.admin;
        await(admin.dropTable(events, false), "drop table " + events);
        checkEquals(
                List.of("users"),
                sorted(await(admin.listTables(database), "list tables")),
                "tables after a drop");
        await(admin.dropTable(users, false), "drop table " + users);
        check(!await(admin.tableExists(users), "table exists"), users + " still exists after drop");
        awaitFailure(admin.dropTable(users, false), TableNotExistException.class, "drop a dropped table");
        await(admin.dropTable(users, true), "drop a dropped table, ignoring that it is missing");
        await(admin.dropDatabase(database, false, false), "drop database " + database);
        check(
                !await(admin.databaseExists(database), "database exists"),
                database + " still exists after drop");
        check(
                !await(admin.listDatabases(), "list databases").contains(database),
                "list databases still has " + database);
        awaitFailure(
                admin.dropDatabase(database, false, false),
                DatabaseNotExistException.class,
                "drop a dropped database");
    }

    private static GenericRow row(int id, String name) {
        return GenericRow.of(id, BinaryString.fromString(name));
    }

    /** offset:change(id,name) of a record of the sanity tables. */
    private static String describe(ScanRecord record) {
        return record.logOffset() + ":" + record.getChangeType().shortString() + describe(record.getRow());
    }

    /** (id,name) of a row of the sanity tables, "null" for none. */
    private static String describe(InternalRow row) {
        if (row == null) {
            return "null";
        }
        return "(" + row.getInt(0) + "," + row.getString(1) + ")";
    }

    private static List<String> sorted(List<String> names) {
        List<String> copy = new ArrayList<>(names);
        copy.sort(null);
        return copy;
    }
}
