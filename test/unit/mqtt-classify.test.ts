import { describe, expect, it } from 'vitest';
import { BROKER_UNAVAILABLE, PublishError } from '../../src/errors.js';
import type { PublishOutcome } from '../../src/publishers/contract.js';
import {
  ackFailure,
  ackTimeout,
  connectionLost,
  notConnected,
  reasonName,
  refusal,
} from '../../src/publishers/mqtt/classify.js';

type Verdict = 'ok' | 'permanent' | 'retryable' | 'unavailable';

function verdict(outcome: PublishOutcome): Verdict {
  if (outcome.ok) return 'ok';
  expect(outcome.error).toBeInstanceOf(PublishError);
  if (!outcome.retryable) return 'permanent';
  return (outcome.error as PublishError).code === BROKER_UNAVAILABLE ? 'unavailable' : 'retryable';
}

function messageOf(outcome: PublishOutcome): string {
  if (outcome.ok) throw new Error('expected a failure');
  return outcome.error.message;
}

function coded(message: string, code: number | string): Error {
  return Object.assign(new Error(message), { code });
}

describe('MQTT verdicts', () => {
  it('PUBACK reason codes: permanent for not authorized, topic name invalid, packet too large, payload format invalid', () => {
    const codes = [0x80, 0x83, 0x87, 0x90, 0x91, 0x95, 0x97, 0x99];
    expect(codes.map((code) => verdict(refusal(code, 'a/b', undefined)))).toEqual([
      'retryable', // unspecified error
      'retryable', // implementation specific error
      'permanent', // not authorized
      'permanent', // topic name invalid
      'retryable', // packet identifier in use
      'permanent', // packet too large
      'retryable', // quota exceeded
      'permanent', // payload format invalid
    ]);
    expect(messageOf(refusal(0x87, 'a/b', undefined))).toBe(
      'The MQTT broker refused the publish to "a/b": reason 0x87 not authorized',
    );
  });

  it('names reason codes, known or not', () => {
    expect(reasonName(0x95)).toBe('0x95 packet too large');
    expect(reasonName(0x10)).toBe('0x10 no matching subscribers');
    expect(reasonName(0x05)).toMatch(/^0x05/);
    expect(reasonName(0xfe)).toBe('0xfe');
  });

  it('an error MQTT.js calls back with: a reason code is a refusal, anything else the client giving up (unavailable)', () => {
    expect(verdict(ackFailure(coded('refused', 0x90), 't', 'mqtt://h:1883'))).toBe('permanent');
    expect(verdict(ackFailure(coded('refused', 0x80), 't', 'mqtt://h:1883'))).toBe('retryable');
    const closed = ackFailure(new Error('Connection closed'), 't', 'mqtt://h:1883');
    expect(verdict(closed)).toBe('unavailable');
    expect(messageOf(closed)).toBe('Publish to "t" failed: Connection closed (mqtt://h:1883)');
    expect(verdict(ackFailure(coded('odd', 0x10), 't', 'x'))).toBe('unavailable');
    expect(verdict(ackFailure(coded('odd', 'ECONNRESET'), 't', 'x'))).toBe('unavailable');
  });

  it('a lost connection: unavailable, unless the server DISCONNECT blamed what was sent (retryable, charged)', () => {
    const plain = connectionLost('mqtt://h:1883', undefined, new Error('read ECONNRESET'))('a/b');
    expect(verdict(plain)).toBe('unavailable');
    expect(messageOf(plain)).toBe(
      'Publish to "a/b" lost its PUBACK: the connection to the MQTT broker (mqtt://h:1883) closed',
    );
    for (const code of [0x81, 0x82, 0x87, 0x90, 0x95, 0x99]) {
      const blamed = connectionLost('w', code, undefined)('a/b');
      expect(verdict(blamed)).toBe('retryable');
      expect(messageOf(blamed)).toMatch(new RegExp(`server DISCONNECT, reason ${reasonName(code)}`));
    }
    for (const code of [0x00, 0x80, 0x89, 0x8b, 0x97]) {
      expect(verdict(connectionLost('w', code, undefined)('a/b'))).toBe('unavailable');
    }
  });

  it('not connected: says why, and says so clearly when the broker refuses MQTT 5', () => {
    expect(messageOf(notConnected('w', 5, undefined))).toBe(
      'The MQTT broker is not available (w): not connected',
    );
    const refused = coded('connect ECONNREFUSED 127.0.0.1:1', 'ECONNREFUSED');
    expect(messageOf(notConnected('w', 5, refused))).toMatch(/not available \(w\): connect ECONNREFUSED/);
    for (const code of [0x84, 0x01]) {
      const outcome = notConnected('w', 5, coded('Connection refused', code));
      expect(verdict(outcome)).toBe('unavailable');
      expect(messageOf(outcome)).toMatch(/refuses MQTT 5.*protocolVersion: 4/);
      expect(messageOf(notConnected('w', 4, coded('Connection refused', code)))).not.toMatch(
        /refuses MQTT 5/,
      );
    }
  });

  it('a missing PUBACK: unavailable when nothing was heard since the send, else retryable', () => {
    const silent = ackTimeout(400, 'a/b', true);
    expect(verdict(silent)).toBe('unavailable');
    expect(messageOf(silent)).toMatch(/^Timed out after 400 ms waiting for the PUBACK of "a\/b".*in doubt$/);
    const answered = ackTimeout(400, 'a/b', false);
    expect(verdict(answered)).toBe('retryable');
    expect(messageOf(answered)).toBe('Timed out after 400 ms waiting for the PUBACK of "a/b"');
  });
});
