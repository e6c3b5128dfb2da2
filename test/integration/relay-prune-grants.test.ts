import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { prune } from '../../src/ops/prune.js';
import { createRelay } from '../../src/relay/polling/relay.js';
import { waitFor } from '../helpers/db.js';
import { logRecorder } from '../helpers/log-recorder.js';
import { createLoginRoles, type LoginRoles } from '../helpers/login-roles.js';
import { RecordingPublisher } from '../helpers/memory-publisher.js';

/**
 * The relay's rights over other parts' records (src/schema/roles.ts): by default the relay role
 * cannot delete the consumers' dedup records (the inbox tables) nor the operators' audit trail;
 * `tx-outbox roles --relay-prunes inbox,audit` (`rolesSql({ relayPrunes })`) grants it, for a
 * relay told to prune them. A relay told to without the right skips them with one warning.
 * Run as the real login roles.
 */
let r: LoginRoles;
let s: string;

beforeAll(async () => {
  r = await createLoginRoles('relayprune');
  s = `"${r.schema}"`;
});

afterAll(async () => {
  await r?.drop();
});

const INBOX_TABLES = ['inbox', 'inbox_positions', 'inbox_attempts', 'inbox_quarantine'];

/** An old audit row, an old dedup record and a relay row whose heartbeat stopped two days ago. */
async function seedOld(): Promise<void> {
  await r.admin.query(
    `INSERT INTO ${s}.audit (at, actor, action, reason) VALUES (now() - interval '400 days', 'op', 'replay', 'old')`,
  );
  await r.admin.query(
    `INSERT INTO ${s}.inbox (consumer, event_id, aggregate_type, aggregate_id, sequence, outcome, processed_at)
     VALUES ('billing', $1, 'order', 'o1', 1, 'processed', now() - interval '30 days')`,
    [randomUUID()],
  );
  await r.admin.query(
    `INSERT INTO ${s}.relays (relay_id, host, pid, lease_ms, heartbeat_at)
     VALUES ('gone', 'h', 1, 1000, now() - interval '2 days')`,
  );
}

async function count(table: string): Promise<number> {
  const { rows } = await r.admin.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${s}.${table}`);
  return rows[0]!.n;
}

describe("the relay role's rights over the inbox and the audit trail", () => {
  it('by default the relay may not delete dedup records or audit rows; --relay-prunes grants it', async () => {
    for (const table of [...INBOX_TABLES, 'audit']) {
      await expect(r.as('relay').query(`DELETE FROM ${s}.${table}`), table).rejects.toThrow(
        new RegExp(`permission denied for table ${table}$`),
      );
    }
    // The operator's tx-outbox prune keeps them bounded.
    await seedOld();
    const pruned = await prune(r.as('operator'), {
      schema: r.schema,
      inbox: { replayHorizonMs: 86_400_000 },
    });
    expect(pruned.removed).toMatchObject({ audit: 1, inbox: 1, relays: 1 });

    await r.grant({ relayPrunes: ['inbox', 'audit'] });
    try {
      for (const table of [...INBOX_TABLES, 'audit']) {
        await r.as('relay').query(`DELETE FROM ${s}.${table} WHERE false`);
      }
      await r.grant({ relayPrunes: ['audit'] });
      await r.as('relay').query(`DELETE FROM ${s}.audit WHERE false`);
      await expect(r.as('relay').query(`DELETE FROM ${s}.inbox WHERE false`)).rejects.toThrow(
        /permission denied for table inbox$/,
      );
    } finally {
      await r.grant();
    }
  });

  it("a relay told to prune them without the right prunes the outbox's tables, skips them with one warning each; granted, prunes them", async () => {
    await seedOld();
    const { lines, logger } = logRecorder();
    const relay = createRelay({
      pool: r.as('relay'),
      publisher: new RecordingPublisher(),
      schema: r.schema,
      pollIntervalMs: 50,
      logger,
      prune: { intervalMs: 30, auditRetentionMs: 365 * 86_400_000, inbox: { replayHorizonMs: 86_400_000 } },
    });
    const runs = () => lines.filter((l) => l.msg === 'pruned').length;
    await relay.start();
    try {
      await waitFor(async () => (await count('relays')) === 1, { what: "the dead relay's row pruned" });
      // Several more runs: still one warning for each, and no failed run.
      const seen = runs();
      await waitFor(
        async () => {
          await r.admin.query(
            `INSERT INTO ${s}.relays (relay_id, host, pid, lease_ms, heartbeat_at)
             VALUES ('gone-${randomUUID()}', 'h', 1, 1000, now() - interval '2 days')`,
          );
          return runs() >= seen + 3;
        },
        { what: 'three more runs' },
      );
      const warnings = lines.filter((l) => l.level === 'warn').map((l) => l.msg);
      expect(warnings.filter((m) => m.startsWith('prune failed'))).toEqual([]);
      expect(warnings.filter((m) => m.startsWith('prune:'))).toEqual([
        expect.stringMatching(
          /^prune: auditRetentionMs is set, but this relay's role may not delete audit rows; .*--relay-prunes audit/,
        ),
        expect.stringMatching(
          /^prune: inbox pruning is set, but this relay's role may not delete the inbox tables; .*--relay-prunes inbox/,
        ),
      ]);
      expect(await count('audit')).toBe(1);
      expect(await count('inbox')).toBe(1);

      await r.grant({ relayPrunes: ['inbox', 'audit'] });
      await waitFor(async () => (await count('audit')) === 0 && (await count('inbox')) === 0, {
        what: 'the old audit row and dedup record pruned once granted',
      });
    } finally {
      await relay.stop({ timeout: 5000 });
      await r.grant();
    }
    expect(lines.filter((l) => l.msg.startsWith('prune:'))).toHaveLength(2);
  });

  it('a relay not told to prune them leaves them alone, whatever its rights, and says nothing of it', async () => {
    await r.grant({ relayPrunes: ['inbox', 'audit'] });
    await seedOld();
    const { lines, logger } = logRecorder();
    const relay = createRelay({
      pool: r.as('relay'),
      publisher: new RecordingPublisher(),
      schema: r.schema,
      pollIntervalMs: 50,
      logger,
      prune: { intervalMs: 30 },
    });
    await relay.start();
    try {
      await waitFor(async () => (await count('relays')) === 1, { what: "the dead relay's row pruned" });
    } finally {
      await relay.stop({ timeout: 5000 });
      await r.grant();
    }
    expect(await count('audit')).toBe(1);
    expect(await count('inbox')).toBe(1);
    expect(lines.filter((l) => l.level === 'warn')).toEqual([]);
  });
});
