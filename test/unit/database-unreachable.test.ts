import { afterEach, describe, expect, it, vi } from 'vitest';
import { reportError } from '../../src/cli/common.js';
import { isRetryableDatabaseError } from '../../src/errors.js';

const withCode = (code: string, message = `connect ${code} 10.0.0.1:5432`): Error =>
  Object.assign(new Error(message), { code });

// These two lists predate the shared list of unreachable codes (src/network-errors.ts), which
// the publishers use; merging them changed what the CLI does and what a public function says.
describe('isRetryableDatabaseError (the codes it has always retried)', () => {
  it.each(['ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'ETIMEDOUT', 'ENOTFOUND', 'EAI_AGAIN'])(
    '%s: true',
    (code) => {
      expect(isRetryableDatabaseError(withCode(code))).toBe(true);
    },
  );

  // `tx-outbox relay` fails at once on these instead of waiting for the database.
  it.each(['EHOSTUNREACH', 'ENETUNREACH', 'UND_ERR_SOCKET', 'UND_ERR_CONNECT_TIMEOUT'])(
    '%s: false',
    (code) => {
      expect(isRetryableDatabaseError(withCode(code))).toBe(false);
    },
  );
});

describe('reportError: "cannot connect to the database" only for a failed connect', () => {
  afterEach(() => vi.restoreAllMocks());

  const reported = (error: unknown): string => {
    const lines: string[] = [];
    vi.spyOn(process.stderr, 'write').mockImplementation((chunk: string | Uint8Array) => {
      lines.push(String(chunk));
      return true;
    });
    expect(reportError(error, false)).toBe(1);
    return lines.join('');
  };

  it.each(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'ETIMEDOUT', 'EHOSTUNREACH'])('%s: said so', (code) => {
    expect(reported(withCode(code))).toBe(
      `tx-outbox: cannot connect to the database: connect ${code} 10.0.0.1:5432\n`,
    );
  });

  it.each(['ECONNRESET', 'EPIPE', 'ENETUNREACH', 'UND_ERR_SOCKET'])('%s: the message as it is', (code) => {
    expect(reported(withCode(code, `read ${code}`))).toBe(`tx-outbox: read ${code}\n`);
  });
});
