import { describe, expect, it } from 'vitest';
import { relayPrunesFlag } from '../../src/cli/roles.js';
import { OutboxValidationError } from '../../src/errors.js';
import { rolesSql } from '../../src/schema/roles.js';

describe('rolesSql', () => {
  it('names the roles <schema>_<kind> by default, NOLOGIN, and the schema owned by the migrator', () => {
    const sql = rolesSql();
    expect(sql.roles).toEqual({
      migrator: 'outbox_migrator',
      producer: 'outbox_producer',
      relay: 'outbox_relay',
      consumer: 'outbox_consumer',
      operator: 'outbox_operator',
    });
    expect(sql.setup.filter((s) => s.includes('NOLOGIN'))).toHaveLength(5);
    expect(sql.setup).toContain('CREATE SCHEMA IF NOT EXISTS "outbox" AUTHORIZATION "outbox_migrator";');
    expect(sql.grants[0]).toBe('BEGIN;');
    expect(sql.grants.at(-1)).toBe('COMMIT;');
  });

  it('grants the producer INSERT on events and SELECT on only the columns RETURNING reads', () => {
    const grant = rolesSql({ schema: 'billing' }).grants.find(
      (s) => s.includes('"billing".events') && s.includes('"billing_producer"'),
    );
    expect(grant).toMatch(
      /^GRANT INSERT \(id, previous_id, event_id, .*\), SELECT \(event_id, sequence\) ON "billing".events/,
    );
  });

  it('never grants the migrator anything (it owns) nor a runtime role DDL', () => {
    const { grants, roles } = rolesSql({ roles: { migrator: 'ddl' } });
    expect(roles.migrator).toBe('ddl');
    expect(grants.filter((s) => s.includes('"ddl"'))).toEqual([]);
    expect(grants.filter((s) => /\b(CREATE|TRUNCATE|REFERENCES|TRIGGER)\b/.test(s))).toEqual([]);
  });

  it('refuses a bad or shared role name, naming the field', () => {
    expect(() => rolesSql({ roles: { relay: 'Relay"; DROP' } })).toThrow(OutboxValidationError);
    expect(() => rolesSql({ roles: { relay: 'Relay"; DROP' } })).toThrow(/roles\.relay/);
    expect(() => rolesSql({ roles: { relay: 'same', consumer: 'same' } })).toThrow(
      /"same" is given to two roles/,
    );
    expect(() => rolesSql({ roles: { relay: 'a$$b' } })).toThrow(/roles\.relay/);
    const long = 'a'.repeat(58);
    expect(() => rolesSql({ schema: long })).toThrow(/roles\.migrator.*too long for this schema/);
    expect(() => rolesSql({ schema: 'Bad' })).toThrow(/schema/);
  });
});

describe('rolesSql: the delivery history', () => {
  it('lets the relay insert history rows and run the partition functions; the operator read and maintain', () => {
    const { grants } = rolesSql();
    expect(grants).toContain('GRANT INSERT ON "outbox".deliveries TO "outbox_relay";');
    expect(grants).toContain('GRANT SELECT ON "outbox".deliveries TO "outbox_operator";');
    for (const role of ['outbox_relay', 'outbox_operator']) {
      expect(grants).toContain(
        `GRANT EXECUTE ON FUNCTION "outbox".history_add_partition(date) TO "${role}";`,
      );
    }
    // The producer runs only its own SECURITY INVOKER functions, none of the history's.
    expect(grants.filter((s) => s.includes('FUNCTION') && s.includes('outbox_producer'))).toEqual([
      'REVOKE ALL ON ALL FUNCTIONS IN SCHEMA "outbox" FROM "outbox_producer";',
      'GRANT EXECUTE ON FUNCTION "outbox".partition_of(text, text) TO "outbox_producer";',
      'GRANT EXECUTE ON FUNCTION "outbox".wal_key_missing() TO "outbox_producer";',
    ]);
  });
});

describe('rolesSql: what the pruner may delete', () => {
  const relayGrants = (grants: readonly string[]) =>
    grants.filter((g) => g.startsWith('GRANT') && g.endsWith('TO "outbox_relay";'));

  it("lets the relay delete the outbox's own rows only, unless told to prune the inbox or the audit trail", () => {
    const grants = relayGrants(rolesSql().grants);
    expect(grants).toContain(
      'GRANT SELECT, UPDATE (written_at), DELETE ON "outbox".aggregate_sequences TO "outbox_relay";',
    );
    expect(grants).toContain('GRANT SELECT, UPDATE ON "outbox".sequence_floor TO "outbox_relay";');
    expect(grants.filter((g) => /"outbox"\.(inbox\w*|audit) /.test(g))).toEqual([]);
  });

  it('with relayPrunes, grants the relay exactly the deletes of the tables named', () => {
    const audit = relayGrants(rolesSql({ relayPrunes: ['audit'] }).grants);
    expect(audit.filter((g) => /"outbox"\.(inbox\w*|audit) /.test(g))).toEqual([
      'GRANT SELECT, DELETE ON "outbox".audit TO "outbox_relay";',
    ]);
    const both = relayGrants(rolesSql({ relayPrunes: ['inbox', 'audit'] }).grants);
    expect(both.filter((g) => /"outbox"\.(inbox\w*|audit) /.test(g))).toEqual([
      'GRANT SELECT, DELETE ON "outbox".inbox TO "outbox_relay";',
      'GRANT SELECT, UPDATE (updated_at), DELETE ON "outbox".inbox_positions TO "outbox_relay";',
      'GRANT SELECT, UPDATE (last_at), DELETE ON "outbox".inbox_attempts TO "outbox_relay";',
      'GRANT SELECT, UPDATE (released_at), DELETE ON "outbox".inbox_quarantine TO "outbox_relay";',
      'GRANT SELECT, DELETE ON "outbox".audit TO "outbox_relay";',
    ]);
  });

  it('the operator prunes everything, whatever relayPrunes says', () => {
    for (const relayPrunes of [[], ['inbox', 'audit']] as const) {
      const operator = rolesSql({ relayPrunes }).grants.filter((g) => g.endsWith('TO "outbox_operator";'));
      expect(operator).toContain('GRANT SELECT, DELETE ON "outbox".audit TO "outbox_operator";');
      expect(operator).toContain(
        'GRANT SELECT, UPDATE (updated_at), DELETE ON "outbox".inbox_positions TO "outbox_operator";',
      );
    }
  });

  it('refuses a relayPrunes that names another table, naming the field', () => {
    expect(() => rolesSql({ relayPrunes: ['events'] as never })).toThrow(OutboxValidationError);
    expect(() => rolesSql({ relayPrunes: ['events'] as never })).toThrow(
      /^relayPrunes: \["events"\] is not a list of 'inbox' and 'audit'/,
    );
    expect(() => rolesSql({ relayPrunes: 'inbox' as never })).toThrow(/relayPrunes/);
  });
});

describe('tx-outbox roles --relay-prunes', () => {
  it('takes inbox, audit or both, comma-separated; refuses anything else naming the flag', () => {
    expect(relayPrunesFlag(undefined)).toEqual([]);
    expect(relayPrunesFlag('inbox')).toEqual(['inbox']);
    expect(relayPrunesFlag('inbox, audit')).toEqual(['inbox', 'audit']);
    expect(() => relayPrunesFlag('inbox,events')).toThrow(
      /^--relay-prunes "inbox,events": "events" is not a table the relay may prune; pass inbox, audit or inbox,audit$/,
    );
    expect(() => relayPrunesFlag(',')).toThrow(/names no table/);
  });
});
