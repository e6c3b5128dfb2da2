/**
 * The Java client's default partitioner: murmur2 of the key. This publisher and any Java, Kafka
 * Connect or librdkafka producer (`murmur2_random`) put an aggregate in the same partition.
 */

/**
 * Kafka's murmur2 hash (the Java client's `Utils.murmur2`), as a signed 32-bit integer.
 */
export function murmur2(data: Uint8Array): number {
  const m = 0x5bd1e995;
  const length = data.length;
  let h = 0x9747b28c ^ length;
  const whole = length & ~3;
  for (let i = 0; i < whole; i += 4) {
    let k = data[i]! | (data[i + 1]! << 8) | (data[i + 2]! << 16) | (data[i + 3]! << 24);
    k = Math.imul(k, m);
    k ^= k >>> 24;
    k = Math.imul(k, m);
    h = Math.imul(h, m) ^ k;
  }
  switch (length & 3) {
    // biome-ignore lint/suspicious/noFallthroughSwitchClause: the reference algorithm falls through
    case 3:
      h ^= data[whole + 2]! << 16;
    // biome-ignore lint/suspicious/noFallthroughSwitchClause: the reference algorithm falls through
    case 2:
      h ^= data[whole + 1]! << 8;
    case 1:
      h ^= data[whole]!;
      h = Math.imul(h, m);
  }
  h ^= h >>> 13;
  h = Math.imul(h, m);
  h ^= h >>> 15;
  return h | 0;
}

/** The partition of a key, as the Java client's default partitioner picks it. */
export function partitionFor(key: Uint8Array, partitions: number): number {
  return (murmur2(key) & 0x7fffffff) % partitions;
}
