import { type MsgHdrs, MsgHdrsImpl } from '@nats-io/transport-node';
import { describe, expect, it, vi } from 'vitest';
import { envelopeHeaders } from '../../src/envelope/bindings.js';
import { percentEncode } from '../../src/envelope/percent.js';
import {
  BROKER_UNAVAILABLE,
  isBrokerUnavailable,
  OutboxValidationError,
  PublishError,
} from '../../src/errors.js';
import { fromEnvelope } from '../../src/inbox/message.js';
import type { OutboxMessage, PublishOutcome } from '../../src/publishers/contract.js';
import { CallAbort } from '../../src/publishers/core/call-abort.js';
import {
  abortedAs,
  apiErrorCode,
  apiRefusal,
  asUnavailable,
  classify,
  isNoResponders,
} from '../../src/publishers/nats/classify.js';
import { resolveNatsOptions } from '../../src/publishers/nats/options.js';
import { pubAckOutcome, replySubject, replyToken } from '../../src/publishers/nats/puback.js';
import {
  buildHeaders,
  type ClientItem,
  encodeHeaders,
  HeaderBlocks,
  type PipelineItem,
  type Prepared,
  payloadProblem,
  prepareMessage,
  subjectProblem,
} from '../../src/publishers/nats/wire.js';
import { AWKWARD_IDS } from '../../src/testing/envelopes.js';
import { makeMessage } from '../helpers/messages.js';

const URL = 'nats://127.0.0.1:4222';
const bytes = (text: string): Uint8Array => new TextEncoder().encode(text);

function named(name: string, message: string, extra: object = {}): Error {
  const error = new Error(message);
  error.name = name;
  return Object.assign(error, extra);
}

function failure(outcome: PublishOutcome | Prepared): PublishError {
  if (!('ok' in outcome) || outcome.ok)
    throw new Error(`expected a failed outcome, got ${JSON.stringify(outcome)}`);
  return outcome.error as PublishError;
}

describe('resolveNatsOptions', () => {
  it('applies the defaults into a frozen object and names the servers without secrets', () => {
    const resolved = resolveNatsOptions({ url: ['nats://u:secret@h1:4222', 'nats://h2:4222'] });
    expect(Object.isFrozen(resolved)).toBe(true);
    expect(resolved).toMatchObject({
      timeoutMs: 10_000,
      maxInFlight: 1024,
      dedupWindowMs: 120_000,
      source: 'tx-outbox',
      pipelined: true,
      stream: undefined,
    });
    expect(resolved.where).not.toContain('secret');
    expect(resolved.where).toContain('h1:4222');
    expect(resolved.where).toContain(', ');
    expect(resolved.destination(makeMessage({ topic: null, aggregateType: 'order', type: 'paid' }))).toBe(
      'order.paid',
    );
    const client = {} as never;
    expect(resolveNatsOptions({ url: URL, ceSource: 'https://orders.example.com' }).source).toBe(
      'https://orders.example.com',
    );
    expect(resolveNatsOptions({ client, mode: 'client' })).toMatchObject({
      where: 'the given connection',
      pipelined: false,
    });
  });

  it('names the option and the fix in every refusal', () => {
    const client = {} as never;
    const cases: Array<[Parameters<typeof resolveNatsOptions>[0], RegExp]> = [
      [{}, /^url: is missing\. Give `url` \(URL or URLs\) or a `client`$/],
      [{ url: [] }, /^url: is missing/],
      [{ url: URL, client }, /^client: was given together with `url`\. Give only one of them$/],
      [
        { url: URL, streamSubjects: ['a.>'] },
        /^stream: is missing\. Name the stream that `streamSubjects` describe$/,
      ],
      [{ url: URL, stream: 'S', streamSubjects: [] }, /^streamSubjects: is empty/],
      [{ url: URL, timeoutMs: -1 }, /^timeoutMs: must be a positive integer, got -1/],
      [{ url: URL, maxInFlight: 0 }, /^maxInFlight: must be a positive integer, got 0/],
      [{ url: URL, dedupWindowMs: 1.5 }, /^dedupWindowMs: /],
      [{ url: URL, mode: 'fast' as never }, /^mode: must be 'pipeline' or 'client', got fast/],
      [{ url: URL, ceSource: 'orders service' }, /^ceSource: has " " at index 6, which a URI cannot hold/],
      [{ url: URL, ceSource: '' }, /^ceSource: is empty/],
    ];
    for (const [options, message] of cases) {
      expect(() => resolveNatsOptions(options)).toThrow(OutboxValidationError);
      expect(() => resolveNatsOptions(options)).toThrow(message);
    }
  });

  it('reads the old spellings as the new names, warning once each, and refuses both', () => {
    const warn = vi.spyOn(process, 'emitWarning').mockImplementation(() => undefined);
    try {
      const route = (): string => 'a.b';
      const clientOptions = { name: 'x' };
      const resolved = resolveNatsOptions({ servers: URL, connectionOptions: clientOptions, subject: route });
      expect(resolved.url).toBe(URL);
      expect(resolved.clientOptions).toBe(clientOptions);
      expect(resolved.destination).toBe(route);
      const client = {} as never;
      expect(resolveNatsOptions({ connection: client }).client).toBe(client);
      resolveNatsOptions({ servers: URL, subject: route });
      const old = resolveNatsOptions({ url: URL, duplicateWindowMs: 30_000, source: 'urn:example:orders' });
      expect(old).toMatchObject({ dedupWindowMs: 30_000, source: 'urn:example:orders' });
      expect(resolveNatsOptions({ url: URL, dedupWindowMs: 30_000 }).dedupWindowMs).toBe(30_000);
      expect(warn.mock.calls.map(([text]) => String(text).split(' (')[0])).toEqual([
        'natsPublisher: option `servers` is deprecated, use `url`',
        'natsPublisher: option `connectionOptions` is deprecated, use `clientOptions`',
        'natsPublisher: option `subject` is deprecated, use `destination`',
        'natsPublisher: option `connection` is deprecated, use `client`',
        'natsPublisher: option `duplicateWindowMs` is deprecated, use `dedupWindowMs`',
        'natsPublisher: option `source` is deprecated, use `ceSource`',
      ]);
      expect(() => resolveNatsOptions({ url: URL, duplicateWindowMs: 1, dedupWindowMs: 1 })).toThrow(
        /^duplicateWindowMs: is the deprecated spelling of `dedupWindowMs`, which is given too/,
      );
      expect(() => resolveNatsOptions({ url: URL, source: '' })).toThrow(/^source: is empty/);
      expect(() => resolveNatsOptions({ servers: URL, url: URL })).toThrow(
        /^servers: is the deprecated spelling of `url`, which is given too/,
      );
    } finally {
      warn.mockRestore();
    }
  });
});

