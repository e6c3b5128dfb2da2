import { describe, expect, it } from 'vitest';
import { OutboxValidationError } from '../../src/errors.js';
import { jsonTextProblem, MAX_JSON_DEPTH, payloadJsonOf } from '../../src/producer/payload.js';

class Money {
  constructor(
    readonly amount: number,
    readonly currency: string,
  ) {}
}

function deep(levels: number): unknown {
  let node: unknown = { leaf: 'x' };
  for (let i = 0; i < levels; i++) node = { child: node, list: [i] };
  return node;
}

const at = new Date('2026-12-01T10:00:00.000Z');

describe('payloadJsonOf: what it accepts, it writes exactly as JSON.stringify does', () => {
  const accepted: Array<[string, unknown]> = [
    ['plain data', { a: 1, b: 'x', c: [true, null, { d: -0.5 }], e: {} }],
    ['a Date (its toJSON)', { at }],
    ['an object with its own toJSON', { v: { toJSON: () => ({ kind: 'v' }) } }],
    ['a class instance with fields', { price: new Money(10, 'EUR') }],
    ['undefined properties (left out)', { a: undefined, b: 1 }],
    ['a null-prototype object', Object.assign(Object.create(null), { a: 1 })],
    ['boxed primitives', { n: Object(1), s: Object('x'), b: Object(true) }],
    ['unicode text and keys', { clé: 'été 😀 日本', emoji: '😀' }],
    ['text that only looks like escapes', { s: '\\u0000 and \\ud800' }],
    ['top-level strings, numbers, null', 'just text'],
    ['a number', 42],
    ['null', null],
    ['an empty array', []],
    ['other control characters (escaped by JSON)', { s: 'a\u0001\u001b[0m\n' }],
    ['plain data nested deeper than the quick walk goes', deep(100)],
    ['an array with its own toJSON', Object.assign([1, 2], { toJSON: () => 'two' })],
  ];
  for (const [what, value] of accepted) {
    it(what, () => {
      expect(payloadJsonOf(value, 'payload')).toBe(JSON.stringify(value));
    });
  }
});

describe('payloadJsonOf names the first value it refuses by its path', () => {
  const refused: Array<[unknown, string]> = [
    [{ a: { b: [0, 1, Number.NaN] } }, 'payload.a.b[2]'],
    [{ 'odd key': { x: new Map() } }, 'payload["odd key"].x'],
    [[{ ok: 1 }, { bad: 2n }], 'payload[1].bad'],
    [{ first: Number.NaN, second: new Set() }, 'payload.first'],
    [{ at: { toJSON: () => new Map() } }, 'payload.at'],
    [{ price: new Money(Number.NaN, 'EUR') }, 'payload.price.amount'],
    [new Array(3).fill(1, 0, 1), 'payload[1]'], // a hole
    // Reading the value throws: a clear refusal naming where, not the getter's bare error.
    [
      {
        ok: 1,
        get total(): number {
          throw new Error('not loaded');
        },
      },
      'payload.total',
    ],
    [
      {
        lines: [
          {
            get price(): number {
              throw new Error('lazy');
            },
          },
        ],
      },
      'payload.lines[0].price',
    ],
    [
      {
        p: new Proxy(
          { a: 1 },
          {
            get: () => {
              throw new Error('revoked');
            },
          },
        ),
      },
      'payload.p',
    ],
    [
      {
        p: new Proxy(
          {},
          {
            ownKeys: () => {
              throw new Error('no keys');
            },
          },
        ),
      },
      'payload.p',
    ],
  ];
  for (const [value, path] of refused) {
    it(path, () => {
      let error: unknown;
      try {
        payloadJsonOf(value, 'payload');
      } catch (e) {
        error = e;
      }
      expect(error).toBeInstanceOf(OutboxValidationError);
      expect((error as OutboxValidationError).field).toBe(path);
    });
  }
});

describe('nesting: at most MAX_JSON_DEPTH (1000) levels of arrays and objects, on both ends', () => {
  function nested(levels: number): unknown {
    let node: unknown = 1;
    for (let i = 0; i < levels; i++) node = i % 2 === 0 ? [node] : { a: node };
    return node;
  }

  it('enqueue takes 1000 levels and refuses 1001, naming the value too deep', () => {
    expect(MAX_JSON_DEPTH).toBe(1000);
    expect(payloadJsonOf(nested(1000), 'payload')).toBe(JSON.stringify(nested(1000)));
    let error: unknown;
    try {
      payloadJsonOf(nested(1001), 'payload');
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(OutboxValidationError);
    expect((error as OutboxValidationError).message).toMatch(/is nested more than 1000 levels deep/);
    expect((error as OutboxValidationError).field).toMatch(/^payload(\.a|\[0\]){1000}$/);
  });

  it('the relay reads JSON text with the same limit, brackets inside strings not counted', () => {
    expect(jsonTextProblem(JSON.stringify(nested(1000)))).toBeUndefined();
    expect(jsonTextProblem(JSON.stringify(nested(1001)))).toMatch(/nested more than 1000 levels deep/);
    expect(jsonTextProblem(`${'['.repeat(2_000_000)}${']'.repeat(2_000_000)}`)).toMatch(
      /nested more than 1000/,
    );
    const brackets = JSON.stringify({ s: `${'['.repeat(5000)}\\"{{{`, t: [[['x']]] });
    expect(jsonTextProblem(brackets)).toBeUndefined();
  });
});
