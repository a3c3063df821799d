import { Kind, type TSchema } from '@sinclair/typebox';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { base64Problem, decodeBase64, decodeBase64Codex, encodeBase64, isStrictBase64 } from './base64.js';
import { DecodeError, decode, matches } from './decode.js';
import { FileUriError, fileUriToPath } from './file-uri.js';
import * as fs from './fs.js';
import * as http from './http.js';
import { isEnvironmentId, isWebSocketUrl, parseRegistryError } from './rendezvous.js';
import { parseSandbox } from './sandbox.js';
import * as schemas from './schemas.js';
import { encodeBase64Response, encodeOutputNotification, encodeWriteBlockRequest } from './wire.js';

// Hostile params at the exec-protocol edge (issue 16): whatever a peer puts in `params`, the validators
// answer with the value or a DecodeError/TypeError that names the problem, never another exception.
// Runs per property: TETHER_FUZZ_RUNS (`pnpm fuzz` raises it); a failure prints the seed to replay it.
const numRuns = Number(process.env.TETHER_FUZZ_RUNS) || 300;
// TETHER_FUZZ_SEED replays a failure's printed seed.
if (process.env.TETHER_FUZZ_SEED) fc.configureGlobal({ seed: Number(process.env.TETHER_FUZZ_SEED) });

/** Every exported runtime schema (TypeBox values carry `Kind`), by name. */
const SCHEMAS = Object.entries({ ...schemas, ...fs, ...http } as Record<string, unknown>).filter(
  (entry): entry is [string, TSchema] => typeof entry[1] === 'object' && entry[1] !== null && Kind in entry[1],
);

/** Field names a schema knows, at any depth: random objects use them so they get past the first check. */
function fieldNames(schema: TSchema, out = new Set<string>(), depth = 0): Set<string> {
  if (depth > 6) return out;
  for (const [name, child] of Object.entries((schema.properties as Record<string, TSchema>) ?? {})) {
    out.add(name);
    fieldNames(child, out, depth + 1);
  }
  for (const child of [...((schema.anyOf as TSchema[]) ?? []), schema.items as TSchema | undefined]) {
    if (child) fieldNames(child, out, depth + 1);
  }
  return out;
}

/** Values of every JSON type, edge numbers included: what a hostile or buggy peer might send. */
const scalar = fc.oneof(
  fc.string({ maxLength: 10 }),
  fc.constantFrom('stdout', 'stderr', 'pty', 'all', 'none', 'kill', 'managed', 'follow', 'AAAA', ''),
  fc.integer(),
  fc.constantFrom(0, -1, 1.5, 2 ** 53, -(2 ** 53), 1e308, -0, 1000, 1001),
  fc.boolean(),
  fc.constant(null),
);

function shapedValue(names: string[]): fc.Arbitrary<unknown> {
  const key = names.length > 0 ? fc.oneof(fc.constantFrom(...names), fc.string({ maxLength: 6 })) : fc.string();
  const { value } = fc.letrec<{ value: unknown }>((tie) => ({
    value: fc.oneof(
      { depthSize: 'small', withCrossShrink: true },
      scalar,
      fc.array(tie('value'), { maxLength: 3 }),
      fc.dictionary(key, tie('value'), { maxKeys: 6 }),
    ),
  }));
  return value;
}

const schemaAndValue = fc
  .constantFrom(...SCHEMAS)
  .chain(([name, schema]) => fc.tuple(fc.constant(name), fc.constant(schema), shapedValue([...fieldNames(schema)])));

