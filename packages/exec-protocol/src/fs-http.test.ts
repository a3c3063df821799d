import { describe, expect, it } from 'vitest';
import {
  base64Problem,
  DecodeError,
  decode,
  decodeBase64,
  decodeBase64Codex,
  FsOpenParams,
  FsWalkParams,
  HttpRequestParams,
  isStrictBase64,
  parseSandbox,
} from './index.js';

describe('base64Problem', () => {
  // Every row was answered by the Codex 0.171.0 binary to fs/writeFile (the Rust base64 crate's text).
  it.each([
    ['a', 'Invalid input length: 1'],
    ['!!!!!', 'Invalid symbol 33, offset 4.'],
    ['aGF=', 'Invalid last symbol 70, offset 2.'],
    ['aGk=aGk=', 'Invalid symbol 61, offset 3.'],
    ['aGk', 'Invalid padding'],
    ['aR==', 'Invalid last symbol 82, offset 1.'],
    ['a===', 'Invalid symbol 61, offset 1.'],
    ['aGVsbG8=a', 'Invalid symbol 61, offset 7.'],
    ['aGVsbG8==', 'Invalid symbol 61, offset 7.'],
    ['é', 'Invalid symbol 195, offset 0.'],
    ['aG=k', 'Invalid symbol 61, offset 2.'],
    ['aGVsbA', 'Invalid padding'],
    ['aGVsbA=', 'Invalid padding'],
    ['aGVs bG8=', 'Invalid symbol 32, offset 4.'],
    ['====', 'Invalid symbol 61, offset 0.'],
    ['aGVsbG8\n', 'Invalid symbol 10, offset 7.'],
    ['-_8=', 'Invalid symbol 45, offset 0.'],
  ])('%j → %s', (text, problem) => {
    expect(base64Problem(text)).toBe(problem);
    expect(() => decodeBase64Codex(text)).toThrow(problem);
  });

  it('accepts canonical padded base64, empty included', () => {
    for (const text of ['', 'aGk=', 'aGVsbG8=', 'AAEC+vv8/Q==', 'aGVs']) expect(base64Problem(text)).toBeNull();
    expect(decodeBase64Codex('AAEC+vv8/Q==')).toEqual(Buffer.from([0, 1, 2, 250, 251, 252, 253]));
  });

  it('accepts exactly the texts that re-encode to themselves (canonical), over many one-symbol edits', () => {
    // A small deterministic generator: texts of every length class, each with one symbol replaced.
    let seed = 12345;
    const next = () => {
      seed = (seed * 1103515245 + 12345) & 0x7fffffff;
      return seed;
    };
    const symbols = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=!-_ ';
    let accepted = 0;
    for (let i = 0; i < 4000; i++) {
      const bytes = Buffer.from(Array.from({ length: next() % 12 }, () => next() % 256));
      let text = bytes.toString('base64');
      if (text.length > 0 && i % 5 !== 0) {
        const at = next() % text.length;
        text = text.slice(0, at) + symbols[next() % symbols.length] + text.slice(at + 1);
      }
      const canonical = Buffer.from(text, 'base64').toString('base64') === text;
      if (canonical) {
        accepted++;
        expect(decodeBase64Codex(text).toString('base64')).toBe(text);
      } else {
        expect(() => decodeBase64Codex(text), text).toThrow(TypeError);
      }
    }
    expect(accepted).toBeGreaterThan(800);
  });

  it('isStrictBase64 agrees with the grammar (alphabet, then at most two =, length a multiple of 4)', () => {
    // The definition, spelled as a regex here only: the implementation decodes and counts instead.
    const grammar = (text: string) => text.length % 4 === 0 && /^[A-Za-z0-9+/]*={0,2}$/.test(text);
    let seed = 99;
    const next = (n: number) => {
      seed = (seed * 1103515245 + 12345) & 0x7fffffff;
      return seed % n;
    };
    const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';
    // What a lenient decoder skips or reads differently: padding inside, URL-safe symbols, whitespace,
    // punctuation, control and non-ASCII characters (one and two UTF-16 units).
    const foreign = ['=', '==', '-', '_', ' ', '\n', '\t', '!', '.', '"', '\\', '\0', '\x7f', '\xff', 'é', '€', '😀'];
    let strict = 0;
    for (let i = 0; i < 20_000; i++) {
      let text = '';
      for (let k = next(24) + (i % 4 === 0 ? next(100) : 0); k > 0; k--) text += alphabet[next(64)];
      const tail = next(4);
      if (tail === 1) text += '=';
      else if (tail === 2) text += '==';
      for (let edits = next(3); edits > 0; edits--) {
        const at = next(text.length + 1);
        const insert = foreign[next(foreign.length)]!;
        text =
          next(2) === 0 ? text.slice(0, at) + insert + text.slice(at) : text.slice(0, at) + insert + text.slice(at + 1);
      }
      const expected = grammar(text);
      if (expected) strict++;
      expect(isStrictBase64(text), JSON.stringify(text)).toBe(expected);
      if (!expected) expect(() => decodeBase64(text), JSON.stringify(text)).toThrow(TypeError);
      // Decoding into a caller's buffer (stale bytes in it) answers the same as decoding fresh.
      const into = (size: number) => Buffer.alloc(size, 0xa5);
      let fresh: Buffer | Error;
      try {
        fresh = decodeBase64Codex(text);
      } catch (err) {
        fresh = err as Error;
      }
      if (fresh instanceof Error) expect(() => decodeBase64Codex(text, into)).toThrow(fresh.message);
      else expect(decodeBase64Codex(text, into)).toEqual(fresh);
    }
    expect(strict).toBeGreaterThan(2_000);
  });
});

