import { Type } from '@sinclair/typebox';
import { describe, expect, it } from 'vitest';
import { INTERPRETED_CHECKS, isCompiled } from './decode.js';
import {
  DecodeError,
  decode,
  decodeBase64,
  encodeBase64,
  fileUriToPath,
  InitializeParams,
  isStrictBase64,
  methodFamily,
  ProcessReadParams,
  ProcessSignalParams,
  ProcessStartParams,
  pathToFileUri,
  RpcError,
} from './index.js';

const start = { processId: 'p1', argv: ['true'], cwd: 'file:///tmp', env: {}, tty: false };

describe('decode', () => {
  it('accepts valid params and ignores unknown members', () => {
    expect(decode(ProcessStartParams, { ...start, somethingNew: 1 }).processId).toBe('p1');
    expect(decode(InitializeParams, { clientName: 'x', resumeSessionId: null }).clientName).toBe('x');
  });

  it('names the missing field the way serde does', () => {
    const { cwd: _cwd, ...withoutCwd } = start;
    expect(() => decode(ProcessStartParams, withoutCwd)).toThrow('missing field `cwd`');
  });

  it('reports a wrong type before a missing field', () => {
    expect(() => decode(ProcessStartParams, { processId: 'p', tty: 'yes' })).toThrow(
      'invalid type: string "yes", expected a boolean',
    );
  });

  it('rejects negative and fractional sequence numbers', () => {
    expect(() => decode(ProcessReadParams, { processId: 'p', afterSeq: -1 })).toThrow(DecodeError);
    expect(() => decode(ProcessReadParams, { processId: 'p', afterSeq: 1.5 })).toThrow('invalid number');
    expect(() => decode(ProcessReadParams, { processId: 'p', afterSeq: 'x' })).toThrow(
      'invalid type: string "x", expected u64',
    );
    expect(() => decode(ProcessStartParams, { ...start, processId: 5 })).toThrow(
      'invalid type: number, expected a string',
    );
  });

  it('lists the variants of an unknown enum value', () => {
    expect(() => decode(ProcessSignalParams, { processId: 'p', signal: 'explode' })).toThrow(
      /unknown variant `explode`, expected one of `interrupt`, `terminate`/,
    );
  });

  it('answers the same while interpreted and once compiled', () => {
    const schema = Type.Object({ n: Type.Integer({ minimum: 0 }), s: Type.Optional(Type.String()) });
    expect(decode(schema, { n: 0 }).n).toBe(0);
    expect(isCompiled(schema)).toBe(false);
    for (let i = 0; i < INTERPRETED_CHECKS; i++) {
      expect(decode(schema, { n: i, s: 'x', extra: true }).n).toBe(i);
      expect(() => decode(schema, { n: -1 })).toThrow('invalid number');
      expect(() => decode(schema, { s: 'x' })).toThrow('missing field `n`');
    }
    expect(isCompiled(schema)).toBe(true);
  });

  it('reports null params as a type error', () => {
    expect(() => decode(InitializeParams, null)).toThrow('invalid type: null, expected a struct');
  });
});

describe('base64', () => {
  it('round-trips bytes in standard padded form', () => {
    const bytes = Buffer.from([0, 1, 2, 250, 251, 252, 253]);
    const text = encodeBase64(bytes);
    expect(text).toBe('AAEC+vv8/Q==');
    expect(decodeBase64(text)).toEqual(bytes);
  });

  it('rejects unpadded, url-safe and garbage input', () => {
    expect(isStrictBase64('aGk')).toBe(false);
    expect(isStrictBase64('-_8=')).toBe(false);
    expect(isStrictBase64('a b=')).toBe(false);
    expect(() => decodeBase64('aGk')).toThrow(TypeError);
    expect(isStrictBase64('')).toBe(true);
  });
});

describe('file URIs', () => {
  it('converts both ways with percent-encoding', () => {
    expect(pathToFileUri('/tmp/a b')).toBe('file:///tmp/a%20b');
    expect(fileUriToPath('file:///tmp/a%20b')).toBe('/tmp/a b');
  });

  it('rejects non-file schemes, authorities and drive paths', () => {
    expect(() => fileUriToPath('http://x/y')).toThrow('unsupported path URI scheme `http`');
    expect(() => fileUriToPath('file://server/share')).toThrow("'file://server/share' is invalid on 'linux'");
    expect(() => fileUriToPath('file:///C:/dir')).toThrow("'file:///C:/dir' is invalid on 'linux'");
    expect(() => fileUriToPath('/tmp')).toThrow('invalid URI: relative URL without a base');
    expect(fileUriToPath('file:tmp')).toBe('/tmp');
  });
});

describe('method families and errors', () => {
  it('names gating families as Codex does', () => {
    expect(methodFamily('process/start')).toBe('exec');
    expect(methodFamily('fs/readFile')).toBe('filesystem');
    expect(methodFamily('environment/info')).toBe('environment info');
    expect(methodFamily('initialize')).toBeNull();
  });

  it('builds the unknown-method error with Codex text', () => {
    const err = RpcError.methodNotFound('nope');
    expect(err.code).toBe(-32601);
    expect(err.message).toBe('exec-server stub does not implement `nope` yet');
    expect(RpcError.is(err)).toBe(true);
    expect(RpcError.is(new Error('x'))).toBe(false);
  });
});

describe('parseRegistryError', () => {
  it('reads the registry error body, and nothing else', async () => {
    const { parseRegistryError } = await import('./rendezvous.js');
    expect(parseRegistryError('{"error":{"code":"unauthorized","message":"unknown key"}}')).toEqual({
      code: 'unauthorized',
      message: 'unknown key',
    });
    expect(parseRegistryError('{"error":{"code":7}}')).toEqual({ code: null, message: null });
    expect(parseRegistryError('<html>bad gateway</html>')).toBeNull();
    expect(parseRegistryError('5')).toBeNull();
  });
});