describe('fuzz: exec-protocol param validators', () => {
  it(`decode() of any value against any of the ${SCHEMAS.length} schemas returns it or throws DecodeError`, () => {
    expect(SCHEMAS.length).toBeGreaterThan(40);
    fc.assert(
      fc.property(schemaAndValue, ([, schema, value]) => {
        let decoded: unknown;
        try {
          decoded = decode(schema, value);
        } catch (error) {
          expect(error).toBeInstanceOf(DecodeError);
          expect((error as DecodeError).message.length).toBeGreaterThan(0);
          expect(matches(schema, value)).toBe(false);
          return;
        }
        expect(decoded).toBe(value);
        expect(matches(schema, value)).toBe(true);
      }),
      { numRuns },
    );
  });

  it('parseSandbox classifies any value or throws DecodeError', () => {
    fc.assert(
      fc.property(
        shapedValue(['permissions', 'type', 'file_system', 'entries', 'network', 'windowsSandboxLevel']),
        (value) => {
          try {
            expect(['none', 'unrestricted', 'restricted']).toContain(parseSandbox(value));
          } catch (error) {
            expect(error).toBeInstanceOf(DecodeError);
          }
        },
      ),
      { numRuns },
    );
  });
});

/** Text near base64: its alphabet, the URL-safe symbols, padding in odd places, non-ASCII. */
const base64ish = fc.oneof(
  fc.uint8Array({ maxLength: 40 }).map((bytes) => Buffer.from(bytes).toString('base64')),
  fc.string({ unit: fc.constantFrom(...'ABCDEFabcdef0189+/=-_ \n'.split('')), maxLength: 24 }),
  fc.string({ unit: 'binary', maxLength: 12 }),
  // UTF-16 units whose low byte is a symbol: Node's decoder reads only that byte.
  fc.string({ unit: fc.constantFrom('A', '=', '\u4141', '\u0141', '\u012b', '\ud841'), maxLength: 8 }),
  fc
    .tuple(fc.uint8Array({ minLength: 1, maxLength: 30 }), fc.nat(), fc.string({ unit: 'binary', maxLength: 2 }))
    .map(([bytes, at, insert]) => {
      const text = Buffer.from(bytes).toString('base64');
      const i = at % text.length;
      return text.slice(0, i) + insert + text.slice(i + 1);
    }),
);

describe('fuzz: base64 on the wire', () => {
  it('decodeBase64Codex accepts exactly canonical padded base64 and names the problem otherwise', () => {
    fc.assert(
      fc.property(base64ish, (text) => {
        const problem = base64Problem(text);
        let bytes: Buffer;
        try {
          bytes = decodeBase64Codex(text);
        } catch (error) {
          expect(error).toBeInstanceOf(TypeError);
          expect(problem).not.toBeNull();
          expect((error as Error).message).toBe(problem);
          return;
        }
        expect(problem).toBeNull();
        expect(encodeBase64(bytes)).toBe(text);
      }),
      { numRuns },
    );
  });

  it('decodeBase64 (strict) throws only TypeError and never accepts foreign symbols', () => {
    fc.assert(
      fc.property(base64ish, (text) => {
        try {
          const bytes = decodeBase64(text);
          expect(isStrictBase64(text)).toBe(true);
          expect(text).toMatch(/^[A-Za-z0-9+/]*={0,2}$/);
          expect(bytes.length).toBe((text.length / 4) * 3 - (text.match(/=*$/)?.[0].length ?? 0));
        } catch (error) {
          expect(error).toBeInstanceOf(TypeError);
          expect(isStrictBase64(text)).toBe(false);
        }
      }),
      { numRuns },
    );
  });
});

describe('regressions found by fuzzing', () => {
  it('base64: a non-ASCII character whose low byte is a symbol (U+4141 for `A`) is refused, as Codex does', () => {
    // Found by the strict-base64 property: Node's decoder took `䅁A==` for `AA==` (one zero byte).
    for (const text of ['䅁A==', '\u0141AAA', `AAAA${'\u4141'}AAA`]) {
      expect(isStrictBase64(text)).toBe(false);
      expect(() => decodeBase64(text)).toThrow(TypeError);
      expect(() => decodeBase64Codex(text)).toThrow(/Invalid symbol/);
      expect(() => decodeBase64Codex(text, (size) => Buffer.alloc(size))).toThrow(TypeError);
    }
  });

  it('base64: a non-ASCII character is refused wherever it sits in a long text, also past what the bytes hold', () => {
    // The ASCII check encodes the text into the decoding target, a piece at a time: 4 000 characters into 3 000
    // bytes. A character in the last quarter is only seen by a later piece.
    const text = Buffer.alloc(3000, 0x41).toString('base64');
    expect(decodeBase64Codex(text, (size) => Buffer.alloc(size))).toEqual(Buffer.alloc(3000, 0x41));
    for (const at of [0, 2999, 3000, 3990, text.length - 1]) {
      for (const char of ['\u4141', '\u0141', '\u00c1']) {
        const foreign = text.slice(0, at) + char + text.slice(at + 1);
        expect(() => decodeBase64Codex(foreign)).toThrow(TypeError);
        expect(() => decodeBase64Codex(foreign, (size) => Buffer.alloc(size))).toThrow(TypeError);
        expect(isStrictBase64(foreign)).toBe(false);
      }
    }
  });
});