describe('parseSandbox', () => {
  it('classifies the profiles', () => {
    expect(parseSandbox(undefined)).toBe('none');
    expect(parseSandbox(null)).toBe('none');
    expect(parseSandbox({ permissions: { type: 'disabled' }, windowsSandboxLevel: 'disabled' })).toBe('unrestricted');
    expect(
      parseSandbox({ permissions: { type: 'external', network: 'enabled' }, windowsSandboxLevel: 'disabled' }),
    ).toBe('unrestricted');
    const managed = (fileSystem: unknown) => ({
      permissions: { type: 'managed', file_system: fileSystem, network: 'restricted' },
      windowsSandboxLevel: 'elevated',
    });
    expect(parseSandbox(managed({ type: 'unrestricted' }))).toBe('unrestricted');
    expect(parseSandbox(managed({ type: 'restricted', entries: [] }))).toBe('restricted');
  });

  it('words malformed profiles as serde does', () => {
    const problem = (value: unknown) => {
      try {
        parseSandbox(value);
        return null;
      } catch (err) {
        expect(err).toBeInstanceOf(DecodeError);
        return (err as Error).message;
      }
    };
    expect(problem({})).toBe('missing field `permissions`');
    expect(problem({ permissions: {} })).toBe('missing field `type`');
    expect(problem({ permissions: { type: 'managed' } })).toBe('missing field `file_system`');
    expect(problem({ permissions: { type: 'external' } })).toBe('missing field `network`');
    expect(problem({ permissions: { type: 'disabled' } })).toBe('missing field `windowsSandboxLevel`');
    expect(problem({ permissions: { type: 'external', network: 'x' } })).toBe(
      'unknown variant `x`, expected `restricted` or `enabled`',
    );
    expect(problem({ permissions: { type: 'managed', file_system: 'x' } })).toBe(
      'invalid type: string "x", expected internally tagged enum ExecManagedFileSystemPermissions',
    );
    expect(problem({ permissions: { type: 'managed', file_system: { type: 'restricted' } } })).toBe(
      'missing field `entries`',
    );
  });
});

describe('fs and http schemas', () => {
  it('name Rust types and two-variant enums as serde does', () => {
    expect(() => decode(FsWalkParams, { path: 'file:///', options: 'x' })).toThrow(
      'invalid type: string "x", expected struct WalkOptions',
    );
    expect(() =>
      decode(FsWalkParams, {
        path: 'file:///',
        options: { maxDepth: 'x', maxDirectories: 1, maxEntries: 1, followDirectorySymlinks: false },
      }),
    ).toThrow('invalid type: string "x", expected usize');
    expect(() => decode(FsOpenParams, { handleId: 'h', path: 'file:///', mode: 'append' })).toThrow(
      'unknown variant `append`, expected one of `read`, `replace`, `update`',
    );
    expect(() =>
      decode(HttpRequestParams, { method: 'GET', url: 'http://x/', requestId: 'r', redirectPolicy: 'x' }),
    ).toThrow('unknown variant `x`, expected `follow` or `stop`');
    expect(() => decode(HttpRequestParams, { method: 'GET', url: 'http://x/' })).toThrow('missing field `requestId`');
    // httpHeaderEnvVars: `value` stays required (the variable's value is appended to it).
    const header = (h: Record<string, unknown>) => () =>
      decode(HttpRequestParams, { method: 'GET', url: 'http://x/', requestId: 'r', headers: [{ name: 'a', ...h }] });
    expect(header({ valueEnvVar: 'T' })).toThrow('missing field `value`');
    expect(header({ value: null, valueEnvVar: 'T' })).toThrow('invalid type: null, expected a string');
    expect(header({ value: '', valueEnvVar: 5 })).toThrow('invalid type: number, expected a string');
    expect(header({ value: 'Bearer ', valueEnvVar: 'T' })).not.toThrow();
    expect(header({ value: 'v', valueEnvVar: null })).not.toThrow();
  });
});
