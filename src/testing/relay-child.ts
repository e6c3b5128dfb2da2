/**
 * The publisher side of a relay the contract runs in a child process: wraps the real publisher
 * per {@link ChildMode} and reports what it does as JSON lines (`{ "contract": ChildReport }`)
 * on stdout, which the test side reads back (see `readChildReports`).
 */
import type { Publisher, PublishOutcome } from '../publishers/contract.js';
import { permanent } from '../publishers/core/outcomes.js';
import type { ChildMode, ChildReport } from './relay-scenario.js';

/** Prints one report line on stdout. */
export function printChildReport(report: ChildReport): void {
  process.stdout.write(`${JSON.stringify({ contract: report })}\n`);
}

/** `inner` behaving as `mode` says, reporting each publish. */
export function relayChildPublisher(
  inner: Publisher,
  mode: ChildMode,
  report: (r: ChildReport) => void = printChildReport,
): Publisher {
  let batches = 0;
  let failedOnce = false;
  return {
    name: inner.name,
    async publish(batch, signal): Promise<PublishOutcome[]> {
      const ids = batch.map((m) => m.eventId);
      report({ event: 'publishing', ids });
      if (mode.kind === 'slow-fail' && !failedOnce) {
        failedOnce = true;
        await new Promise((r) => setTimeout(r, mode.delayMs));
        report({ event: 'refused', ids });
        return batch.map(() => permanent('contract: refused by the paused relay'));
      }
      if (mode.kind === 'kill-after-publish' && (mode.delayMs ?? 0) > 0)
        await new Promise((r) => setTimeout(r, mode.delayMs));
      const outcomes = await inner.publish(batch, signal);
      report({ event: 'published', ids: ids.filter((_, i) => outcomes[i]?.ok) });
      if (mode.kind === 'kill-after-publish' && outcomes.some((o) => o.ok)) {
        batches += 1;
        if (batches >= mode.afterBatches) {
          report({ event: 'killing', ids });
          process.kill(process.pid, 'SIGKILL');
          await new Promise(() => undefined);
        }
      }
      return outcomes;
    },
    close: () => inner.close(),
  };
}

/** Reads the reports out of a child's stdout text (lines that are not reports are ignored). */
export function readChildReports(stdout: string): ChildReport[] {
  const out: ChildReport[] = [];
  for (const line of stdout.split('\n')) {
    if (!line.startsWith('{"contract"')) continue;
    try {
      out.push((JSON.parse(line) as { contract: ChildReport }).contract);
    } catch {
      // a line cut by a kill -9
    }
  }
  return out;
}
