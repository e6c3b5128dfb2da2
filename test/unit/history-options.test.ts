import { describe, expect, it } from 'vitest';
import { OutboxValidationError } from '../../src/errors.js';
import { resolveHistory } from '../../src/relay/history.js';
import {
  outcomeStatement,
  RECORD_OUTCOME_HISTORY_PAYLOADS_SQL,
  RECORD_OUTCOME_HISTORY_SQL,
  RECORD_OUTCOME_SQL,
} from '../../src/relay/outcome-sql.js';

describe('history options', () => {
  it('is off unless asked; true takes the defaults', () => {
    expect(resolveHistory(undefined)).toBeUndefined();
    expect(resolveHistory(false)).toBeUndefined();
    expect(resolveHistory(true)).toEqual({
      retentionDays: 7,
      payloads: false,
      aheadDays: 3,
      maintenanceIntervalMs: 3_600_000,
    });
    expect(resolveHistory({ retentionDays: 30, payloads: true })).toMatchObject({
      retentionDays: 30,
      payloads: true,
    });
  });

  it('refuses bad values, naming the field', () => {
    expect(() => resolveHistory({ retentionDays: 0 })).toThrow(OutboxValidationError);
    expect(() => resolveHistory({ retentionDays: 1.5 })).toThrow(/history\.retentionDays/);
    expect(() => resolveHistory({ aheadDays: 61 })).toThrow(/history\.aheadDays/);
    expect(() => resolveHistory({ payloads: 'yes' as unknown as boolean })).toThrow(/history\.payloads/);
    expect(() => resolveHistory('on' as unknown as boolean)).toThrow(/^history:/);
  });
});

describe('outcome statement', () => {
  it('without history is the statement as it was, under its own name; with history a variant of its own', () => {
    expect(outcomeStatement(undefined)).toEqual(['outcome', RECORD_OUTCOME_SQL]);
    expect(RECORD_OUTCOME_SQL).not.toMatch(/deliveries|\$9/);
    expect(outcomeStatement({ payloads: false })).toEqual(['outcome_history', RECORD_OUTCOME_HISTORY_SQL]);
    expect(outcomeStatement({ payloads: true })).toEqual([
      'outcome_history_payloads',
      RECORD_OUTCOME_HISTORY_PAYLOADS_SQL,
    ]);
    expect(RECORD_OUTCOME_HISTORY_SQL).toMatch(/INSERT INTO \{\{schema\}\}\.deliveries/);
    expect(RECORD_OUTCOME_HISTORY_SQL).not.toMatch(/payload/);
    expect(RECORD_OUTCOME_HISTORY_PAYLOADS_SQL).toMatch(/payload, payload_bytes\n {2}FROM delivered/);
  });
});
