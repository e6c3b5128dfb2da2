/**
 * The relay contract (src/testing/relay-contract.ts) for the CDC relay (`createCdcRelay`) with
 * table-mode producers (`enqueue`'s default INSERT), on a private PostgreSQL (the `restart` case
 * restarts it) and NATS JetStream.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { relayContract } from '../../src/testing/index.js';
import { PrivatePostgres } from '../helpers/private-postgres.js';
import { relaySubject } from './relay-subject.js';

const server = await PrivatePostgres.start();
afterAll(() => server.destroy(), 60_000);

relayContract(
  { describe, it, expect, beforeAll, afterAll, skip: it.skip },
  relaySubject(
    'cdc',
    'cdc (table mode)',
    {
      via: 'table',
      fence:
        'one streamer holds every partition; a standby takes them over with raised epochs and ends the old walsender, so the paused one’s deletes and hand-overs are fenced',
    },
    server.url(),
    (mode) => server.restart(mode),
  ),
);
