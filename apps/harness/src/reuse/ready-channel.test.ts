import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { OpenedChannel } from '@tether/client';
import { describe, expect, it, vi } from 'vitest';
import { holdChannel, parseWarmChannelSpec, ReadyChannel, type WarmChannelSpec } from './ready-channel.js';

type MessageTransport = OpenedChannel['transport'];
type Handlers = Parameters<MessageTransport['start']>[0];

const spec: WarmChannelSpec = {
  registryUrl: 'http://registry.invalid',
  environmentId: 'env-1',
  apiKey: 'secret-key',
  allowInsecureRegistry: true,
  executorPublicKey: null,
  socket: '/run/x.sock',
};

/** A transport double: records what is sent and closed, and lets the test speak as the executor. */
function fakeChannel(label: string) {
  let handlers: Handlers | null = null;
  const sent: Array<string | Buffer> = [];
  const closed: string[] = [];
  const transport: MessageTransport = {
    kind: 'websocket',
    label,
    carriesAttachments: true,
    start: (h) => {
      if (handlers) throw new Error('started twice');
      handlers = h;
    },
    send: (message) => {
      sent.push(message);
      return true;
    },
    bufferedAmount: 0,
    pause: () => undefined,
    resume: () => undefined,
    close: (_code, reason) => {
      closed.push(reason ?? '');
    },
  };
  const channel: OpenedChannel = {
    transport,
    executorPublicKey: {
      suite: 'Noise_hybridIK_X25519+MLKEM768_AESGCM_SHA256',
      x25519: new Uint8Array(32),
      mlkem768: new Uint8Array(1184),
    },
  };
  return {
    channel,
    sent,
    closed,
    say: (data: string) => handlers?.onMessage(data),
    hangUp: (reason: string) => handlers?.onClose(reason),
  };
}

/** A dial that hands out the given channels in turn, once `release` lets each through. */
function dials(...channels: Array<ReturnType<typeof fakeChannel>>) {
  const calls: AbortSignal[] = [];
  const waiting: Array<() => void> = [];
  const dial = (signal: AbortSignal) => {
    calls.push(signal);
    const next = channels.shift();
    return new Promise<OpenedChannel>((resolve, reject) => {
      waiting.push(() => (next ? resolve(next.channel) : reject(new Error('no more channels'))));
    });
  };
  return { dial, calls, release: () => waiting.shift()?.() };
}

const settle = () => new Promise((resolve) => setImmediate(resolve));