describe('fuzz: URIs, ids and registry bodies', () => {
  const uriLike = fc.oneof(
    fc.string({ unit: 'binary', maxLength: 30 }),
    fc.string({ maxLength: 20 }).map((s) => `file:${s}`),
    fc.string({ maxLength: 20 }).map((s) => `file://${s}`),
    fc.webUrl().map((url) => url.replace(/^https?/, 'file')),
    fc.constantFrom('file:///tmp/%00x', 'file://host/x', 'file:///C:/x', 'file:///%2e%2e/x', 'file:///a%2Fb'),
  );

  it('fileUriToPath returns an absolute path or throws FileUriError', () => {
    fc.assert(
      fc.property(uriLike, (uri) => {
        try {
          expect(fileUriToPath(uri).startsWith('/')).toBe(true);
        } catch (error) {
          expect(error).toBeInstanceOf(FileUriError);
          expect(['syntax', 'host']).toContain((error as FileUriError).kind);
        }
      }),
      { numRuns },
    );
  });

  it('parseRegistryError, isWebSocketUrl and isEnvironmentId never throw on any text', () => {
    const text = fc.oneof(
      fc.string({ unit: 'binary', maxLength: 40 }),
      fc.jsonValue({ maxDepth: 3 }).map((value) => JSON.stringify(value)),
      fc.record({ error: fc.jsonValue({ maxDepth: 2 }) }).map((value) => JSON.stringify(value)),
      fc.webUrl().map((url) => url.replace(/^http/, 'ws')),
    );
    fc.assert(
      fc.property(text, (input) => {
        const parsed = parseRegistryError(input);
        if (parsed !== null) {
          expect(parsed.code === null || typeof parsed.code === 'string').toBe(true);
          expect(parsed.message === null || typeof parsed.message === 'string').toBe(true);
        }
        expect(typeof isWebSocketUrl(input)).toBe('boolean');
        expect(isEnvironmentId(input)).toBe(/^[A-Za-z0-9_-]{1,128}$/.test(input));
      }),
      { numRuns },
    );
  });
});

describe('fuzz: hot-path wire encoders', () => {
  const id = fc.oneof(fc.integer(), fc.string({ unit: 'binary', maxLength: 12 }));
  const text = fc.string({ unit: 'binary', maxLength: 16 });
  const bytes = fc.uint8Array({ maxLength: 600 }).map((b) => Buffer.from(b));

  it('encode exactly what JSON.stringify would, for any ids, names and bytes', () => {
    fc.assert(
      fc.property(id, text, text, fc.nat(), bytes, (anyId, name, stream, seq, chunk) => {
        const base64 = chunk.toString('base64');
        expect(JSON.parse(encodeOutputNotification(name, seq, stream, chunk).toString('utf8'))).toEqual({
          method: 'process/output',
          params: { processId: name, seq, stream, chunk: base64 },
        });
        expect(JSON.parse(encodeBase64Response(anyId, name, chunk, { eof: true }).toString('utf8'))).toEqual({
          id: anyId,
          result: { [name]: base64, eof: true },
        });
        expect(JSON.parse(encodeWriteBlockRequest(anyId, name, seq, chunk).toString('utf8'))).toEqual({
          id: anyId,
          method: 'fs/writeBlock',
          params: { handleId: name, offset: seq, chunk: base64 },
        });
      }),
      { numRuns },
    );
  });
});
