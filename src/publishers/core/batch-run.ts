import type { PublishOutcome } from '../contract.js';

/**
 * One `publish()` call of a pipelining publisher: an entry per message, either an item to send
 * or the outcome decided before sending; the outcomes are settled one by one and resolved
 * together, in batch order.
 */
export class BatchRun<Item extends object> {
  readonly items: readonly (Item | PublishOutcome)[];
  readonly outcomes: (PublishOutcome | undefined)[];
  readonly promise: Promise<PublishOutcome[]>;
  /** Items before this index were handed to the client (or had their outcome already). */
  next = 0;
  done = false;
  #unsettled = 0;
  #resolve!: (outcomes: PublishOutcome[]) => void;

  constructor(items: readonly (Item | PublishOutcome)[]) {
    this.items = items;
    this.outcomes = items.map((item) => {
      if (isOutcome(item)) return item; // decided before sending (bad subject, oversized …)
      this.#unsettled += 1;
      return undefined;
    });
    this.promise = new Promise((resolve) => {
      this.#resolve = resolve;
    });
    if (this.#unsettled === 0) this.#finish();
  }

  settle(index: number, outcome: PublishOutcome): void {
    if (this.outcomes[index] !== undefined) return;
    this.outcomes[index] = outcome;
    this.#unsettled -= 1;
    if (this.#unsettled === 0) this.#finish();
  }

  /**
   * Settles every open item from index `from`: `sent(item)` for those already handed to the
   * client, `unsent(item)` for the rest.
   */
  settleRest(
    from: number,
    sent: (item: Item) => PublishOutcome,
    unsent: (item: Item) => PublishOutcome,
  ): void {
    for (let i = from; i < this.items.length && !this.done; i += 1) {
      const item = this.items[i]!;
      if (this.outcomes[i] !== undefined || isOutcome(item)) continue;
      this.settle(i, i < this.next ? sent(item) : unsent(item));
    }
  }

  #finish(): void {
    this.done = true;
    this.#resolve(this.outcomes as PublishOutcome[]);
  }
}

/** An outcome decided before sending, rather than an item to send (items have no `ok`). */
export function isOutcome<Item extends object>(entry: Item | PublishOutcome): entry is PublishOutcome {
  return 'ok' in entry;
}
