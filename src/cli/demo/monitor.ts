/**
 * The live status line, once a second: elapsed time, committed, delivered (verifier), applied
 * (inventory), outbox backlog and rate.
 */

import type { Pool } from 'pg';
import { outboxStatus } from '../../ops/status.js';
import type { Inventory } from './inventory.js';
import type { Ledger } from './order-service.js';
import type { StatusLine } from './status-line.js';
import type { Verifier } from './verifier.js';

export class Monitor {
  phase: 'writing' | 'draining' = 'writing';
  private readonly startedAt = performance.now();
  private timer: NodeJS.Timeout | undefined;
  private lastDelivered = 0;
  private lastTick = performance.now();
  private busy = false;

  constructor(
    private readonly pool: Pool,
    private readonly schema: string,
    private readonly ledger: Ledger,
    private readonly verifier: Verifier,
    private readonly inventory: Inventory,
    private readonly line: StatusLine,
  ) {}

  start(): void {
    this.timer = setInterval(() => void this.tick(), 1000);
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    this.line.end();
  }

  elapsedSeconds(): number {
    return (performance.now() - this.startedAt) / 1000;
  }

  private async tick(): Promise<void> {
    if (this.busy) return;
    this.busy = true;
    try {
      const backlog = await outboxStatus(this.pool, { schema: this.schema }).catch(() => undefined);
      if (this.timer === undefined) return;
      const now = performance.now();
      const delivered = this.verifier.received.size;
      const perSecond = ((delivered - this.lastDelivered) * 1000) / Math.max(1, now - this.lastTick);
      this.lastDelivered = delivered;
      this.lastTick = now;
      const age = backlog?.oldestPendingAgeSeconds;
      this.line.show(
        `${this.elapsedSeconds().toFixed(0).padStart(4)}s ${this.phase.padEnd(8)}  ` +
          `committed ${this.ledger.committed.size}  delivered ${delivered}  applied ${this.inventory.applied.size}  ` +
          `pending ${backlog?.pending ?? '?'}  oldest ${age === undefined || age === null ? '-' : `${age.toFixed(1)}s`}  ` +
          `${Math.round(perSecond)} ev/s`,
      );
    } finally {
      this.busy = false;
    }
  }
}
