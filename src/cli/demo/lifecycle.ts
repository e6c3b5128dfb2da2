/** The demo's lifecycle: a cleanup stack run last-in first-out, and Ctrl-C handling. */

import type { Logger as PinoLogger } from 'pino';
import { EXIT_INTERRUPTED } from '../common.js';
import type { StatusLine } from './status-line.js';

export class Interrupted extends Error {
  constructor() {
    super('interrupted');
    this.name = 'Interrupted';
  }
}

/** Undo steps, run last-in first-out; each failure is logged and the rest still run. */
export class Cleanup {
  private readonly steps: Array<{ name: string; run: () => Promise<unknown> }> = [];

  constructor(private readonly logger: PinoLogger) {}

  add(name: string, run: () => Promise<unknown>): void {
    this.steps.push({ name, run });
  }

  async runAll(): Promise<void> {
    for (let step = this.steps.pop(); step !== undefined; step = this.steps.pop()) {
      try {
        await step.run();
      } catch (error) {
        this.logger.warn({ err: error, step: step.name }, 'demo cleanup step failed');
      }
    }
  }
}

/** What the demo's steps share: the logger, the cleanup stack, the status line and the interrupt signal. */
export interface DemoContext {
  readonly logger: PinoLogger;
  readonly cleanup: Cleanup;
  readonly line: StatusLine;
  readonly signal: AbortSignal;
}

/** First SIGINT/SIGTERM aborts the demo (which then cleans up); a second one exits at once. */
export function watchInterrupts(controller: AbortController, line: StatusLine): () => void {
  const onSignal = (): void => {
    if (controller.signal.aborted) {
      process.stderr.write('tx-outbox: forced exit; temporary resources may be left behind\n');
      process.exit(EXIT_INTERRUPTED);
    }
    line.end();
    process.stderr.write('tx-outbox: interrupted, cleaning up (press Ctrl-C again to force)\n');
    controller.abort(new Interrupted());
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  return () => {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  };
}

export function throwIfInterrupted(signal: AbortSignal): void {
  if (signal.aborted) throw new Interrupted();
}
