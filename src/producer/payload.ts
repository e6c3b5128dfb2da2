/**
 * Payload serialisation. A payload is stored as bytes (a Uint8Array or Buffer) or as JSON, and
 * JSON only when `JSON.stringify` writes it faithfully: a value it would drop, null or empty
 * (NaN, a Map, an ArrayBuffer …) is refused instead of stored with data lost. The producer's hot
 * path takes a cheap walk over plain data (no messages, no allocation) and then the one plain
 * `JSON.stringify`; anything else (class instances, `toJSON`, a refusal) takes the exact walk,
 * which also names the path (`events[3].payload.lines[2].price`).
 */
import { OutboxValidationError } from '../errors.js';
import { unstorableProblem } from './text.js';

const FIX = 'Pass plain data (objects, arrays, strings, finite numbers, booleans, null) or bytes.';

/**
 * The deepest nesting of arrays and objects a JSON payload may have (`[[1]]` is 2 deep): far
 * beyond real data, within what every JavaScript stack walks and what jsonb parses, and the same
 * number on both ends — `enqueue` refuses a deeper value, the CDC relay a deeper WAL-mode text.
 */
export const MAX_JSON_DEPTH = 1000;
const TOO_DEEP = `is nested more than ${MAX_JSON_DEPTH} levels deep (arrays and objects)`;

/**
 * In JSON.stringify's output, the escape of a NUL (`\u0000`) or of a lone surrogate (`\udXXX`: a
 * proper pair is written as is), after an even run of backslashes (`\\u0000` is only text).
 */
const UNSTORABLE_ESCAPE = /(?<!\\)(?:\\\\)*\\u(?:0000|d[89a-f])/;

/** A constructor name for messages. */
function kindOf(value: object): string {
  const name = (Object.getPrototypeOf(value) as { constructor?: { name?: unknown } } | null)?.constructor
    ?.name;
  return typeof name === 'string' && name !== '' ? name : 'class instance';
}

/**
 * The first enumerable field `value` inherits (from `Object.create(defaults)`, an accessor defined
 * enumerable on a class's prototype …) that is not a method: data JSON leaves out, as it writes
 * own fields only. Plain objects and null-prototype objects inherit none; `class` syntax makes
 * methods and getters non-enumerable.
 */
function inheritedField(value: object): string | undefined {
  for (const key in value) {
    if (Object.hasOwn(value, key)) continue;
    let field: unknown;
    try {
      field = (value as Record<string, unknown>)[key];
    } catch {
      return key; // a getter that throws: data all the same, just not readable here
    }
    if (typeof field !== 'function') return key;
  }
  return undefined;
}

/** Why a non-plain object (after `toJSON`) would not come back from its JSON, or undefined. */
function instanceProblem(value: object): string | undefined {
  if (ArrayBuffer.isView(value)) {
    return `is a ${kindOf(value)} inside the JSON, which JSON writes as an object of numbers: base64-encode it, or send the bytes alone as the payload`;
  }
  if (
    value instanceof ArrayBuffer ||
    (typeof SharedArrayBuffer === 'function' && value instanceof SharedArrayBuffer)
  ) {
    return `is an ${kindOf(value)}, which JSON writes as {}: send it as a Uint8Array (bytes), or base64-encode it`;
  }
  if (value instanceof Map || value instanceof Set || value instanceof WeakMap || value instanceof WeakSet) {
    const fix = value instanceof Map ? 'Object.fromEntries(map)' : '[...set]';
    return `is a ${kindOf(value)}, which JSON writes as {}: pass ${fix} instead`;
  }
  if (value instanceof Number)
    return Number.isFinite(value.valueOf()) ? undefined : `is ${value.valueOf()}, which JSON writes as null`;
  if (value instanceof String) return unstorableProblem(value.valueOf());
  if (value instanceof Boolean) return undefined;
  const inherited = inheritedField(value);
  if (inherited !== undefined) {
    return (
      `inherits ${JSON.stringify(inherited)} from its prototype, which JSON leaves out (it writes own fields only): ` +
      'copy the fields you mean into a plain object, or give it a toJSON'
    );
  }
  if (value instanceof Error || value instanceof RegExp || Object.keys(value).length === 0) {
    return `is a ${kindOf(value)} with no enumerable fields, which JSON writes as {}: convert it to plain data`;
  }
  return undefined; // a class instance: its own enumerable fields are its JSON
}

/**
 * Why `value`, found at `holder[key]` after `toJSON`, would not be stored faithfully, or
 * undefined (`holder[key]` is the value before `toJSON`).
 */
