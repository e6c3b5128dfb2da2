/**
 * The relay contract (src/testing/relay-contract.ts) for the polling relay (`createRelay`), on a
 * private PostgreSQL (the `restart` case restarts it) and NATS JetStream.
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
    'polling',
    'polling',
    {
      via: 'table',
      fence:
        'every outcome statement is fenced by the partition epochs it claimed under; a takeover raises them',
    },
    server.url(),
    (mode) => server.restart(mode),
  ),
);
