import { describe, expect, it } from 'vitest';
import {
  DecodeError,
  decode,
  decodeResult,
  FsExtensionMethod,
  isNotification,
  isRequestMethod,
  MAX_SHARE_TTL_SEC,
  METHOD_TABLE,
  Method,
  Notification,
} from './index.js';

describe('the method table', () => {
  it('has every request method of the protocol, Codex’s and Tether’s, and no notification', () => {
    const requests = [
      ...Object.values(Method).filter((m) => m !== Method.initialized),
      ...Object.values(FsExtensionMethod),
    ];
    expect(Object.keys(METHOD_TABLE).sort()).toEqual([...new Set(requests)].sort());
    expect(isRequestMethod(Method.initialized)).toBe(false);
    expect(isRequestMethod(Notification.processOutput)).toBe(false);
    expect(isRequestMethod('toString')).toBe(false);
  });

  it('decodes a well-formed answer as it is, unknown members kept', () => {
    const read = {
      chunks: [{ seq: 1, stream: 'stdout', chunk: 'aGk=' }],
      nextSeq: 2,
      exited: false,
      exitCode: null,
      closed: false,
      failure: null,
      extra: 1,
    };
    expect(decodeResult(Method.processRead, read)).toBe(read);
    expect(decodeResult(Method.fsWriteFile, {})).toEqual({});
    // fs/readBlock with `binary: true`: the bytes are the attachment, no chunk.
    expect(decodeResult(Method.fsReadBlock, { eof: true })).toEqual({ eof: true });
  });

  it('refuses an answer that is not the method’s result, saying what is wrong as serde would', () => {
    expect(() => decodeResult(Method.processRead, { chunks: 'x' })).toThrow(DecodeError);
    expect(() => decodeResult(Method.processStart, {})).toThrow('missing field `processId`');
    expect(() => decodeResult(Method.fsClose, { sha256: 'not hex', bytes: 1 })).toThrow(DecodeError);
    expect(() => decodeResult(Method.tcpConnect, { windowBytes: -1, address: '127.0.0.1', port: 1 })).toThrow(
      DecodeError,
    );
    expect(() => decodeResult(FsExtensionMethod.readFiles, { files: [{ tooLarge: true }] })).toThrow(DecodeError);
    expect(() => decodeResult(Method.processList, null)).toThrow(DecodeError);
  });

  it('checks notifications as a client receives them, the binary process/output included', () => {
    expect(
      isNotification(Notification.processOutput, { processId: 'p', seq: 1, stream: 'stdout', chunk: 'aGk=' }),
    ).toBe(true);
    expect(isNotification(Notification.processOutput, { processId: 'p', seq: 1, stream: 'stdout' })).toBe(true);
    expect(isNotification(Notification.processOutput, { processId: 'p', seq: -1, stream: 'stdout' })).toBe(false);
    expect(isNotification(Notification.processExited, { processId: 'p', seq: 2 })).toBe(false);
    expect(isNotification(Notification.processClosed, { processId: 'p', seq: 3 })).toBe(true);
  });
});

describe('process/share params', () => {
  it('take a share of view or control for 1 s to a week; nothing else', () => {
    const params = METHOD_TABLE[Method.processShare].params;
    expect(decode(params, { processId: 'p', access: 'view', ttlSec: MAX_SHARE_TTL_SEC })).toMatchObject({
      ttlSec: 604_800,
    });
    expect(decode(params, { processId: 'p', access: 'control' })).toEqual({ processId: 'p', access: 'control' });
    for (const bad of [
      { processId: 'p', access: 'view', ttlSec: MAX_SHARE_TTL_SEC + 1 },
      { processId: 'p', access: 'view', ttlSec: 0 },
      { processId: 'p', access: 'admin' },
      { processId: 'p' },
    ]) {
      expect(() => decode(params, bad)).toThrow(DecodeError);
    }
  });
});
