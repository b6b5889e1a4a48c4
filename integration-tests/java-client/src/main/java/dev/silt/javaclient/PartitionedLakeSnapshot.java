package dev.silt.javaclient;

import static dev.silt.javaclient.Checks.await;
import static dev.silt.javaclient.Checks.check;
import static dev.silt.javaclient.Checks.checkEquals;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import org.apache.fluss.client.admin.OffsetSpec;
import org.apache.fluss.client.metadata.LakeSnapshot;
import org.apache.fluss.metadata.PartitionInfo;
import org.apache.fluss.metadata.TableBucket;
import org.apache.fluss.metadata.TableInfo;
import org.apache.fluss.metadata.TablePath;

/**
 * The second half of {@link PartitionedLake}, run once the tables it made are tiered: what
 * Flink's lake-and-log union read asks before it reads, {@code Admin.getLatestLakeSnapshot}, must
 * name every (partition, bucket) holding rows, at its latest offset, and nothing else (no
 * bucket without a partition, no partition the table does not have). Checks every table of every
 * database named {@code silt_java_partitioned_*}, so it fails where there is none.
 */
final class PartitionedLakeSnapshot implements ConnectedScenario {
    static final String DATABASE_PREFIX = "silt_java_partitioned_";

    @Override
    public String run(Client client) throws Exception {
        List<String> checked = new ArrayList<>();
        for (String database : await(client.admin.listDatabases(), "list databases")) {
            if (!database.startsWith(DATABASE_PREFIX)) {
                continue;
            }
            for (String table : await(client.admin.listTables(database), "list tables of " + database)) {
                int buckets = checkTable(client, TablePath.of(database, table));
                checked.add(database + "." + table + " (" + buckets + " buckets with rows)");
            }
        }
        check(
                !checked.isEmpty(),
                "no table in a database named " + DATABASE_PREFIX + "*: run partitioned-lake first");
        return "the latest lake snapshot of " + String.join(", ", checked)
                + " covers each partition's buckets at their latest offsets";
    }

    /** Checks one table; returns how many of its (partition, bucket)s hold rows. */
    private static int checkTable(Client client, TablePath path) throws Exception {
        TableInfo info = await(client.admin.getTableInfo(path), "table info of " + path);
        List<Integer> buckets = new ArrayList<>();
        for (int bucket = 0; bucket < info.getNumBuckets(); bucket++) {
            buckets.add(bucket);
        }
        // "partition/bucket" to the offset, for a readable failure.
        Map<String, Long> latest = new TreeMap<>();
        List<PartitionInfo> partitions = await(client.admin.listPartitionInfos(path), "list partitions of " + path);
        for (PartitionInfo partition : partitions) {
            String name = partition.getPartitionName();
            Map<Integer, Long> offsets =
                    await(
                            client.admin.listOffsets(path, name, buckets, new OffsetSpec.LatestSpec()).all(),
                            "latest offsets of " + path + " partition " + name);
            offsets.forEach((bucket, offset) -> {
                if (offset > 0) {
                    latest.put(partition.getPartitionId() + "/" + bucket, offset);
                }
            });
        }
        LakeSnapshot snapshot =
                await(client.admin.getLatestLakeSnapshot(path), "latest lake snapshot of " + path);
        Map<String, Long> tiered = new TreeMap<>();
        for (Map.Entry<TableBucket, Long> entry : snapshot.getTableBucketsOffset().entrySet()) {
            TableBucket bucket = entry.getKey();
            checkEquals(
                    info.getTableId(), bucket.getTableId(), "table id of a bucket of the lake snapshot of " + path);
            tiered.put(bucket.getPartitionId() + "/" + bucket.getBucket(), entry.getValue());
        }
        checkEquals(latest, tiered, "the lake snapshot of " + path + " (partition id/bucket: offset)");
        return latest.size();
    }
}
