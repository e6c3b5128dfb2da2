import type { OutboxMessage, Publisher, PublishOutcome } from '../../src/publishers/contract.js';

/**
 * A publisher that records what it was given; its verdict per message is
 * programmable. Used to test the relay's own logic (ordering gate, backoff,
 * dead events). Broker behaviour is tested against the real brokers.
 */
export class RecordingPublisher implements Publisher {
  readonly name = 'recording';
  readonly received: OutboxMessage[] = [];
  verdict: (m: OutboxMessage) => PublishOutcome | Promise<PublishOutcome> = () => ({ ok: true });
  delayMs = 0;

  async publish(batch: readonly OutboxMessage[], signal: AbortSignal): Promise<PublishOutcome[]> {
    if (this.delayMs > 0) await new Promise((r) => setTimeout(r, this.delayMs));
    return Promise.all(
      batch.map(async (m) => {
        if (signal.aborted) return { ok: false, retryable: true, error: new Error('aborted') } as const;
        const outcome = await this.verdict(m);
        if (outcome.ok) this.received.push(m);
        return outcome;
      }),
    );
  }

  async close(): Promise<void> {}
}
