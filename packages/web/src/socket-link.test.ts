import { dataFrame, decodeFrame, encodeFrame, type Frame, resetFrame } from '@tether/relay-frames';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { readHashParams } from './sign-in.js';
import { BrowserSocketFrameLink } from './socket-link.js';

/** The part of a browser WebSocket the link uses, driven by the test (one side only: the link's). */
class FakeSocket extends EventTarget {
  binaryType = 'blob';
  readyState = 1;
  bufferedAmount = 0;
  readonly sent: Uint8Array[] = [];
  closedWith: number | null = null;
  send(data: Uint8Array): void {
    this.sent.push(Uint8Array.prototype.slice.call(data));
  }
  close(code = 1000): void {
    this.closedWith = code;
    this.readyState = 3;
    this.dispatchEvent(Object.assign(new Event('close'), { code }));
  }
  receive(data: ArrayBuffer | string): void {
    this.dispatchEvent(Object.assign(new Event('message'), { data }));
  }
}

function bytesOf(frame: Frame): ArrayBuffer {
  const encoded = encodeFrame(frame);
  return encoded.buffer.slice(encoded.byteOffset, encoded.byteOffset + encoded.byteLength) as ArrayBuffer;
}

function started(socket: FakeSocket) {
  const link = new BrowserSocketFrameLink(socket as unknown as WebSocket, 'stream-a');
  const frames: Frame[] = [];
  const closes: string[] = [];
  let drains = 0;
  link.start({
    onFrame: (frame) => frames.push(frame),
    onClose: (reason) => closes.push(reason),
    onDrain: () => drains++,
  });
  return { link, frames, closes, drains: () => drains };
}

afterEach(() => {
  vi.useRealTimers();
});

describe('BrowserSocketFrameLink', () => {
  it('asks for binary messages as ArrayBuffers', () => {
    const socket = new FakeSocket();
    started(socket);
    expect(socket.binaryType).toBe('arraybuffer');
  });

  it("hands over its stream's frames and drops another stream's", () => {
    const socket = new FakeSocket();
    const { link, frames, closes } = started(socket);
    socket.receive(bytesOf(dataFrame('stream-a', 0, Uint8Array.of(1, 2, 3))));
    socket.receive(bytesOf(dataFrame('stream-b', 0, Uint8Array.of(9))));
    expect(frames).toHaveLength(1);
    expect(frames[0]).toMatchObject({ kind: 'data', streamId: 'stream-a', seq: 0 });
    expect([...(frames[0] as Extract<Frame, { kind: 'data' }>).payload]).toEqual([1, 2, 3]);
    expect(link.foreignFrames).toBe(1);
    expect(closes).toEqual([]);
  });

  it('ends on a text message and on bytes that are not a frame, closing the socket as a protocol error', () => {
    for (const bad of ['hello', Uint8Array.of(0xff, 0xff, 0xff).buffer]) {
      const socket = new FakeSocket();
      const { frames, closes } = started(socket);
      socket.receive(bad as ArrayBuffer | string);
      expect(frames).toEqual([]);
      expect(closes).toHaveLength(1);
      expect(socket.closedWith).toBe(1002);
    }
  });

  it('sends each frame as its wire bytes and releases its buffer at once', () => {
    const socket = new FakeSocket();
    const { link } = started(socket);
    const release = vi.fn();
    expect(link.send(resetFrame('stream-a', 'stream_closed'), release)).toBe(true);
    expect(release).toHaveBeenCalledTimes(1);
    expect(decodeFrame(socket.sent[0]!)).toMatchObject({
      kind: 'reset',
      streamId: 'stream-a',
      reason: 'stream_closed',
    });
  });

  it('says when the socket queue is over the mark, and drains once it fell below the low one', () => {
    vi.useFakeTimers();
    const socket = new FakeSocket();
    const { link, drains } = started(socket);
    socket.bufferedAmount = 5 * 1024 * 1024;
    expect(link.send(resetFrame('stream-a', 'x'))).toBe(false);
    vi.advanceTimersByTime(50);
    expect(drains()).toBe(0);
    socket.bufferedAmount = 512 * 1024;
    vi.advanceTimersByTime(10);
    expect(drains()).toBe(1);
    expect(link.send(resetFrame('stream-a', 'y'))).toBe(true);
  });

  it('refuses to send once closed, still releasing the buffer, and reports the close once', () => {
    const socket = new FakeSocket();
    const { link, closes } = started(socket);
    link.close('done');
    socket.close(1006);
    const release = vi.fn();
    expect(link.send(resetFrame('stream-a', 'x'), release)).toBe(false);
    expect(release).toHaveBeenCalledTimes(1);
    expect(closes).toEqual(['done']);
  });
});

describe('readHashParams', () => {
  it('reads the environment and the grant of a sign-in link', () => {
    expect(readHashParams('#env=prod-1&grant=tbg_abc')).toEqual({ env: 'prod-1', grant: 'tbg_abc' });
    expect(readHashParams('#env=dev')).toEqual({ env: 'dev' });
    expect(readHashParams('')).toEqual({});
    expect(readHashParams('#grant=')).toEqual({});
  });

  it('reads a share link’s process and token too (as harness share prints them, percent-encoded)', () => {
    const fragment = new URLSearchParams({ env: 'dev', grant: 'tbgr_x', process: 'job.1', share: 'tsh_a-b_c' });
    expect(readHashParams(`#${fragment}`)).toEqual({
      env: 'dev',
      grant: 'tbgr_x',
      process: 'job.1',
      share: 'tsh_a-b_c',
    });
    expect(readHashParams('#env=dev&grant=g&process=&share=t')).toEqual({ env: 'dev', grant: 'g', share: 't' });
  });
});
