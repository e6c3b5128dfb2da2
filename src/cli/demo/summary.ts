/** The verdict: what was committed, delivered, duplicated and in which order; `RESULT: OK` or `FAILED`. */

import type { Relay } from '../../relay/relay.js';
import type { Ledger } from './order-service.js';
import { missing, type Verifier } from './verifier.js';

export interface SummaryInput {
  readonly ledger: Ledger;
  readonly verifier: Verifier;
  readonly relay: Relay;
  readonly after: { readonly pending: number; readonly dead: number };
  readonly elapsed: number;
}

/** Prints the verdict; true when every check held. */
export function printSummary(input: SummaryInput): boolean {
  const { ledger, verifier, relay, after } = input;
  const committed = ledger.committed.size;
  const lost = missing(ledger, verifier).length;
  const leaked = [...ledger.rolledBack].filter((id) => verifier.received.has(id)).length;
  const delivered = [...verifier.received].filter((id) => ledger.committed.has(id)).length;
  const unknown = verifier.received.size - delivered - leaked;
  const orderHeld = verifier.orderViolations === 0;
  const stats = relay.stats();
  const lines = [
    '',
    `Summary after ${input.elapsed.toFixed(1)} s`,
    `  committed    ${committed} ${lost === 0 ? '=' : '!='} delivered ${delivered} (unique)${lost ? `, ${lost} missing` : ''}`,
    `  rolled back  ${ledger.rolledBack.size} = delivered ${leaked} of them${leaked ? '  <- rolled-back events were published!' : ''}`,
    `  duplicates   ${verifier.duplicates} (redeliveries of an event id already received; at-least-once)`,
    `  order per aggregate held: ${orderHeld ? 'yes' : 'no'} (${verifier.aggregates} aggregates, each sequence = last + 1)`,
    ...verifier.violations.map((v) => `    out of order: ${v}`),
    `  relay: published ${stats.published} in ${stats.batches} batches, ${stats.retried} retried, ${stats.dead} dead; ` +
      `outbox after stop: ${after.pending} pending, ${after.dead} dead`,
  ];
  if (unknown > 0)
    lines.push(`  unexpected   ${unknown} delivered events that the order service never wrote`);
  if (verifier.rejected > 0) lines.push(`  rejected     ${verifier.rejected} deliveries failed verification`);
  if (ledger.writeErrors > 0) {
    lines.push(
      `  write errors ${ledger.writeErrors} order transactions failed (last: ${ledger.lastWriteError})`,
    );
  }
  const ok =
    committed > 0 &&
    lost === 0 &&
    leaked === 0 &&
    unknown === 0 &&
    orderHeld &&
    verifier.rejected === 0 &&
    ledger.writeErrors === 0 &&
    after.dead === 0;
  lines.push(`RESULT: ${ok ? 'OK' : 'FAILED'}`);
  process.stdout.write(`${lines.join('\n')}\n`);
  return ok;
}
