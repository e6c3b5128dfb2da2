import { describe, expect, it } from 'vitest';
import { deadFilterOf, parseSince } from '../../src/cli/dead-filter.js';
import { defaultDestination } from '../../src/publishers/core/destination.js';
import { defaultTopic } from '../../src/publishers/mqtt/topic.js';
import { routerPublisher } from '../../src/publishers/router.js';
import { routedType, SKIPPED_EVENT_TYPE, skipMarkerOf } from '../../src/skip-marker.js';
import { RecordingPublisher } from '../helpers/memory-publisher.js';
import { makeMessage } from '../helpers/messages.js';

const never = new AbortController().signal;

function skipMarker(skippedType: string, topic: string | null = null) {
  return makeMessage({
    type: SKIPPED_EVENT_TYPE,
    aggregateType: 'order',
    topic,
    payload: Buffer.from(
      JSON.stringify({
        skippedType,
        skippedSchemaVersion: 2,
        reason: 'r',
        actor: 'a',
        at: '2026-12-01T00:00:00Z',
      }),
    ),
  });
}

describe('skip marker', () => {
  it('reads its payload; anything else is not a marker', () => {
    expect(skipMarkerOf(skipMarker('order.placed').payload)).toEqual({
      skippedType: 'order.placed',
      skippedSchemaVersion: 2,
      reason: 'r',
      actor: 'a',
      at: '2026-12-01T00:00:00Z',
    });
    expect(skipMarkerOf(Buffer.from('not json'))).toBeUndefined();
    expect(skipMarkerOf(Buffer.from('{"skippedType":""}'))).toBeUndefined();
    expect(skipMarkerOf(Buffer.from('null'))).toBeUndefined();
  });

  it('goes where the skipped event would have gone: default destination, MQTT topic, router rules', async () => {
    const m = skipMarker('order.placed');
    expect(routedType(m)).toBe('order.placed');
    expect(defaultDestination(m)).toBe('order.order.placed');
    expect(defaultTopic(m)).toBe('order/order/placed');
    // An explicit topic stays the event's own.
    expect(defaultDestination(skipMarker('order.placed', 'orders'))).toBe('orders');
    // An ordinary event of another type, or a marker without a readable payload, keeps its own type.
    expect(routedType(makeMessage({ type: 'x', payload: m.payload }))).toBe('x');
    expect(routedType(makeMessage({ type: SKIPPED_EVENT_TYPE, payload: Buffer.from('?') }))).toBe(
      SKIPPED_EVENT_TYPE,
    );

    const orders = new RecordingPublisher();
    const router = routerPublisher({ routes: [{ match: { type: 'order.*' }, publisher: orders }] });
    expect(await router.publish([m], never)).toEqual([{ ok: true }]);
    expect(orders.received.map((r) => r.eventId)).toEqual([m.eventId]);
  });
});

describe('dead filter flags', () => {
  const now = new Date('2026-12-01T12:00:00Z');

  it('--since takes an ISO time or a duration back from now', () => {
    expect(parseSince('2h', now)).toEqual(new Date('2026-12-01T10:00:00Z'));
    expect(parseSince('30m', now)).toEqual(new Date('2026-12-01T11:30:00Z'));
    expect(parseSince('7d', now)).toEqual(new Date('2026-11-24T12:00:00Z'));
    expect(parseSince('2026-11-30T09:15Z', now)).toEqual(new Date('2026-11-30T09:15:00Z'));
    expect(parseSince('2026-11-30', now)).toEqual(new Date('2026-11-30T00:00:00Z'));
    for (const bad of ['yesterday', '2h ago', '-2h', '2026-13-45', '', '1w']) {
      expect(() => parseSince(bad, now), bad).toThrow(/--since/);
    }
  });

  it('--aggregate splits at the first slash; conflicts and empty values are usage errors', () => {
    expect(deadFilterOf({ aggregate: 'order/42/a' }, now)).toEqual({
      aggregateType: 'order',
      aggregateId: '42/a',
    });
    expect(deadFilterOf({ aggregateType: 'a/b', aggregateId: '1', type: 't', since: '1h' }, now)).toEqual({
      aggregateType: 'a/b',
      aggregateId: '1',
      type: 't',
      since: new Date('2026-12-01T11:00:00Z'),
    });
    expect(deadFilterOf({}, now)).toEqual({});
    for (const aggregate of ['order', '/42', 'order/']) {
      expect(() => deadFilterOf({ aggregate }, now), aggregate).toThrow(/--aggregate needs <type>\/<id>/);
    }
    expect(() => deadFilterOf({ aggregate: 'o/1', aggregateId: '2' }, now)).toThrow(/not both/);
    expect(() => deadFilterOf({ type: '' }, now)).toThrow(/--type needs a value/);
  });
});
