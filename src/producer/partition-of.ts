/**
 * `partition_of(aggregate_type, aggregate_id)` (009_producer.sql) computed by the CDC relay, so
 * that it checks the partition a WAL-mode message claims as `enqueue`'s statement computed it:
 * `(hashtextextended(type || chr(31) || id, 0) & 0x7fffffffffffffff) % partitions`.
 *
 * hashtextextended over a deterministic collation is PostgreSQL's `hash_bytes_extended`
 * (src/common/hashfn.c: Bob Jenkins' lookup3, 2006) of the text's bytes with seed 0, which
 * returns `b << 32 | c` after the final mix. The bytes are the server encoding's: UTF-8 here;
 * a database in another encoding hashes the same bytes for ASCII keys only (see
 * {@link partitionOf}'s `utf8`).
 */

function rot(x: number, k: number): number {
  return ((x << k) | (x >>> (32 - k))) >>> 0;
}

/** lookup3's hash of `k` with seed 0, as its two 32-bit halves [b, c]. */
function hashBytes(k: Buffer): [number, number] {
  let len = k.length;
  let a = (0x9e3779b9 + len + 3923095) >>> 0;
  let b = a;
  let c = a;
  let at = 0;
  while (len >= 12) {
    a = (a + k.readUInt32LE(at)) >>> 0;
    b = (b + k.readUInt32LE(at + 4)) >>> 0;
    c = (c + k.readUInt32LE(at + 8)) >>> 0;
    // mix(a, b, c)
    a = (a - c) >>> 0;
    a = (a ^ rot(c, 4)) >>> 0;
    c = (c + b) >>> 0;
    b = (b - a) >>> 0;
    b = (b ^ rot(a, 6)) >>> 0;
    a = (a + c) >>> 0;
    c = (c - b) >>> 0;
    c = (c ^ rot(b, 8)) >>> 0;
    b = (b + a) >>> 0;
    a = (a - c) >>> 0;
    a = (a ^ rot(c, 16)) >>> 0;
    c = (c + b) >>> 0;
    b = (b - a) >>> 0;
    b = (b ^ rot(a, 19)) >>> 0;
    a = (a + c) >>> 0;
    c = (c - b) >>> 0;
    c = (c ^ rot(b, 4)) >>> 0;
    b = (b + a) >>> 0;
    at += 12;
    len -= 12;
  }
  // The last 0–11 bytes, little-endian within each word; the lowest byte of c stays the length's.
  if (len >= 11) c = (c + (k[at + 10]! << 24)) >>> 0;
  if (len >= 10) c = (c + (k[at + 9]! << 16)) >>> 0;
  if (len >= 9) c = (c + (k[at + 8]! << 8)) >>> 0;
  if (len >= 8) b = (b + (k[at + 7]! << 24)) >>> 0;
  if (len >= 7) b = (b + (k[at + 6]! << 16)) >>> 0;
  if (len >= 6) b = (b + (k[at + 5]! << 8)) >>> 0;
  if (len >= 5) b = (b + k[at + 4]!) >>> 0;
  if (len >= 4) a = (a + (k[at + 3]! << 24)) >>> 0;
  if (len >= 3) a = (a + (k[at + 2]! << 16)) >>> 0;
  if (len >= 2) a = (a + (k[at + 1]! << 8)) >>> 0;
  if (len >= 1) a = (a + k[at]!) >>> 0;
  // final(a, b, c)
  c = (c ^ b) >>> 0;
  c = (c - rot(b, 14)) >>> 0;
  a = (a ^ c) >>> 0;
  a = (a - rot(c, 11)) >>> 0;
  b = (b ^ a) >>> 0;
  b = (b - rot(a, 25)) >>> 0;
  c = (c ^ b) >>> 0;
  c = (c - rot(b, 16)) >>> 0;
  a = (a ^ c) >>> 0;
  a = (a - rot(c, 4)) >>> 0;
  b = (b ^ a) >>> 0;
  b = (b - rot(a, 14)) >>> 0;
  c = (c ^ b) >>> 0;
  c = (c - rot(b, 24)) >>> 0;
  return [b, c];
}

const TWO_32 = 2 ** 32;

/**
 * The partition of an aggregate key among `partitions` (1–1024), as `partition_of` computes it
 * in a UTF-8 database; `undefined` when it cannot tell: `utf8` false (the database's encoding is
 * another) and a key that is not ASCII, whose bytes there differ.
 */
export function partitionOf(
  aggregateType: string,
  aggregateId: string,
  partitions: number,
  utf8 = true,
): number | undefined {
  const key = Buffer.from(`${aggregateType}\u001f${aggregateId}`, 'utf8');
  if (!utf8 && key.length !== aggregateType.length + 1 + aggregateId.length) return undefined;
  const [high, low] = hashBytes(key);
  // ((high & 0x7fffffff) · 2³² + low) mod n, without leaving safe integers (n ≤ 1024).
  return (((high & 0x7fffffff) % partitions) * (TWO_32 % partitions) + (low % partitions)) % partitions;
}
