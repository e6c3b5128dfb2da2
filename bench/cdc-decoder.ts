/**
 * The CDC decoder's cost per change: 200,000 synthetic XLogData frames, each an insert of one
 * events-table row (every column, as pgoutput sends them in text form) with a 300-byte JSON payload,
 * decoded as the replication stream does (frame header, then pgoutput). No database: the point is
 * whether decoding could be the relay's bottleneck (target ≥ 300k changes/s on one core).
 *
 *   npx tsx bench/cdc-decoder.ts [--changes 200000] [--rounds 5]
 *   node --cpu-prof --cpu-prof-dir=.tmp/prof --import tsx bench/cdc-decoder.ts
 */
import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { PgoutputDecoder } from '../src/cdc/pgoutput.js';

const { values: args } = parseArgs({
  options: { changes: { type: 'string', default: '200000' }, rounds: { type: 'string', default: '5' } },
});
const CHANGES = Number(args.changes);
const ROUNDS = Number(args.rounds);

const COLUMNS = [
  'id',
  'event_id',
  'partition',
  'aggregate_type',
  'aggregate_id',
  'sequence',
  'event_type',
  'schema_version',
  'topic',
  'payload',
  'payload_bytes',
  'headers',
  'created_at',
  'deliver_after',
  'next_attempt_at',
  'attempts',
  'last_error',
  'status',
  'dead_at',
];

function relationFrame(): Buffer {
  const parts: Buffer[] = [Buffer.from('R'), int32(16384), cstr('bench'), cstr('events'), Buffer.from('d')];
  const count = Buffer.alloc(2);
  count.writeUInt16BE(COLUMNS.length);
  parts.push(count);
  for (const name of COLUMNS) parts.push(Buffer.from([0]), cstr(name), int32(25), int32(-1));
  return Buffer.concat(parts);
}

function insertFrame(i: number): Buffer {
  const payload = JSON.stringify({ orderId: i, note: 'x'.repeat(300 - 30 - String(i).length) });
  const values: (string | null)[] = [
    String(1_000_000 + i),
    randomUUID(),
    String(i % 16),
    'order',
    `order-${i % 5000}`,
    String(Math.floor(i / 5000) + 1),
    'order.placed',
    '1',
    null,
    payload,
    null,
    '{}',
    '2026-12-01 23:15:24.123456+00',
    null,
    '2026-12-01 23:15:24.123456+00',
    '0',
    null,
    'pending',
    null,
  ];
  const parts: Buffer[] = [Buffer.alloc(25), Buffer.from('I'), int32(16384), Buffer.from('N')];
  parts[0]![0] = 0x77; // 'w'
  parts[0]!.writeBigUInt64BE(BigInt(0x16_0000_0000 + i * 512), 1);
  parts[0]!.writeBigUInt64BE(BigInt(0x16_0000_0000 + i * 512), 9);
  const count = Buffer.alloc(2);
  count.writeUInt16BE(values.length);
  parts.push(count);
  for (const v of values) {
    if (v === null) parts.push(Buffer.from('n'));
    else {
      const bytes = Buffer.from(v, 'utf8');
      parts.push(Buffer.from('t'), int32(bytes.length), bytes);
    }
  }
  return Buffer.concat(parts);
}

function int32(n: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeInt32BE(n);
  return b;
}
function cstr(s: string): Buffer {
  return Buffer.concat([Buffer.from(s, 'utf8'), Buffer.from([0])]);
}

// One contiguous buffer, as the frames arrive in socket reads; each decode takes the frame as a view
// on it, as pg's parser hands out a CopyData chunk (200,000 separate Buffers kept alive would make
// the bench measure the garbage collector's marking of them instead).
const built = Array.from({ length: CHANGES }, (_, i) => insertFrame(i));
const ends = new Int32Array(CHANGES);
let total = 0;
for (const [i, frame] of built.entries()) {
  total += frame.length;
  ends[i] = total;
}
const wire = Buffer.concat(built, total);
built.length = 0;
const relation = relationFrame();
console.log(`${CHANGES} insert frames of ${ends[0]} bytes (payload 300 B), ${ROUNDS} rounds`);

const rates: number[] = [];
let sink = 0;
for (let round = 0; round < ROUNDS; round++) {
  const decoder = new PgoutputDecoder({ copyContent: true });
  decoder.decode(relation);
  // Drained at the stream's default high-water mark, as the relay's next() would: the stream never
  // holds more, so retaining all 200,000 here would measure the garbage collector instead.
  let out: { lsn: bigint; message: unknown }[] = [];
  const start = performance.now();
  const cpuStart = process.cpuUsage();
  for (let i = 0; i < CHANGES; i++) {
    const frame = wire.subarray(i === 0 ? 0 : ends[i - 1]!, ends[i]!); // pg's chunk
    // What ReplicationStream does per XLogData frame.
    const lsn = frame.readBigUInt64BE(1);
    frame.readBigUInt64BE(9);
    out.push({ lsn, message: decoder.decode(frame, 25) });
    if (out.length === 10_000) {
      sink += out.length;
      out = [];
    }
  }
  const ms = performance.now() - start;
  const cpu = process.cpuUsage(cpuStart);
  const cpuMs = (cpu.user + cpu.system) / 1000;
  sink += out.length;
  // CPU time, not wall time, is the figure: the machine is shared, and wall time counts the waits
  // for a core. (GC threads count too, so on an idle core wall time comes out a little better.)
  rates.push(CHANGES / (cpuMs / 1000));
  console.log(
    `round ${round + 1}: wall ${ms.toFixed(0)} ms, cpu ${cpuMs.toFixed(0)} ms  ` +
      `${Math.round(CHANGES / (cpuMs / 1000)).toLocaleString('en')} changes/s per core  ` +
      `${((cpuMs * 1000) / CHANGES).toFixed(2)} µs/change`,
  );
}
rates.sort((a, b) => a - b);
const median = rates[Math.floor(rates.length / 2)]!;
console.log(
  `median ${Math.round(median).toLocaleString('en')} changes/s per core, ${(1e6 / median).toFixed(2)} µs/change ` +
    `(${sink} decoded)`,
);
