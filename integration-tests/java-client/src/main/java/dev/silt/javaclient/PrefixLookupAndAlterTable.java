package dev.silt.javaclient;

import static dev.silt.javaclient.Checks.await;
import static dev.silt.javaclient.Checks.awaitFailure;
import static dev.silt.javaclient.Checks.check;
import static dev.silt.javaclient.Checks.checkEquals;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

import org.apache.fluss.client.lookup.Lookuper;
import org.apache.fluss.client.table.Table;
import org.apache.fluss.client.table.writer.UpsertWriter;
import org.apache.fluss.exception.InvalidAlterTableException;
import org.apache.fluss.metadata.Schema;
import org.apache.fluss.metadata.TableChange;
import org.apache.fluss.metadata.TableDescriptor;
import org.apache.fluss.metadata.TableInfo;
import org.apache.fluss.metadata.TablePath;
import org.apache.fluss.row.BinaryString;
import org.apache.fluss.row.GenericRow;
import org.apache.fluss.row.InternalRow;
import org.apache.fluss.types.DataTypes;

/**
 * {@code Lookup.lookupBy(bucket key)}, the call behind Flink lookup joins on a bucket-key prefix:
 * every current row of a customer, none of a customer whose name merely starts the same way;
 * and {@code Admin.alterTable} setting and resetting properties, refusing one Fluss does not let
 * change.
 */
final class PrefixLookupAndAlterTable implements ConnectedScenario {
    @Override
    public String run(Client client) throws Exception {
        TablePath path = client.createFreshTable("silt_java", "orders", orders());
        prefixLookups(client, path);
        alterTable(client, path);
        addColumn(client, path);
        return "prefix lookups of 4 customers (one updated, one deleted order); "
                + "alter table set, reset, and a refused option; add column: rows of "
                + "schema 1 read with a null note, rows of schema 2 with theirs";
    }

    private static void prefixLookups(Client client, TablePath path) throws Exception {
        try (Table table = client.connection.getTable(path)) {
            UpsertWriter writer = table.newUpsert().createWriter();
            String[][] customers = {{"a", "3"}, {"ab", "2"}, {"b", "1"}};
            for (String[] customer : customers) {
                for (int order = 1; order <= Integer.parseInt(customer[1]); order++) {
                    writer.upsert(order(customer[0], order, order * 10L));
                }
            }
            writer.upsert(order("a", 2, 99));
            writer.delete(order("ab", 1, 0));
            writer.flush();
            Lookuper lookuper = table.newLookup().lookupBy("customer").createLookuper();
            checkEquals(List.of("1:10", "2:99", "3:30"), lookup(lookuper, "a"), "orders of a");
            checkEquals(List.of("2:20"), lookup(lookuper, "ab"), "orders of ab");
            checkEquals(List.of("1:10"), lookup(lookuper, "b"), "orders of b");
            checkEquals(List.of(), lookup(lookuper, "nobody"), "orders of nobody");
        }
    }

    private static void alterTable(Client client, TablePath path) throws Exception {
        await(
                client.admin.alterTable(
                        path,
                        List.of(
                                TableChange.set("table.datalake.freshness", "2min"),
                                TableChange.set("owner", "java")),
                        false),
                "alter table " + path);
        await(
                client.admin.alterTable(path, List.of(TableChange.reset("owner")), false),
                "reset owner of " + path);
        TableInfo info = await(client.admin.getTableInfo(path), "table info of " + path);
        checkEquals(
                "2min",
                info.getProperties().toMap().get("table.datalake.freshness"),
                "freshness of " + path);
        check(
                !info.getCustomProperties().toMap().containsKey("owner"),
                "owner of " + path + " after its reset: " + info.getCustomProperties().toMap());
        awaitFailure(
                client.admin.alterTable(
                        path, List.of(TableChange.set("table.log.ttl", "1d")), false),
                InvalidAlterTableException.class,
                "altering table.log.ttl of " + path);
    }

    /**
     * ADD COLUMN as Fluss evolves a schema: schema 2 has a nullable {@code note} at the end; rows
     * written under schema 1 read back with a null note, a row written under schema 2 with its
     * own; a NOT NULL column is refused.
     */
    private static void addColumn(Client client, TablePath path) throws Exception {
        await(
                client.admin.alterTable(
                        path,
                        List.of(
                                TableChange.addColumn(
                                        "note",
                                        DataTypes.STRING(),
                                        "added later",
                                        TableChange.ColumnPosition.last())),
                        false),
                "add column note to " + path);
        TableInfo info = await(client.admin.getTableInfo(path), "table info of " + path);
        checkEquals(2, info.getSchemaId(), "schema id of " + path + " after add column");
        checkEquals(
                List.of("customer", "order_id", "amount", "note"),
                info.getSchema().getColumnNames(),
                "columns of " + path);
        awaitFailure(
                client.admin.alterTable(
                        path,
                        List.of(
                                TableChange.addColumn(
                                        "strict",
                                        DataTypes.INT().copy(false),
                                        null,
                                        TableChange.ColumnPosition.last())),
                        false),
                InvalidAlterTableException.class,
                "adding a NOT NULL column to " + path);
        try (Table table = client.connection.getTable(path)) {
            UpsertWriter writer = table.newUpsert().createWriter();
            writer.upsert(
                    GenericRow.of(
                            BinaryString.fromString("b"),
                            2,
                            20L,
                            BinaryString.fromString("new")));
            writer.flush();
            Lookuper lookuper = table.newLookup().lookupBy("customer").createLookuper();
            List<String> found = new ArrayList<>();
            for (InternalRow row :
                    await(
                                    lookuper.lookup(GenericRow.of(BinaryString.fromString("b"))),
                                    "prefix lookup of b after add column")
                            .getRowList()) {
                found.add(
                        row.getInt(1)
                                + ":"
                                + (row.isNullAt(3) ? "null" : row.getString(3).toString()));
            }
            Collections.sort(found);
            checkEquals(List.of("1:null", "2:new"), found, "orders of b after add column");
        }
    }

    private static List<String> lookup(Lookuper lookuper, String customer) throws Exception {
        List<String> found = new ArrayList<>();
        for (InternalRow row :
                await(
                                lookuper.lookup(GenericRow.of(BinaryString.fromString(customer))),
                                "prefix lookup of " + customer)
                        .getRowList()) {
            found.add(row.getInt(1) + ":" + row.getLong(2));
        }
        Collections.sort(found);
        return found;
    }

    private static TableDescriptor orders() {
        Schema schema =
                Schema.newBuilder()
                        .column("customer", DataTypes.STRING())
                        .column("order_id", DataTypes.INT())
                        .column("amount", DataTypes.BIGINT())
                        .primaryKey("customer", "order_id")
                        .build();
        return TableDescriptor.builder().schema(schema).distributedBy(2, "customer").build();
    }

    private static GenericRow order(String customer, int orderId, long amount) {
        return GenericRow.of(BinaryString.fromString(customer), orderId, amount);
    }
}
