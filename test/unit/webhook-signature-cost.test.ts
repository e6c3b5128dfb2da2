/**
 * What a request padded with listed headers costs verifyWebhookEvent, counted rather than timed:
 * the headers are read through a proxy that counts property reads. An index built once reads each
 * header a bounded number of times; a scan per listed name (what made a padded replay hold the
 * event loop for ~146 ms) reads them a number of times that grows with the square of their count.
 */
import { describe, expect, it } from 'vitest';
import { signWebhookRequest, verifyWebhookEvent } from '../../src/publishers/webhook/signature.js';

const secret = 'whsec_' + Buffer.from('a test secret of the receiver').toString('base64');

function countingHeaders(record: Record<string, string>): {
  headers: Record<string, string>;
  reads: () => number;
} {
  let reads = 0;
  const headers = new Proxy(record, {
    get(target, name, receiver) {
      reads += 1;
      return Reflect.get(target, name, receiver);
    },
    ownKeys(target) {
      reads += Object.keys(target).length;
      return Reflect.ownKeys(target);
    },
  });
  return { headers, reads: () => reads };
}

describe('verifyWebhookEvent on a request padded with listed headers', () => {
  it('reads each header a bounded number of times, whatever their count', () => {
    const body = '{"n":1}';
    const signedRequest = signWebhookRequest({
      secret,
      id: 'evt-1',
      body,
      headers: { 'ce-id': 'evt-1', 'ce-type': 't', 'content-type': 'application/json' },
    });
    for (const count of [500, 2000]) {
      const names = Array.from({ length: count }, (_, i) => `h${i.toString(36)}`);
      const record: Record<string, string> = { ...signedRequest, 'txo-signed-headers': names.join(' ') };
      for (const name of names) record[name] = '';
      const { headers, reads } = countingHeaders(record);
      const verdict = verifyWebhookEvent({ secret, headers, body });
      expect(verdict.ok).toBe(false);
      // A linear index: a few reads per header. A scan per listed name: count² (4,000,000 at 2000).
      expect(reads()).toBeLessThan(10 * (count + 10));
    }
  });
});
