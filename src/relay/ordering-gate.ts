import { type AggregateRef, aggregateKey } from '../aggregate-key.js';

/**
 * The ordering gate's in-batch half. A claimed batch may hold several events
 * of one aggregate (claimed only when nothing earlier of that aggregate is
 * left outside the batch). They are split into waves: wave k holds the k-th
 * event of every aggregate, so one wave never holds two events of an
 * aggregate and can be published concurrently. The relay publishes wave k+1
 * of an aggregate only when its wave-k event was acknowledged; a failure
 * blocks the rest of that aggregate and nothing else.
 */
export interface Gated extends AggregateRef {
  readonly sequence: number;
}

export function waves<T extends Gated>(batch: readonly T[]): readonly (readonly T[])[] {
  if (batch.length === 0) return [];
  // The usual batch holds one event per aggregate: one wave, the batch itself. Checked by id
  // (strings the rows hold already, no key built per event); a shared id goes the long way.
  const seen = new Set<string>();
  for (const event of batch) {
    if (seen.has(event.aggregateId)) return spread(batch);
    seen.add(event.aggregateId);
  }
  return [batch];
}

function spread<T extends Gated>(batch: readonly T[]): T[][] {
  const byAggregate = new Map<string, T[]>();
  for (const event of batch) {
    const key = aggregateKey(event);
    const list = byAggregate.get(key);
    if (list) list.push(event);
    else byAggregate.set(key, [event]);
  }
  const result: T[][] = [];
  for (const list of byAggregate.values()) {
    if (list.length > 1) list.sort((a, b) => a.sequence - b.sequence);
    for (let k = 0; k < list.length; k++) {
      let wave = result[k];
      if (!wave) {
        wave = [];
        result[k] = wave;
      }
      wave.push(list[k]!);
    }
  }
  return result;
}