function problemOf(holder: unknown, key: string, value: unknown): string | undefined {
  switch (typeof value) {
    case 'string':
      return unstorableProblem(value);
    case 'number':
      return Number.isFinite(value) ? undefined : `is ${value}, which JSON writes as null`;
    case 'boolean':
      return undefined;
    case 'object': {
      if (value === null) {
        return (holder as Record<string, unknown>)[key] instanceof Date
          ? 'is an invalid Date, which JSON writes as null'
          : undefined;
      }
      if (Array.isArray(value)) return undefined;
      const proto = Object.getPrototypeOf(value) as unknown;
      if (proto === Object.prototype || proto === null) {
        const original = (holder as Record<string, unknown>)[key];
        // Buffer.toJSON gives { type: 'Buffer', data: [...] }: not bytes on the other side.
        return original !== value && ArrayBuffer.isView(original) ? instanceProblem(original) : undefined;
      }
      return instanceProblem(value);
    }
    case 'undefined':
      // An undefined property is left out, as JavaScript means it; in an array it would turn into null.
      return Array.isArray(holder) ? 'is undefined, which JSON writes as null in an array' : undefined;
    case 'bigint':
      return 'is a BigInt, which JSON cannot hold: pass it as a string';
    default:
      return `is a ${typeof value}, which JSON drops`;
  }
}

const OBJECT = Object.prototype;
const DATE = Date.prototype;
const DATE_TO_JSON = Date.prototype.toJSON;
/** Deeper plain data takes the exact walk, which also finds cycles. */
const MAX_PLAIN_DEPTH = 64;

/**
 * True when `value` is plain data JSON writes as is: strings, booleans, finite numbers, null,
 * arrays without holes or undefined, plain objects without `toJSON`, valid Dates. False sends it
 * to the exact walk, which refuses or accepts it. Strings are not looked at: a NUL or a lone
 * surrogate leaves a `\u` escape in the output, checked once afterwards.
 */
function plain(value: unknown, depth: number): boolean {
  switch (typeof value) {
    case 'string':
    case 'boolean':
    case 'undefined': // an object property: left out, as JavaScript means it (arrays check theirs)
      return true;
    case 'number':
      return Number.isFinite(value);
    case 'object': {
      if (value === null) return true;
      if (depth > MAX_PLAIN_DEPTH) return false;
      const proto = Object.getPrototypeOf(value) as unknown;
      if (Array.isArray(value)) {
        if (proto !== Array.prototype || typeof (value as { toJSON?: unknown }).toJSON === 'function')
          return false;
        for (let i = 0; i < value.length; i++) {
          const item: unknown = value[i];
          if (item === undefined || !plain(item, depth + 1)) return false;
        }
        return true;
      }
      if (proto === OBJECT || proto === null) {
        const record = value as Record<string, unknown>;
        if (typeof record['toJSON'] === 'function') return false;
        for (const key in record) if (!plain(record[key], depth + 1)) return false;
        return true;
      }
      return (
        proto === DATE && (value as Date).toJSON === DATE_TO_JSON && !Number.isNaN((value as Date).getTime())
      );
    }
    default:
      return false;
  }
}

/** `.name` or `["na me"]`: a readable path step. */
function step(key: string): string {
  return /^[A-Za-z_$][\w$]*$/.test(key) ? `.${key}` : `[${JSON.stringify(key)}]`;
}

interface Found {
  readonly path: string;
  readonly problem: string;
}

/**
 * The exact walk: the first place, in `JSON.stringify`'s order, of a value it would not write
 * faithfully, a NUL or lone surrogate, a cycle or a throwing `toJSON`; undefined when there is none.
 */
function locate(holder: object, key: string, path: string, ancestors: object[]): Found | undefined {
  let value: unknown;
  let toJSON: unknown;
  try {
    value = (holder as Record<string, unknown>)[key];
    if ((typeof value === 'object' && value !== null) || typeof value === 'bigint') {
      toJSON = (value as { toJSON?: unknown }).toJSON;
    }
  } catch (error) {
    return { path, problem: `could not be read: ${thrown(error)}` };
  }
  if (typeof toJSON === 'function') {
    try {
      value = toJSON.call(value, key);
    } catch (error) {
      return {
        path,
        problem: `has a toJSON that threw (${error instanceof Error ? error.message : String(error)})`,
      };
    }
  }
  const problem = problemOf(holder, key, value);
  if (problem !== undefined) return { path, problem };
  if (typeof value !== 'object' || value === null) return undefined;
  if (ancestors.includes(value))
    return { path, problem: 'refers back to an object that contains it (a cycle)' };
  if (ancestors.length >= MAX_JSON_DEPTH) return { path, problem: TOO_DEEP };
  ancestors.push(value);
  try {
    if (Array.isArray(value)) {
      for (let i = 0; i < value.length; i++) {
        const found = locate(value, String(i), `${path}[${i}]`, ancestors);
        if (found) return found;
      }
    } else if (!(value instanceof Number || value instanceof String || value instanceof Boolean)) {
      let names: string[];
      try {
        names = Object.keys(value);
      } catch (error) {
        return { path, problem: `could not be read: ${thrown(error)}` };
      }
      for (const name of names) {
        const keyProblem = unstorableProblem(name);
        if (keyProblem !== undefined)
          return { path: path + step(name), problem: `has a key that ${keyProblem}` };
        const found = locate(value, name, path + step(name), ancestors);
        if (found) return found;
      }
    }
  } finally {
    ancestors.pop();
  }
  return undefined;
}

