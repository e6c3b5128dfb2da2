/**
 * PostgreSQL's `$n` parameters, rewritten for Knex's `raw(sql, bindings)` (used by the Knex and the
 * MikroORM adapters: MikroORM's SQL drivers run on Knex).
 *
 * Knex numbers every unescaped `?` itself (`$1`, `$2` … in order) and takes `??` as an identifier
 * binding; it leaves `$n` alone. Rewriting each `$n` as a `?` of its own would split a parameter
 * used several times (`$2` three times) into several, each with its type inferred on its own, and
 * PostgreSQL would type some of them `text` where the first use said `bigint`. So parameters are
 * renumbered by first use: the first use of each becomes the `?` Knex numbers `$k`, its later uses
 * the literal `$k`, and the bindings are the values in first-use order. A literal `?` (the jsonb
 * operators, or one in a string) is escaped `\?`, which Knex sends as `?`. String literals, quoted
 * identifiers, dollar-quoted bodies and comments are copied as they are (but for that escape):
 * a `$1` inside them is not a parameter.
 */

export interface KnexRaw {
  readonly sql: string;
  readonly bindings: unknown[];
}

interface Rewritten {
  readonly sql: string;
  /** For each `?` in `sql`, in order: the index into the original values. */
  readonly order: readonly number[];
}

const cache = new Map<string, Rewritten>();
const CACHE_LIMIT = 256;

/** `text` with `$n` parameters as Knex's `raw` takes it, and the bindings to pass with it. */
export function toKnexRaw(text: string, values: readonly unknown[]): KnexRaw {
  let rewritten = cache.get(text);
  if (rewritten === undefined) {
    rewritten = rewrite(text);
    if (cache.size >= CACHE_LIMIT) cache.clear();
    cache.set(text, rewritten);
  }
  const bindings = rewritten.order.map((i) => {
    if (i >= values.length) {
      throw new RangeError(`the statement uses $${i + 1} but only ${values.length} values were given`);
    }
    return values[i];
  });
  return { sql: rewritten.sql, bindings };
}

const IDENT = /[A-Za-z0-9_$\u0080-\uffff]/;
const DOLLAR_TAG = /^\$([A-Za-z_\u0080-\uffff][A-Za-z0-9_\u0080-\uffff]*)?\$/;

function rewrite(text: string): Rewritten {
  let out = '';
  const order: number[] = [];
  const renumbered = new Map<number, number>();
  /** Copies `text[from, to)` (a literal, comment or quoted part), escaping its `?`. */
  const copy = (from: number, to: number) => {
    for (let j = from; j < to; j++) {
      const c = text[j]!;
      if (c === '?') escapeQuestionMark(text, j);
      out += c === '?' ? '\\?' : c;
    }
  };

  let i = 0;
  while (i < text.length) {
    const c = text[i]!;
    const next = text[i + 1];
    const before = i > 0 ? text[i - 1]! : '';
    if (c === "'") {
      const backslashes = (before === 'E' || before === 'e') && !IDENT.test(text[i - 2] ?? '');
      const end = endOfQuoted(text, i, "'", backslashes);
      copy(i, end);
      i = end;
    } else if (c === '"') {
      const end = endOfQuoted(text, i, '"', false);
      copy(i, end);
      i = end;
    } else if (c === '-' && next === '-') {
      const newline = text.indexOf('\n', i);
      const end = newline === -1 ? text.length : newline;
      copy(i, end);
      i = end;
    } else if (c === '/' && next === '*') {
      const end = endOfBlockComment(text, i);
      copy(i, end);
      i = end;
    } else if (c === '$' && !IDENT.test(before)) {
      const digits = /^\$([0-9]+)/.exec(text.slice(i, i + 12));
      if (digits) {
        const n = Number(digits[1]) - 1;
        const k = renumbered.get(n);
        if (k === undefined) {
          renumbered.set(n, order.length);
          order.push(n);
          // `??` and `\??` mean something else to Knex: keep a `?` right before apart.
          if (out.endsWith('?')) out += ' ';
          out += '?';
        } else {
          out += `$${k + 1}`;
        }
        i += digits[0].length;
        continue;
      }
      const tag = DOLLAR_TAG.exec(text.slice(i, i + 66));
      if (tag) {
        const close = text.indexOf(tag[0], i + tag[0].length);
        const end = close === -1 ? text.length : close + tag[0].length;
        copy(i, end);
        i = end;
      } else {
        out += c;
        i += 1;
      }
    } else {
      copy(i, i + 1);
      i += 1;
    }
  }
  return { sql: out, order };
}

/** Knex reads `\?` as an escaped `?` and drops the backslash: a `\` before a `?` cannot pass. */
function escapeQuestionMark(text: string, at: number): void {
  if (at > 0 && text[at - 1] === '\\') {
    throw new RangeError(
      `a '?' right after a backslash (at character ${at}) cannot pass through Knex's raw(): ` +
        'write the text with chr(63), or as a parameter',
    );
  }
}

function endOfQuoted(text: string, start: number, quote: string, backslashes: boolean): number {
  let j = start + 1;
  while (j < text.length) {
    const c = text[j]!;
    if (backslashes && c === '\\') {
      j += 2;
    } else if (c === quote) {
      if (text[j + 1] === quote) j += 2;
      else return j + 1;
    } else {
      j += 1;
    }
  }
  return text.length;
}

function endOfBlockComment(text: string, start: number): number {
  let depth = 0;
  let j = start;
  while (j < text.length) {
    if (text[j] === '/' && text[j + 1] === '*') {
      depth += 1;
      j += 2;
    } else if (text[j] === '*' && text[j + 1] === '/') {
      depth -= 1;
      j += 2;
      if (depth === 0) return j;
    } else {
      j += 1;
    }
  }
  return text.length;
}
