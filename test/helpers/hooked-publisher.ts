import type { OutboxMessage, Publisher, PublishOutcome } from '../../src/publishers/contract.js';

/**
 * A real publisher (NATS in the CDC tests) behind a hook: `fail(m)` may refuse a message
 * (permanently, retryably, or as unavailable) before it reaches the broker; `delay(m)` holds a
 * batch that has the message for that many ms first; `acked` is every acknowledged message in order.
 */
export class HookedPublisher implements Publisher {
  readonly name = 'nats';
  readonly acked: OutboxMessage[] = [];
  fail: (m: OutboxMessage) => PublishOutcome | undefined = () => undefined;
  /** ms to wait before publishing a batch that holds this message. */
  delay: (m: OutboxMessage) => number = () => 0;

  constructor(private readonly inner: Publisher) {}

  async publish(batch: readonly OutboxMessage[], signal: AbortSignal): Promise<PublishOutcome[]> {
    const wait = Math.max(0, ...batch.map((m) => this.delay(m)));
    if (wait > 0) await new Promise((res) => setTimeout(res, wait));
    const outcomes: (PublishOutcome | undefined)[] = batch.map((m) => this.fail(m));
    const through = batch.filter((_, i) => outcomes[i] === undefined);
    const results = through.length > 0 ? await this.inner.publish(through, signal) : [];
    let k = 0;
    return batch.map((m, i) => {
      const own = outcomes[i];
      if (own) return own;
      const r = results[k++]!;
      if (r.ok) this.acked.push(m);
      return r;
    });
  }

  close(): Promise<void> {
    return this.inner.close();
  }
}
