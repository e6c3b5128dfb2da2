/**
 * The verdict: what was injected, committed, delivered, duplicated and in which order, and
 * what the inventory applied; `RESULT: OK` or `FAILED`.
 */

import type { InboxStats } from '../../inbox/inbox.js';
import type { Relay } from '../../relay/relay.js';
import type { LostAcks } from './faults.js';
import type { InventoryAudit } from './inventory.js';
import type { Ledger } from './order-service.js';
import { missing, type Verifier } from './verifier.js';

export interface SummaryInput {
  readonly ledger: Ledger;
  readonly verifier: Verifier;
  readonly relay: Relay;
  readonly after: { readonly pending: number; readonly dead: number };
  readonly elapsed: number;
  readonly publishAcks: LostAcks;
  readonly consumerAcks: LostAcks;
  /** What the inventory's inbox answered, per status. */
  readonly tally: InboxStats;
  readonly audit: InventoryAudit;
  /** NATS: messages in the stream. */
  readonly stored: number | undefined;
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
    ...injectedLines(input),
    `  committed    ${committed} ${lost === 0 ? '=' : '!='} delivered ${delivered} (unique)${lost ? `, ${lost} missing` : ''}`,
    `  rolled back  ${ledger.rolledBack.size} = delivered ${leaked} of them${leaked ? '  <- rolled-back events were published!' : ''}`,
    `  duplicates   ${verifier.duplicates} (redeliveries of an event id already received; at-least-once)`,
    `  order per aggregate held: ${orderHeld ? 'yes' : 'no'} (${verifier.aggregates} aggregates, each sequence = last + 1)`,
    ...verifier.violations.map((v) => `    out of order: ${v}`),
    ...storedLines(input, committed),
    ...inventoryLines(input, committed),
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
    after.dead === 0 &&
    inventoryHeld(input, committed);
  lines.push(`RESULT: ${ok ? 'OK' : 'FAILED'}`);
  process.stdout.write(`${lines.join('\n')}\n`);
  return ok;
}

function injectedLines({ publishAcks, consumerAcks }: SummaryInput): string[] {
  if (publishAcks.percent === 0 && consumerAcks.percent === 0)
    return ['  injected     nothing (--lost-acks 0): any duplicate comes from a real failure'];
  const lines = [
    `  injected     ${publishAcks.injected} lost publish acks (${publishAcks.percent}%): delivered, then reported ` +
      `failed to the relay, which published them again (${publishAcks.redelivered} re-published)`,
  ];
  if (consumerAcks.percent > 0) {
    lines.push(
      `               ${consumerAcks.injected} lost consumer acks (${consumerAcks.percent}%): applied by the inbox, ` +
        `then nak'd; JetStream delivered them again (${consumerAcks.redelivered} redelivered)`,
    );
  }
  return lines;
}

function storedLines({ stored, publishAcks }: SummaryInput, committed: number): string[] {
  if (stored === undefined) return [];
  const dropped =
    stored === committed && publishAcks.redelivered > 0
      ? `: JetStream dropped the relay's ${publishAcks.redelivered} re-publishes (same Nats-Msg-Id)`
      : '';
  return [`  stream       holds ${stored} messages for ${committed} committed events${dropped}`];
}

function inventoryLines({ tally, audit }: SummaryInput, committed: number): string[] {
  const others = [
    tally.stale > 0 ? `${tally.stale} stale` : '',
    tally.deferred > 0 ? `${tally.deferred} deferred` : '',
    tally.quarantined > 0 ? `${tally.quarantined} quarantined` : '',
  ].filter((s) => s !== '');
  const stockHeld = audit.initialOnHand - audit.reserved === audit.onHand;
  const received = Object.values(tally).reduce((n, count) => n + count, 0);
  return [
    `  inventory    received ${received} deliveries: ${tally.processed} processed, ` +
      `${tally.duplicate} duplicates (no effect)${others.map((s) => `, ${s}`).join('')}, ` +
      `effects applied ${audit.effects} ${audit.effects === committed ? '=' : '!='} committed events ${committed}`,
    `  inventory    effects per event: ${audit.committedOnce} committed events once, ${audit.appliedTwice} twice or more, ` +
      `${audit.notCommitted} for events not committed; stock ${audit.initialOnHand} - reserved ${audit.reserved} ` +
      `${stockHeld ? '=' : '!='} on hand ${audit.onHand}; ${audit.quarantined} quarantined`,
  ];
}

/** Every committed event applied exactly once, nothing else applied, stock consistent, nothing quarantined. */
function inventoryHeld({ tally, audit }: SummaryInput, committed: number): boolean {
  return (
    audit.effects === committed &&
    audit.committedOnce === committed &&
    audit.appliedTwice === 0 &&
    audit.notCommitted === 0 &&
    audit.initialOnHand - audit.reserved === audit.onHand &&
    tally.processed === audit.effects &&
    tally.quarantined === 0 &&
    audit.quarantined === 0
  );
}
