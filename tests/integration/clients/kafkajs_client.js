// kafkajs 2.2.4 against the broker, for tests/integration/test_1005_kafkajs.py.
//
//   node kafkajs_client.js admin-produce BOOTSTRAP TOPIC COUNT PARTITIONS
//   node kafkajs_client.js delete        BOOTSTRAP TOPIC
//   node kafkajs_client.js group-consume BOOTSTRAP TOPIC COUNT GROUP
//
// kafkajs never uses flexible versions and picks min(its max, broker max)
// without checking the broker's minimum (COMPAT §0.5). Its consumer only
// works in a group, so reading back by assignment is done by the Python test.
//
// SKIFF_KAFKAJS_SECURITY, when set, is JSON for a secure connection:
//   {"ssl": {"ca": PATH, "cert": PATH, "key": PATH}, "sasl": {"mechanism": M,
//    "username": U, "password": P}} (cert/key and sasl optional), as kafkajs's
// own ssl (tls.connect options) and sasl settings.
//
// Output: "ACK i partition offset" / "REC i partition offset" lines and JSON
// lines with an "op" field; kafkajs's own log goes to stderr. The process
// exits by itself after SKIFF_TEST_TIMEOUT_MS (default 90 s).
'use strict';

const fs = require('fs');
const { Kafka, logLevel } = require('kafkajs');

const [mode, bootstrap, topic, arg3, arg4] = process.argv.slice(2);
const timeoutMs = Number(process.env.SKIFF_TEST_TIMEOUT_MS || 90000);

function out(obj) {
  process.stdout.write(JSON.stringify(obj) + '\n');
}

function value(i) {
  // The same bytes as value() in the Python tests.
  const head = Buffer.from(`v-${i}-`);
  const tail = Buffer.alloc(60);
  for (let j = 0; j < 60; j++) tail[j] = (i * 7 + j) % 251;
  return Buffer.concat([head, tail]);
}

const watchdog = setTimeout(() => {
  out({ op: mode, error: 'watchdog', message: `still running after ${timeoutMs} ms` });
  process.exit(3);
}, timeoutMs);

function security() {
  if (!process.env.SKIFF_KAFKAJS_SECURITY) return {};
  const sec = JSON.parse(process.env.SKIFF_KAFKAJS_SECURITY);
  const out = {};
  if (sec.ssl) {
    out.ssl = { ca: [fs.readFileSync(sec.ssl.ca, 'utf-8')] };
    if (sec.ssl.cert) out.ssl.cert = fs.readFileSync(sec.ssl.cert, 'utf-8');
    if (sec.ssl.key) out.ssl.key = fs.readFileSync(sec.ssl.key, 'utf-8');
  }
  if (sec.sasl) out.sasl = sec.sasl;
  return out;
}

const kafka = new Kafka({
  clientId: 'skiff-test-kafkajs',
  brokers: [bootstrap],
  ...security(),
  connectionTimeout: 10000,
  requestTimeout: 15000,
  retry: { retries: 5, initialRetryTime: 100 },
  logLevel: logLevel.WARN,
  logCreator: () => ({ namespace, level, log }) => {
    const { message, ...extra } = log;
    process.stderr.write(`[kafkajs ${level} ${namespace}] ${message} ${JSON.stringify(extra)}\n`);
  },
});

async function adminProduce(count, partitions) {
  const admin = kafka.admin();
  await admin.connect();
  const t0 = Date.now();
  const created = await admin.createTopics({
    topics: [{ topic, numPartitions: partitions, replicationFactor: 1 }],
    waitForLeaders: true,
    timeout: 15000,
  });
  const listed = await admin.listTopics();
  const md = await admin.fetchTopicMetadata({ topics: [topic] });
  out({
    op: 'admin', created, listed: listed.includes(topic), ms: Date.now() - t0,
    partitions: md.topics[0].partitions.map((p) => ({
      partition: p.partitionId, leader: p.leader, replicas: p.replicas, isr: p.isr, error: p.partitionErrorCode,
    })),
  });

  const producer = kafka.producer({ allowAutoTopicCreation: false });
  await producer.connect();
  const t1 = Date.now();
  const chunk = 500;
  let acked = 0;
  const lines = [];
  for (let start = 0; start < count; start += chunk) {
    const idx = [];
    for (let i = start; i < Math.min(count, start + chunk); i++) idx.push(i);
    const res = await producer.send({
      topic,
      acks: -1,
      timeout: 15000,
      messages: idx.map((i) => ({
        key: `k-${i}`, value: value(i), partition: i % partitions, headers: { idx: String(i) },
      })),
    });
    // One result per partition; records of a partition are contiguous from baseOffset, in order.
    const base = {};
    for (const r of res) {
      if (r.errorCode !== 0) throw new Error(`partition ${r.partition}: error ${r.errorCode}`);
      base[r.partition] = BigInt(r.baseOffset);
    }
    const next = {};
    for (const i of idx) {
      const p = i % partitions;
      const k = next[p] || 0n;
      next[p] = k + 1n;
      lines.push(`ACK ${i} ${p} ${base[p] + k}`);
      acked++;
    }
  }
  await producer.disconnect();
  const offsets = await admin.fetchTopicOffsets(topic);
  await admin.disconnect();
  process.stdout.write(lines.join('\n') + '\n');
  out({
    op: 'produce', acked, ms: Date.now() - t1,
    offsets: offsets.map((o) => ({ partition: o.partition, low: o.low, high: o.high })),
  });
}

async function deleteTopic() {
  const admin = kafka.admin();
  await admin.connect();
  const t0 = Date.now();
  await admin.deleteTopics({ topics: [topic], timeout: 15000 });
  let listed = true;
  while (listed && Date.now() - t0 < 30000) {
    listed = (await admin.listTopics()).includes(topic);
    if (listed) await new Promise((r) => setTimeout(r, 100));
  }
  await admin.disconnect();
  out({ op: 'delete', listed, ms: Date.now() - t0 });
}

async function groupConsume(count, groupId) {
  const consumer = kafka.consumer({
    groupId, sessionTimeout: 10000, heartbeatInterval: 1000, maxWaitTimeInMs: 100,
  });
  await consumer.connect();
  await consumer.subscribe({ topics: [topic], fromBeginning: true });
  const t0 = Date.now();
  const seen = new Set();
  const lines = [];
  let bad = 0;
  await new Promise((resolve, reject) => {
    consumer.run({
      eachMessage: async ({ partition, message }) => {
        const i = Number(message.key.toString().slice(2));
        const ok = message.value.equals(value(i)) && message.headers.idx.toString() === String(i);
        if (!ok || seen.has(i)) {
          bad++;
          lines.push(`BAD ${i} ${partition} ${message.offset}`);
        } else {
          lines.push(`REC ${i} ${partition} ${message.offset}`);
        }
        seen.add(i);
        if (seen.size >= count) resolve();
      },
    }).catch(reject);
  });
  await consumer.disconnect();
  process.stdout.write(lines.join('\n') + '\n');
  out({ op: 'group-consume', received: seen.size, bad, ms: Date.now() - t0 });
}

(async () => {
  if (mode === 'admin-produce') await adminProduce(Number(arg3), Number(arg4));
  else if (mode === 'delete') await deleteTopic();
  else if (mode === 'group-consume') await groupConsume(Number(arg3), arg4);
  else throw new Error(`unknown mode ${mode}`);
  clearTimeout(watchdog);
})().catch((e) => {
  out({ op: mode, error: e.name, message: e.message, type: e.type || null });
  process.exit(1);
});
