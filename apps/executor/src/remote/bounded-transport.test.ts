import type { MessageTransport, TransportHandlers } from '@tether/jsonrpc';
import { describe, expect, it } from 'vitest';
import { BoundedTransport } from './bounded-transport.js';

/** A transport stand-in whose messages the test delivers, with the release a pooled buffer comes with. */
function innerTransport() {
  let handlers: TransportHandlers | null = null;
  const sent: string[] = [];
  const inner = {
    kind: 'relay',
    label: 'stand-in',
    carriesAttachments: true,
    bufferedAmount: 0,
    start: (h: TransportHandlers) => {
      handlers = h;
    },
    send: (data: string | Buffer) => {
      sent.push(data.toString());
      return true;
    },
    close: () => {},
    pause: () => {},
    resume: () => {},
  } as unknown as MessageTransport;
  return { inner, sent, deliver: (data: Buffer, release: () => void) => handlers?.onMessage(data, release) };
}

describe('BoundedTransport', () => {
  it('hands a message on with its release, and releases one it refuses as too large', () => {
    const { inner, sent, deliver } = innerTransport();
    const bounded = new BoundedTransport(inner, 16);
    const received: Array<{ data: string; release: (() => void) | undefined }> = [];
    bounded.start({
      onMessage: (data, release) => received.push({ data: data.toString(), release }),
      onClose: () => {},
      onDrain: () => {},
    });
    let released = 0;
    const release = () => {
      released++;
    };
    deliver(Buffer.from('{"id":1}'), release);
    expect(received).toEqual([{ data: '{"id":1}', release }]);
    expect(released).toBe(0);
    deliver(Buffer.alloc(17, 0x20), release);
    expect(received).toHaveLength(1);
    expect(released).toBe(1);
    expect(sent).toHaveLength(1);
  });
});
