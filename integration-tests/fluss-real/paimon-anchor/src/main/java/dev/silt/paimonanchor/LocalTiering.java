package dev.silt.paimonanchor;

import org.apache.fluss.flink.tiering.FlussLakeTiering;

/**
 * Fluss's own tiering service entry point ({@code FlussLakeTiering}, what
 * {@code FlussLakeTieringEntrypoint} of fluss-flink-tiering runs under {@code flink run}),
 * unchanged except for the job parallelism: {@code flink run -Dparallelism.default=N} sets it on
 * a Flink cluster; here the environment is local (a MiniCluster in this JVM, since
 * {@code StreamExecutionEnvironment.getExecutionEnvironment} is local outside a Flink client),
 * so it is set on the environment before the job graph is built.
 */
final class LocalTiering extends FlussLakeTiering {
    private LocalTiering(String[] args, int parallelism) {
        super(args);
        execEnv.setParallelism(parallelism);
    }

    /** Builds the job (LakeTieringJobBuilder) and submits it without waiting for it to end. */
    static void start(String[] args, int parallelism) throws Exception {
        new LocalTiering(args, parallelism).run();
    }
}
