/**
 * Issue 14, test 2 in WAL mode (`enqueue(…, { via: 'wal' })`, issue test 8): kill -9 of the streaming CDC relay (a child process)
 * mid-stream, a new relay started: no event lost, and every event delivered twice was
 * committed after the slot's confirmed LSN as read just before the kill. The scenario:
 * cdc-scenarios.ts.
 */
import { afterAll, beforeAll, describe, it } from 'vitest';
import { CdcFixture, survivesKill9 } from './cdc-scenarios.js';

describe('cdc failure: kill -9 of the streaming relay (wal mode)', () => {
  let fixture: CdcFixture;
  beforeAll(async () => {
    fixture = await CdcFixture.create('cdc_failures_walcrash');
  });
  afterAll(async () => {
    await fixture?.close();
  }, 60_000);

  it('loses nothing; duplicates only of events committed after the confirmed LSN', async () => {
    await survivesKill9(fixture, 'wal');
  }, 120_000);
});
