import { describe, expect, it } from 'vitest';
import {
  ackFrame,
  dataFrame,
  encodeFrame,
  handshakeFrame,
  heartbeatFrame,
  peekHeader,
  resetFrame,
  resumeFrame,
  streamKey,
} from './index.js';

const id = 'c0ffee00-1111-4222-8333-444455556666';
const buf = (bytes: Uint8Array) => Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);

describe('peekHeader', () => {
  it.each([
    ['data', dataFrame(id, 7, new Uint8Array(70_000).fill(9))],
    ['ack', ackFrame(id)],
    ['resume', resumeFrame(id, 0)],
    ['reset', resetFrame(id, 'why')],
    ['heartbeat', heartbeatFrame(id)],
    ['handshake', handshakeFrame(id, new Uint8Array([1, 2, 3]))],
  ])('reads the stream id and the %s kind of an encoded frame', (kind, frame) => {
    expect(peekHeader(buf(encodeFrame(frame)))).toEqual({ streamKey: streamKey(id), kind });
  });

  it('keys non-ASCII stream ids by their exact bytes', () => {
    const unicode = 'strëam-✓';
    const peeked = peekHeader(buf(encodeFrame(resumeFrame(unicode, 0))));
    expect(peeked?.streamKey).toBe(streamKey(unicode));
    expect(peeked?.streamKey).not.toBe(streamKey('stream-?'));
  });

  it('refuses truncated, empty-id and garbage input without throwing', () => {
    const bytes = buf(encodeFrame(dataFrame(id, 1, new Uint8Array(100))));
    expect(peekHeader(bytes.subarray(0, bytes.length - 1))).toBeNull();
    expect(peekHeader(Buffer.from([0x08, 0x01]))).toBeNull(); // version only, no stream id
    expect(peekHeader(Buffer.from([0x12, 0x00]))).toBeNull(); // empty stream id
    expect(peekHeader(Buffer.from([0xff, 0xff, 0xff, 0xff, 0xff, 0xff]))).toBeNull();
    expect(peekHeader(Buffer.from([0x0b, 0x0c]))).toBeNull(); // a group
    expect(peekHeader(Buffer.from('{"method":"initialize"}'))).toBeNull();
  });
});
