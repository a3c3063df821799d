import { describe, expect, it } from 'vitest';
import {
  base64Problem,
  DecodeError,
  decode,
  decodeBase64Codex,
  FsOpenParams,
  FsWalkParams,
  HttpRequestParams,
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
  });
});
