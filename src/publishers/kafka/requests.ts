/** How one publish's records are split into produce requests. */
import { BATCH_OVERHEAD, type Item, partitionKey } from './wire.js';

/** Upper bound of one produce request (the broker's `socket.request.max.bytes` is 100 MiB). */
export const MAX_REQUEST_BYTES = 16 * 1_048_576;

/**
 * Splits the messages into produce requests: within one, each partition's records fit
 * `maxBytes` (the broker takes one record batch per partition and request) and the request
 * stays under MAX_REQUEST_BYTES. A relay batch usually fits one request. A partition's records
 * keep their order across the requests.
 */
export function chunk(items: readonly Item[], maxBytes: number): Item[][] {
  const chunks: { items: Item[]; total: number; perPartition: Map<string, number> }[] = [];
  /** The chunk of each partition's latest record: its next records go there or later (order). */
  const latest = new Map<string, number>();
  for (const item of items) {
    const key = partitionKey(item);
    let at = latest.get(key) ?? 0;
    for (; at < chunks.length; at++) {
      const c = chunks[at]!;
      const partitionBytes = (c.perPartition.get(key) ?? BATCH_OVERHEAD) + item.bytes;
      if (partitionBytes <= maxBytes && c.total + item.bytes <= MAX_REQUEST_BYTES) break;
    }
    if (at === chunks.length) chunks.push({ items: [], total: 0, perPartition: new Map() });
    const target = chunks[at]!;
    target.items.push(item);
    target.total += item.bytes;
    target.perPartition.set(key, (target.perPartition.get(key) ?? BATCH_OVERHEAD) + item.bytes);
    latest.set(key, at);
  }
  return chunks.map((c) => c.items);
}

/** The items grouped by a key, each group in the items' order, the groups in first-seen order. */
export function groupBy(items: readonly Item[], keyOf: (item: Item) => string): Map<string, Item[]> {
  const groups = new Map<string, Item[]>();
  for (const item of items) {
    const key = keyOf(item);
    const list = groups.get(key);
    if (list === undefined) groups.set(key, [item]);
    else list.push(item);
  }
  return groups;
}
