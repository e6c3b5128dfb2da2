/**
 * Event ids: UUID version 7 (RFC 9562), time-ordered so the primary keys consumers dedup by stay
 * local in their indexes. Written here rather than taken from a library because the producer makes
 * one per event and the `uuid` package asks the system for 16 random bytes on every call: 58 % of
 * `enqueue`'s own CPU in a profile (docs/performance.md, W3). Random bytes come from a pool filled
 * 256 ids at a time.
 *
 * Layout: 48 bits of Unix milliseconds, the version (7), a 32-bit counter spread over rand_a and
 * the top of rand_b (RFC 9562 §6.2 method 1: ids made in one millisecond still sort in order of
 * creation; the counter starts at a random value each millisecond, its top bit clear so it cannot
 * run out), the variant, and 42 random bits.
 */
import { randomFillSync } from 'node:crypto';

const POOL_IDS = 256;
const STRIDE = 10; // 4 bytes seed the counter, 6 fill the random tail
const pool = new Uint8Array(POOL_IDS * STRIDE);
let used = POOL_IDS;
let lastMs = -1;
let counter = 0;

const HEX: string[] = Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, '0'));

function hex(b: number): string {
  return HEX[b & 0xff]!;
}

/** A fresh UUID v7 in lower-case canonical form; ids from one process strictly increase. */
export function newEventId(): string {
  if (used === POOL_IDS) {
    randomFillSync(pool);
    used = 0;
  }
  const r = used * STRIDE;
  used += 1;
  let ms = Date.now();
  if (ms > lastMs) {
    lastMs = ms;
    // 31 random bits: the counter can count 2^31 ids in this millisecond before it wraps.
    counter = ((pool[r]! << 23) | (pool[r + 1]! << 15) | (pool[r + 2]! << 7) | (pool[r + 3]! >>> 1)) >>> 0;
  } else {
    counter = (counter + 1) >>> 0;
    if (counter === 0) {
      // Wrapped (never in practice): borrow the next millisecond, as RFC 9562 allows.
      lastMs += 1;
      counter = 0;
    }
    ms = lastMs;
  }
  const high = Math.floor(ms / 0x100000000);
  const low = ms >>> 0;
  const c = counter;
  return (
    hex(high >>> 8) +
    hex(high) +
    hex(low >>> 24) +
    hex(low >>> 16) +
    '-' +
    hex(low >>> 8) +
    hex(low) +
    '-' +
    hex(0x70 | ((c >>> 28) & 0x0f)) +
    hex(c >>> 20) +
    '-' +
    hex(0x80 | ((c >>> 14) & 0x3f)) +
    hex(c >>> 6) +
    '-' +
    hex(((c << 2) & 0xfc) | (pool[r + 4]! & 0x03)) +
    hex(pool[r + 5]!) +
    hex(pool[r + 6]!) +
    hex(pool[r + 7]!) +
    hex(pool[r + 8]!) +
    hex(pool[r + 9]!)
  );
}