describe('ReadyChannel', () => {
  it('holds one channel, hands it over once with what arrived before its start, and dials no more', async () => {
    const first = fakeChannel('first');
    const { dial, calls, release } = dials(first);
    const states: boolean[] = [];
    const ready = new ReadyChannel(spec, { log: () => undefined, dial, onReady: (r) => states.push(r) }).start();
    expect(ready.take()).toBeNull(); // not set up yet: the caller goes to the master; this holder is done
    release();
    await settle();
    // Its dial was aborted; a channel that comes all the same is closed.
    expect(calls[0]?.aborted).toBe(true);
    expect(first.closed).toEqual(['not needed any more']);
    expect(calls).toHaveLength(1);
    expect(states).toEqual([]);

    const second = fakeChannel('second');
    const again = dials(second);
    const holder = new ReadyChannel(spec, { log: () => undefined, dial: again.dial, onReady: (r) => states.push(r) });
    holder.start();
    again.release();
    await settle();
    expect(holder.ready).toBe(true);
    expect(states).toEqual([true]);
    const taken = holder.take();
    expect(taken?.executorPublicKey).toBe(second.channel.executorPublicKey);
    expect(holder.take()).toBeNull();
    // A message and a close before the command started the transport wait for it.
    second.say('early');
    second.hangUp('gone');
    const got: string[] = [];
    taken?.transport.start({
      onMessage: (data) => got.push(String(data)),
      onClose: (reason) => got.push(`close ${reason}`),
      onDrain: () => undefined,
    });
    expect(got).toEqual(['early', 'close gone']);
    expect(() => taken?.transport.start({ onMessage() {}, onClose() {}, onDrain() {} })).toThrow(/already started/);
    taken?.transport.send('hello');
    expect(second.sent).toEqual(['hello']);
    expect(again.calls).toHaveLength(1);
    holder.close(); // nothing held: the command's channel is untouched
    expect(second.closed).toEqual([]);
  });

  it('replaces a channel that closes or speaks while idle, and one that got old', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    try {
      const channels = [fakeChannel('a'), fakeChannel('b'), fakeChannel('c'), fakeChannel('d')];
      const [a, b, c, d] = channels;
      const { dial, calls, release } = dials(...channels);
      const states: boolean[] = [];
      const holder = new ReadyChannel(spec, {
        log: () => undefined,
        dial,
        onReady: (r) => states.push(r),
        maxAgeMs: 60_000,
      }).start();
      release();
      await settle();
      a?.hangUp('relay reset');
      expect(holder.ready).toBe(false);
      release();
      await settle();
      b?.say('unexpected');
      expect(b?.closed).toEqual(['unexpected message on an idle channel']);
      release();
      await settle();
      vi.advanceTimersByTime(60_000);
      expect(c?.closed).toEqual(['replaced (age)']);
      release();
      await settle();
      expect(calls).toHaveLength(4);
      expect(states).toEqual([true, false, true, false, true, false, true]);
      holder.close();
      expect(d?.closed).toEqual(['warm process closing']);
      expect(holder.ready).toBe(false);
    } finally {
      vi.useRealTimers();
    }
  });

  it('retries a failed set-up with backoff, logs without the key, and stops on close', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    try {
      const { dial, calls, release } = dials();
      const lines: string[] = [];
      const holder = new ReadyChannel(spec, { log: (line) => lines.push(line), dial }).start();
      release();
      await settle();
      expect(lines).toEqual(['warm process: channel set-up failed (retrying in 200 ms): no more channels']);
      vi.advanceTimersByTime(200);
      release();
      await settle();
      expect(lines[1]).toContain('retrying in 400 ms');
      expect(lines.join('\n')).not.toContain(spec.apiKey);
      holder.close();
      vi.advanceTimersByTime(10_000);
      expect(calls).toHaveLength(2);
    } finally {
      vi.useRealTimers();
    }
  });
});

describe('the spec a master sends its warm process', () => {
  it('is taken only whole', () => {
    expect(parseWarmChannelSpec(spec)).toEqual(spec);
    expect(parseWarmChannelSpec(JSON.parse(JSON.stringify(spec)))).toEqual(spec);
    for (const broken of [
      null,
      'x',
      { ...spec, socket: 3 },
      { ...spec, apiKey: undefined },
      { ...spec, executorPublicKey: 'k' },
    ]) {
      expect(parseWarmChannelSpec(broken)).toBeNull();
    }
    expect(
      holdChannel(
        { nonsense: true },
        () => undefined,
        () => undefined,
      ),
    ).toBeNull();
  });
});

describe('a command a warm process runs', () => {
  it("closes the warm process's channel at once when it connects to another master's environment", async () => {
    const { connectRendezvous } = await import('./client.js');
    const { masterPaths } = await import('./paths.js');
    const runtime = mkdtempSync(join(tmpdir(), 'ready-'));
    try {
      const env = { XDG_RUNTIME_DIR: runtime };
      const options = {
        registryUrl: 'http://127.0.0.1:1',
        apiKey: 'other-key',
        environmentId: 'env-2',
        allowInsecureRegistry: true,
        clientName: 'test',
        connectRetry: false as const,
      };
      const own = fakeChannel('own');
      const { dial, release } = dials(own);
      const holder = new ReadyChannel(
        { ...spec, socket: masterPaths({ ...options, environmentId: 'env-1' }, env).socket },
        { log: () => undefined, dial },
      ).start();
      release();
      await settle();
      expect(holder.ready).toBe(true);
      // Nothing listens on port 1: the direct dial fails, after the channel was closed.
      await expect(connectRendezvous(options, env, holder)).rejects.toThrow();
      expect(own.closed).toEqual(['warm process closing']);
    } finally {
      rmSync(runtime, { recursive: true, force: true });
    }
  });
});
