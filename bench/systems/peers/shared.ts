/** What every peer system shares: a JetStream publisher, an ack counter, transactions, identifiers. */
import { jetstream } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import type { BenchContext, DrainResult } from '../types.js';
import type { BenchEvent } from '../workload.js';

/** One NATS connection; `publish` resolves once JetStream has stored the message (PubAck). */
export interface Broker {
  publish(subject: string, data: string, msgId: string): Promise<void>;
  close(): Promise<void>;
}

export async function openBroker(ctx: BenchContext): Promise<Broker> {
  const nc = await connect({ servers: ctx.natsUrl });
  const js = jetstream(nc);
  return {
    async publish(subject, data, msgId) {
      // `msgID` is sent as the `Nats-Msg-Id` header: the stream's duplicate window drops retries.
      await js.publish(subject, data, { msgID: msgId, expect: { streamName: ctx.stream } });
    },
    close: () => nc.close(),
  };
}

/** The subject an event is published to. */
export function subjectOf(ctx: BenchContext, event: BenchEvent): string {
  return `${ctx.subjectPrefix}.${event.subjectSuffix}`;
}

/** A quoted SQL identifier. */
export function ident(name: string): string {
  return `"${name.replaceAll('"', '""')}"`;
}

export { inTransaction } from '../../../src/producer/transaction.js';

/**
 * Counts the broker's acknowledgements, once per message id (a retried publish acked as a
 * duplicate counts once), and settles when `target` distinct events are acknowledged.
 */
export class AckCounter {
  readonly #seen = new Set<string>();
  readonly #target: number;
  readonly #started = performance.now();
  #lastProgress = performance.now();
  #error: Error | undefined;
  #settle: { resolve: () => void; reject: (error: Error) => void } | undefined;

  constructor(target: number) {
    this.#target = target;
  }

  get delivered(): number {
    return this.#seen.size;
  }

  ack(msgId: string): void {
    this.#seen.add(msgId);
    this.#lastProgress = performance.now();
    if (this.#seen.size >= this.#target) this.#settle?.resolve();
  }

  /** Makes `done` reject (e.g. a worker reported an error it will not recover from). */
  fail(error: Error): void {
    this.#error ??= error;
    this.#settle?.reject(error);
  }

  /**
   * Resolves with the drain result once every event is acknowledged; rejects when no new
   * acknowledgement arrives for `stallMs`, so a stuck peer fails the run instead of hanging it.
   */
  async done(stallMs = 60_000): Promise<DrainResult> {
    if (this.#error !== undefined) throw this.#error;
    if (this.#seen.size < this.#target) {
      await new Promise<void>((resolve, reject) => {
        const timer = setInterval(() => {
          if (performance.now() - this.#lastProgress > stallMs) {
            reject(
              new Error(`no broker ack for ${stallMs} ms (${this.delivered}/${this.#target} acknowledged)`),
            );
          }
        }, 1000);
        const stop = () => clearInterval(timer);
        this.#settle = {
          resolve: () => {
            stop();
            resolve();
          },
          reject: (error) => {
            stop();
            reject(error);
          },
        };
      });
    }
    return { seconds: (performance.now() - this.#started) / 1000, delivered: this.delivered };
  }
}

/** Drops the slot (retrying while the walsender that used it winds down) and the publication. */
export async function dropReplicationObjects(
  ctx: BenchContext,
  { publication, slot }: { publication: string; slot: string },
): Promise<void> {
  for (let attempt = 0; ; attempt++) {
    try {
      await ctx.pool.query(
        'SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1',
        [slot],
      );
      break;
    } catch (error) {
      if (attempt >= 50) throw error;
      await ctx.pool.query(
        'SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active',
        [slot],
      );
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  await ctx.pool.query(`DROP PUBLICATION IF EXISTS ${publication}`);
}