describe('NATS wire rules', () => {
  it('finds what NATS refuses in a subject', () => {
    expect(subjectProblem('orders.created')).toBeUndefined();
    expect(subjectProblem('')).toBe('is empty');
    expect(subjectProblem('a b')).toBe('contains whitespace');
    expect(subjectProblem('a..b')).toBe('has an empty token (leading, trailing or double dot)');
    expect(subjectProblem('.a')).toBe('has an empty token (leading, trailing or double dot)');
    expect(subjectProblem('a.*')).toBe('contains a wildcard token (* or >)');
    expect(subjectProblem('a.>')).toBe('contains a wildcard token (* or >)');
    expect(subjectProblem('a.b*')).toBeUndefined();
  });

  it('refuses a payload over max_payload only when the server said it', () => {
    expect(payloadProblem(10, 's', undefined)).toBeUndefined();
    expect(payloadProblem(10, 's', 10)).toBeUndefined();
    const over = failure(payloadProblem(11, 's', 10)!);
    expect(over.message).toBe(
      `Payload of 11 bytes for subject "s" exceeds the server's max_payload of 10 bytes`,
    );
    expect(over.retryable).toBe(false);
  });

  it('encodes the header block: envelope, then Nats-Msg-Id and the expected stream (ours win)', () => {
    const block = encodeHeaders({ a: 'x', 'Nats-Msg-Id': 'forged', b: 'in ner', c: '', d: 'é' }, 'e1', 'S');
    expect(Buffer.from(block).toString()).toBe(
      'NATS/1.0\r\na: x\r\nb: in ner\r\nc: \r\nd: é\r\nNats-Msg-Id: e1\r\nNats-Expected-Stream: S\r\n\r\n',
    );
    expect(Buffer.from(encodeHeaders({}, 'e2', undefined)).toString()).toBe(
      'NATS/1.0\r\nNats-Msg-Id: e2\r\n\r\n',
    );
    expect(() => encodeHeaders({ 'bad:name': 'v' }, 'e', undefined)).toThrow(/not a valid character/);
    expect(() => encodeHeaders({ ok: 'line\nbreak' }, 'e', undefined)).toThrow(
      /^header ok: .*cannot contain/,
    );
  });

  it('refuses, in both modes, a header value NATS clients would trim instead of trimming it', () => {
    // nats.js trims with String.prototype.trim when it sets and when it reads a header.
    for (const value of ['  padded ', ' lead', 'trail ', '\u00a0nbsp', 'bom\ufeff', 'tab\t']) {
      const why = /^header x-note: its value starts or ends with whitespace, which NATS clients trim/;
      expect(() => encodeHeaders({ 'x-note': value }, 'e', undefined)).toThrow(why);
      expect(() => buildHeaders({ 'x-note': value })).toThrow(why);
    }
    expect(buildHeaders({ 'x-note': 'in ner', e: '' }).get('x-note')).toBe('in ner');
  });

  it('sends the same headers in both modes: envelopeHeaders(message, source, nats), every awkward id exact', () => {
    const rule = { destination: () => 'a.b', source: 'urn:x:y', stream: 'S' };
    for (const aggregateId of AWKWARD_IDS) {
      const message = makeMessage({
        aggregateId,
        sequence: 42,
        type: 'order.created/"v2"',
        headers: { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' },
      });
      const envelope = envelopeHeaders(message, 'urn:x:y', 'nats');
      const lean = prepareMessage(message, { ...rule, pipelined: true }) as PipelineItem;
      const decoded = MsgHdrsImpl.decode(lean.headers); // as the receiving client reads it
      const client = (prepareMessage(message, { ...rule, pipelined: false }) as ClientItem).headers;
      const record = (h: MsgHdrs) => Object.fromEntries([...h].map(([name, [value]]) => [name, value]));
      expect(record(decoded)).toEqual({
        ...envelope,
        'Nats-Msg-Id': message.eventId,
        'Nats-Expected-Stream': 'S',
      });
      expect(record(client)).toEqual(envelope);
      expect(envelope['ce-aggregateid']).toBe(percentEncode(aggregateId));
      expect(envelope['ce-datacontenttype']).toBe('application/json');
      expect(envelope['ce-sequence']).toBe('0000000000000000042');
      expect(fromEnvelope(record(decoded), message.payload)).toMatchObject({ aggregateId, sequence: 42 });
    }
  });

  it('writes header blocks byte for byte as the generic path does, and refuses what it refuses', () => {
    /** The generic path: the envelope as a record, then the encoded block (or the error it throws). */
    const generic = (m: OutboxMessage, source: string, stream: string | undefined): string => {
      try {
        return Buffer.from(encodeHeaders(envelopeHeaders(m, source, 'nats'), m.eventId, stream)).toString(
          'hex',
        );
      } catch (error) {
        return `threw ${(error as Error).name}: ${(error as Error).message}`;
      }
    };
    const fast = (blocks: HeaderBlocks, m: OutboxMessage): string => {
      try {
        return Buffer.from(blocks.encode(m)).toString('hex');
      } catch (error) {
        return `threw ${(error as Error).name}: ${(error as Error).message}`;
      }
    };
    const ownHeaders: Record<string, string>[] = [
      {},
      { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01', tracestate: 'a=b' },
      { 'x-tenant': 'é 日本', '2': 'two', '10': 'ten', z: '' },
      { 'ce-id': 'forged', 'x-a': '1' }, // an envelope name: replaced in place
      { 'ce-sequencebase': '7' }, // kept when the message has no base
      { 'Nats-Msg-Id': 'forged', 'Nats-Expected-Stream': 'OTHER', after: 'x' }, // ours win
      JSON.parse('{"__proto__":"p","x":"y"}') as Record<string, string>,
      { 'bad:name': 'v' },
      { 'x y': 'v' },
      { ok: 'line\nbreak' },
      { pad: ' lead' },
      { n: 5 as unknown as string },
    ];
    const messages: OutboxMessage[] = [];
    for (const headers of ownHeaders) {
      for (const aggregateId of [...AWKWARD_IDS, 'o-1', 'lone\ud800surrogate']) {
        messages.push(makeMessage({ aggregateId, headers, sequence: 42 }));
      }
      messages.push(
        makeMessage({
          headers,
          sequence: 2 ** 53 - 1,
          sequenceBase: 40,
          type: 'order.created/"v2" 50%',
          aggregateType: 'Ordér',
          contentType: 'application/octet-stream',
          schemaVersion: 12,
          eventId: 'not a uuid',
        }),
        makeMessage({ headers, sequenceBase: 0, eventId: 'id\r\n' }),
        makeMessage({ headers, type: 'bad\udfff', createdAt: new Date(Number.NaN) }),
      );
    }
    const rules: [string, string | undefined][] = [
      ['tx-outbox', 'S'],
      ['urn:x:y', undefined],
      ['https://orders.example.com/a b%', 'STREAM_1'],
      ['lone\ud800', 'S'],
      ['src', ' padded'],
    ];
    let compared = 0;
    for (const [source, stream] of rules) {
      const blocks = new HeaderBlocks(source, stream);
      for (const message of messages) {
        expect(fast(blocks, message), JSON.stringify({ source, stream, ...message })).toBe(
          generic(message, source, stream),
        );
        compared += 1;
      }
    }
    expect(compared).toBeGreaterThan(1000);
    // Blocks share slabs: each stays as written while later ones are (the client copies them later).
    const blocks = new HeaderBlocks('tx-outbox', 'S');
    const many = Array.from({ length: 3000 }, (_, i) =>
      makeMessage({ sequence: i + 1, headers: i % 7 === 0 ? { 'x-note': 'é'.repeat(i % 50) } : {} }),
    );
    const views = many.map((m) => blocks.encode(m));
    for (const [i, view] of views.entries()) {
      expect(Buffer.from(view).toString('hex')).toBe(generic(many[i]!, 'tx-outbox', 'S'));
    }
  });

  it('prepares a message for either mode, or gives its permanent outcome', () => {
    const rule = { destination: (m: { topic: string | null }) => m.topic ?? '', source: 'src', stream: 'S' };
    const message = makeMessage({ topic: 'orders.created', headers: { traceparent: 't' } });
    const lean = prepareMessage(message, { ...rule, pipelined: true }) as PipelineItem;
    expect(lean.subject).toBe('orders.created');
    expect(lean.payload).toBe(message.payload);
    const text = Buffer.from(lean.headers).toString();
    expect(text).toContain(`\r\nNats-Msg-Id: ${message.eventId}\r\nNats-Expected-Stream: S\r\n\r\n`);
    expect(text).toContain('\r\nce-source: src\r\n');
    const client = prepareMessage(message, { ...rule, pipelined: false }) as ClientItem;
    expect(client.eventId).toBe(message.eventId);
    expect(client.headers.get('traceparent')).toBe('t');
    expect(client.headers.get('Nats-Msg-Id')).toBe('');

    const bad = failure(prepareMessage(makeMessage({ topic: 'a..b' }), { ...rule, pipelined: true }));
    expect(bad.retryable).toBe(false);
    expect(bad.message).toMatch(/^NATS rejects subject "a\.\.b" \(event .+\): it has an empty token/);
    const threw = failure(
      prepareMessage(message, {
        ...rule,
        pipelined: true,
        destination: () => {
          throw new Error('no route');
        },
      }),
    );
    expect(threw.message).toBe(`The subject function threw for event ${message.eventId}: no route`);
    const header = failure(
      prepareMessage(makeMessage({ topic: 'a.b', headers: { 'x y': 'v' } }), { ...rule, pipelined: true }),
    );
    expect(header.message).toMatch(/^Invalid header for subject "a\.b": /);
  });
});

describe('NATS PubAck replies', () => {
  it('maps reply subjects to tokens and back', () => {
    for (const token of [0, 35, 36, 123_456, 0x3fffffff]) {
      const subject = replySubject('_INBOX.abc.', token);
      expect(replyToken(subject, '_INBOX.abc.'.length)).toBe(token);
    }
    expect(replyToken('_INBOX.abc.', '_INBOX.abc.'.length)).toBe(-1);
    expect(replyToken('_INBOX.abc.A1', '_INBOX.abc.'.length)).toBe(-1);
  });

  it('reads a PubAck, a refusal, an empty or a foreign reply', () => {
    const reply = (text: string, status?: string) => ({
      data: bytes(text),
      headers: status === undefined ? undefined : ({ status } as never),
    });
    expect(pubAckOutcome(reply('{"stream":"S","seq":7}'), 's')).toEqual({ ok: true });
    expect(pubAckOutcome(reply('{"stream":"S","seq":7,"duplicate":true}'), 's')).toEqual({ ok: true });
    expect(pubAckOutcome(reply('{"seq":7,"stream":"S"}'), 's')).toEqual({ ok: true });
    const wrongStream = failure(
      pubAckOutcome(
        reply(
          '{"stream":"","error":{"code":400,"err_code":10060,"description":"expected stream does not match"}}',
        ),
        's',
      ),
    );
    expect(wrongStream.retryable).toBe(false);
    expect(wrongStream.message).toBe(
      'JetStream refused subject "s": the subject is not captured by the expected stream (expected stream does not match)',
    );
    const other = failure(pubAckOutcome(reply('{"error":{"code":500}}'), 's'));
    expect(other.retryable).toBe(true);
    expect(other.message).toBe('Publish to "s" failed: error 500');
    expect(failure(pubAckOutcome(reply('', '408'), 's')).message).toBe(
      'Publish to "s" got an empty reply (408)',
    );
    expect(failure(pubAckOutcome(reply('not json'), 's')).message).toMatch(
      /got a reply that is not a PubAck: /,
    );
    expect(failure(pubAckOutcome(reply('{"seq":1}'), 's')).message).toBe(
      'Publish to "s" got a reply that is not a PubAck',
    );
  });
});

describe('NATS classification', () => {
  it('sorts client errors into permanent, unavailable and retryable', () => {
    const api = named('JetStreamApiError', 'max msg size', { apiError: {}, code: 10054 });
    expect(apiErrorCode(api)).toBe(10054);
    expect(apiErrorCode(new Error('x'))).toBeUndefined();
    const tooBig = classify(api, 's', 100);
    expect(tooBig.retryable).toBe(false);
    expect(tooBig.message).toBe(
      `JetStream refused subject "s": the message exceeds the stream's max_msg_size (max msg size)`,
    );
    expect(classify(named('InvalidSubjectError', 'bad'), 's', 100)).toMatchObject({ retryable: false });
    expect(classify(named('InvalidArgumentError', 'exceeds max_payload'), 's', 100).retryable).toBe(false);
    const timeout = classify(named('TimeoutError', 'timeout'), 's', 100);
    expect(timeout.message).toBe('Timed out after 100 ms waiting for the PubAck of "s"');
    expect(isBrokerUnavailable(timeout)).toBe(false);
    const noResponders = classify(named('NoResponders', 'no responders'), 's', 100);
    expect(isNoResponders(named('JetStreamNotEnabled', 'x'))).toBe(true);
    expect(noResponders.code).toBe(BROKER_UNAVAILABLE);
    expect(classify(named('AbortError', 'Aborted: stop'), 's', 100).message).toBe(
      'Publish to "s" aborted before its PubAck arrived',
    );
    expect(classify(named('ClosedConnectionError', 'closed'), 's', 100).code).toBe(BROKER_UNAVAILABLE);
    expect(classify(new Error('connection refused'), 's', 100).code).toBe(BROKER_UNAVAILABLE);
    const other = classify(new Error('odd'), 's', 100);
    expect(other).toMatchObject({ retryable: true, message: 'Publish to "s" failed: odd' });
    expect(other.code).not.toBe(BROKER_UNAVAILABLE);
    expect(apiRefusal('s', 10060, 'd').retryable).toBe(false);
    expect(apiRefusal('s', 10071, 'd').retryable).toBe(true);
  });

  it('re-labels a retryable failure as unavailable after a disconnect, and nothing else', () => {
    const retryable: PublishOutcome = {
      ok: false,
      error: new PublishError('late', { retryable: true }),
      retryable: true,
    };
    const relabelled = failure(asUnavailable(retryable));
    expect(relabelled.message).toBe('late (the connection to NATS dropped)');
    expect(relabelled.code).toBe(BROKER_UNAVAILABLE);
    const permanent: PublishOutcome = {
      ok: false,
      error: new PublishError('bad', { retryable: false }),
      retryable: false,
    };
    expect(asUnavailable(permanent)).toBe(permanent);
    expect(asUnavailable({ ok: true })).toEqual({ ok: true });
  });

  it('reads the caller abort as an AbortError, whatever its reason, and leaves other errors alone', () => {
    const caller = new AbortController();
    const abort = new CallAbort({ signal: caller.signal });
    const other = new Error('other');
    expect(abortedAs(abort, other)).toBe(other);
    const reason = named('TimeoutError', 'relay publish deadline');
    caller.abort(reason);
    const read = abortedAs(abort, reason) as Error;
    expect(read.name).toBe('AbortError');
    expect(read.message).toBe('Aborted: relay publish deadline');
    expect(read.cause).toBe(reason);
    expect(classify(read, 's', 100).message).toBe('Publish to "s" aborted before its PubAck arrived');
    expect(abortedAs(abort, other)).toBe(other);
    abort.dispose();
  });
});
