// @platformatic/kafka against the broker, for tests/integration/test_1008_newest_clients.py.
//
//   node platformatic_client.mjs admin-produce BOOTSTRAP TOPIC COUNT PARTITIONS
//   node platformatic_client.mjs group-consume BOOTSTRAP TOPIC GROUP COUNT
//
// admin-produce creates the topic, lists topics, then sends COUNT records (key k-<i>,
// record i to partition i % PARTITIONS) with the idempotent producer, acks=all and gzip.
// group-consume reads with a classic group from the committed offsets (earliest when
// there are none), commits each record it reads and stops after COUNT records; the
// consumer then leaves, so a second run in the same group resumes where this one stopped.
// This client fetches with Fetch v13+ (topics named by id) whenever the broker offers it.
// Each record read is printed as "REC <i> <partition> <offset>"; one JSON line per step.

import { tracingChannel } from 'node:diagnostics_channel'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'

// An ES module is not found through NODE_PATH: the test names the node_modules it installed.
const { Admin, Consumer, Producer } = await import(pathToFileURL(join(process.env.SKIFF_NODE_MODULES, '@platformatic', 'kafka', 'dist', 'index.js')).href)

// The versions of every request sent, from the client's own diagnostics channel:
// printed last, as {"op": "apis", "versions": {apiKey: [versions]}}.
const sent = {}
tracingChannel('plt:kafka:connections:api').subscribe({
  start (d) { (sent[d.apiKey] ||= new Set()).add(d.apiVersion) },
  end () {},
  asyncStart () {},
  asyncEnd () {},
  error () {}
})
const apis = () => out({ op: 'apis', versions: Object.fromEntries(Object.entries(sent).map(([k, v]) => [k, [...v].sort((a, b) => a - b)])) })

const [cmd, bootstrap, topic, ...rest] = process.argv.slice(2)
const brokers = [bootstrap]
const timeoutMs = Number(process.env.SKIFF_TEST_TIMEOUT_MS || 60000)
const out = o => process.stdout.write(JSON.stringify(o) + '\n')
const value = i => Buffer.concat([Buffer.from(`v-${i}-`), Buffer.from(Array.from({ length: 60 }, (_, j) => (i * 7 + j) % 251))])

async function adminProduce (count, parts) {
  const admin = new Admin({ clientId: 'skiff-test-platformatic', bootstrapBrokers: brokers })
  try {
    const created = await admin.createTopics({ topics: [topic], partitions: parts, replicas: 1 })
    const listed = await admin.listTopics()
    out({ op: 'admin', created: created.map(t => ({ name: t.name, partitions: t.partitions, id: t.id })), listed: listed.includes(topic) })
  } finally {
    await admin.close()
  }
  const producer = new Producer({ clientId: 'skiff-test-platformatic', bootstrapBrokers: brokers, idempotent: true, acks: -1, compression: 'gzip' })
  try {
    const batch = 100
    for (let base = 0; base < count; base += batch) {
      const messages = []
      for (let i = base; i < Math.min(count, base + batch); i++) {
        messages.push({ topic, partition: i % parts, key: Buffer.from(`k-${i}`), value: value(i), headers: new Map([[Buffer.from('idx'), Buffer.from(String(i))]]) })
      }
      const res = await producer.send({ messages })
      for (const o of res.offsets || []) process.stdout.write(`SENT ${base} ${o.partition} ${o.offset}\n`)
    }
    out({ op: 'produce', count })
  } finally {
    await producer.close()
  }
}

async function groupConsume (group, count) {
  const consumer = new Consumer({ clientId: 'skiff-test-platformatic', groupId: group, bootstrapBrokers: brokers, groupProtocol: 'classic', sessionTimeout: 10000, heartbeatInterval: 500, maxWaitTime: 200 })
  let n = 0
  let bad = 0
  try {
    const stream = await consumer.consume({ topics: [topic], mode: 'committed', fallbackMode: 'earliest', autocommit: false })
    const timer = setTimeout(() => stream.destroy(new Error(`read ${n} of ${count} records in ${timeoutMs} ms`)), timeoutMs)
    try {
      for await (const m of stream) {
        const i = Number(m.key.toString().slice(2))
        const idx = m.headerEntries.find(([k]) => k.toString() === 'idx')
        if (!m.value.equals(value(i)) || !idx || idx[1].toString() !== String(i)) bad++
        process.stdout.write(`REC ${i} ${m.partition} ${m.offset}\n`)
        await m.commit()
        if (++n >= count) break
      }
    } finally {
      clearTimeout(timer)
    }
    out({ op: 'consume', read: n, badValues: bad })
  } finally {
    await consumer.close(true)
  }
}

try {
  if (cmd === 'admin-produce') await adminProduce(Number(rest[0]), Number(rest[1]))
  else if (cmd === 'group-consume') await groupConsume(rest[0], Number(rest[1]))
  else throw new Error(`unknown command ${cmd}`)
  apis()
  process.exit(0)
} catch (e) {
  out({ op: cmd, error: String(e && e.stack ? e.stack : e), cause: e && e.errors ? String(e.errors) : undefined })
  process.exit(1)
}
