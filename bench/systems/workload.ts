/** The benchmark's events: the same aggregates, types and payloads for every system. */

export interface BenchEvent {
  readonly aggregateType: string;
  readonly aggregateId: string;
  readonly type: string;
  readonly subjectSuffix: string;
  readonly payload: { readonly i: number; readonly orderId: string; readonly filler: string };
}

const fillers = new Map<number, string>();

/** Event i of a workload: aggregate `o<i mod aggregates>`, a JSON payload of about `payloadBytes`. */
export function benchEvent(i: number, aggregates: number, payloadBytes: number): BenchEvent {
  let filler = fillers.get(payloadBytes);
  if (filler === undefined) {
    filler = 'x'.repeat(Math.max(0, payloadBytes - 60));
    fillers.set(payloadBytes, filler);
  }
  const aggregateId = `o${i % aggregates}`;
  return {
    aggregateType: 'order',
    aggregateId,
    type: 'order.changed',
    subjectSuffix: 'order.changed',
    payload: { i, orderId: aggregateId, filler },
  };
}

/** Loads events in transactions of `chunk` events each, calling `write` inside each transaction. */
export async function inChunks(
  total: number,
  chunk: number,
  write: (from: number, count: number) => Promise<void>,
): Promise<void> {
  for (let from = 0; from < total; from += chunk) await write(from, Math.min(chunk, total - from));
}
