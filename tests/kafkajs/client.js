// kafkajs against a kray cluster, for tests/integration/test_kafkajs.py. One JSON line on stdout per event;
// kafkajs' own log goes to stderr.
//   node client.js admin BROKERS OPS_JSON           each op of the list run in order: {"op", "result"} or {"op", "error"}
//   node client.js produce BROKERS TOPIC PARTITIONS COUNT START
//                                                    COUNT records per partition in one sendBatch (acks=all)
//   node client.js consume BROKERS GROUP TOPIC CLIENT_ID
//                                                    a group member: {"assigned": [...]} on each join, {"value"} per
//                                                    record; commits as it goes; SIGTERM leaves the group
const { Kafka, logLevel } = require("kafkajs");

const [command, brokers, ...args] = process.argv.slice(2);
const print = (obj) => process.stdout.write(JSON.stringify(obj) + "\n");
const kafka = (clientId) => new Kafka({
  clientId, brokers: brokers.split(","), retry: { retries: 30, initialRetryTime: 100, maxRetryTime: 1000 },
  logLevel: logLevel.WARN,
  logCreator: () => ({ namespace, level, label, log }) =>
    process.stderr.write(`${label} ${namespace} ${log.message} ${JSON.stringify(log)}\n`),
});

async function admin(ops) {
  const client = kafka("kray-kafkajs-admin").admin();
  await client.connect();
  for (const { op, args } of ops) {
    try {
      const result = await client[op](args);
      print({ op, result: result === undefined ? null : result });
    } catch (e) {
      print({ op, error: e.type || e.name, message: e.message });
    }
  }
  await client.disconnect();
}

async function produce(topic, partitions, count, start) {
  const producer = kafka("kray-kafkajs-producer").producer({ idempotent: true });
  await producer.connect();
  const messages = [];
  for (let p = 0; p < partitions; p++) {
    for (let i = start; i < start + count; i++) messages.push({ partition: p, value: `${p}-${i}` });
  }
  // every partition's records in one request, as the Java client batches them
  await producer.sendBatch({ acks: -1, topicMessages: [{ topic, messages }] });
  await producer.disconnect();
  print({ sent: messages.length });
}

async function consume(group, topic, clientId) {
  const consumer = kafka(clientId).consumer({
    groupId: group, sessionTimeout: 6000, heartbeatInterval: 300, rebalanceTimeout: 10000, maxWaitTimeInMs: 100,
  });
  consumer.on(consumer.events.GROUP_JOIN, ({ payload }) =>
    print({ assigned: payload.memberAssignment[topic] || [], generation: payload.generationId }));
  await consumer.connect();
  await consumer.subscribe({ topics: [topic], fromBeginning: true });
  await consumer.run({
    autoCommitInterval: 100,
    eachMessage: async ({ message }) => print({ value: message.value.toString() }),
  });
  const stop = async () => {
    await consumer.disconnect();  // commits, then leaves the group
    process.exit(0);
  };
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
}

const run = {
  admin: () => admin(JSON.parse(args[0])),
  produce: () => produce(args[0], Number(args[1]), Number(args[2]), Number(args[3])),
  consume: () => consume(args[0], args[1], args[2]),
}[command];
run().catch((e) => {
  process.stderr.write(`${e.stack}\n`);
  process.exit(1);
});