/** A getter's (or a proxy trap's) error, for a message. */
function thrown(error: unknown): string {
  return `its getter threw (${error instanceof Error ? error.message : String(error)})`;
}

function refusal(found: Found | undefined, field: string, error?: unknown): OutboxValidationError {
  if (found) return new OutboxValidationError(found.path, found.problem, FIX);
  const why = error instanceof Error ? error.message : String(error);
  return new OutboxValidationError(field, `is not JSON-serialisable (${why})`, FIX);
}

/** The exact walk from the top; a value too deep to walk gives the walk's own RangeError. */
function exactWalk(value: unknown, field: string): Found | undefined {
  return locate({ '': value }, '', field, []);
}

/**
 * Why JSON text written elsewhere (a WAL-mode message read back by the CDC relay) would not be
 * taken by PostgreSQL's `::jsonb` as this module's own output is, or undefined: nested deeper
 * than `enqueue` takes (MAX_JSON_DEPTH), not JSON, or a `\u0000` or surrogate escape (jsonb
 * refuses a NUL and a lone surrogate; JSON.stringify never escapes a surrogate, so an escaped pair
 * is refused too: conservative, never from `enqueue`).
 * Numbers jsonb's numeric cannot hold (an exponent over 131072) pass here: the handover
 * statement's data-error path keeps them.
 */
export function jsonTextProblem(text: string): string | undefined {
  // First, and without parsing: a text a million levels deep is refused in one pass.
  if (jsonTextDepth(text) > MAX_JSON_DEPTH) return TOO_DEEP;
  try {
    JSON.parse(text);
  } catch {
    return 'is not valid JSON'; // JSON.parse's message quotes the text: never in a log line
  }
  if (text.includes('\\u') && UNSTORABLE_ESCAPE.test(text))
    return 'holds a \\u0000 or surrogate escape, which jsonb refuses';
  return undefined;
}

/**
 * The deepest nesting of arrays and objects in a JSON text (brackets inside strings not
 * counted); a text too short to be nested past MAX_JSON_DEPTH is not scanned.
 */
function jsonTextDepth(text: string): number {
  if (text.length <= 2 * MAX_JSON_DEPTH) return 0;
  let depth = 0;
  let deepest = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c)
        i++; // a backslash: the next character is escaped
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x5b || c === 0x7b) {
      depth++;
      if (depth > deepest) deepest = depth;
    } else if (c === 0x5d || c === 0x7d) depth--;
  }
  return deepest;
}

/** The payload as JSON text for jsonb; throws an OutboxValidationError naming the first unfaithful value. */
export function payloadJsonOf(value: unknown, field: string): string {
  if (typeof value === 'undefined' || typeof value === 'function' || typeof value === 'symbol') {
    throw new OutboxValidationError(
      field,
      `is ${typeof value === 'undefined' ? 'undefined' : `a ${typeof value}`}, which JSON cannot hold`,
      FIX,
    );
  }
  if (ArrayBuffer.isView(value) || value instanceof ArrayBuffer) {
    throw new OutboxValidationError(
      field,
      `is a ${kindOf(value)}: only a Uint8Array or Buffer payload is stored as bytes`,
      'Pass new Uint8Array(view.buffer, view.byteOffset, view.byteLength) (or new Uint8Array(arrayBuffer)) for its bytes.',
    );
  }
  let quick: boolean;
  try {
    quick = plain(value, 0);
  } catch {
    quick = false; // a getter or a proxy trap threw: the exact walk says where
  }
  if (!quick) {
    let found: Found | undefined;
    try {
      found = exactWalk(value, field);
    } catch (error) {
      throw refusal(undefined, field, error); // nested too deeply even to walk
    }
    if (found) throw refusal(found, field);
  }
  let json: string | undefined;
  try {
    json = JSON.stringify(value);
  } catch (error) {
    throw refusal(undefined, field, error);
  }
  if (json === undefined) {
    // A toJSON gave undefined, a function or a symbol.
    throw new OutboxValidationError(field, 'has a toJSON that gives nothing JSON can hold', FIX);
  }
  if (json.includes('\\u') && UNSTORABLE_ESCAPE.test(json)) {
    throw refusal(exactWalk(value, field), field, new Error('a NUL or a lone UTF-16 surrogate'));
  }
  return json;
}
