/**
 * What the relay benches share: the signing key a bench plays registry with, relay processes that trust it,
 * signed URLs, paired streams (one environment socket, one harness socket per stream) and the windowed
 * throughput run over them.
 */

import { generateKeyPairSync, randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { TAG_LENGTH_BYTES } from '@tether/noise';
import { nonceForGrant, type SigningKey, signRelayUrl } from '@tether/relay-auth';
import {
  ackFrame,
  dataFrame,
  decodeFrame,
  encodeFrame,
  handshakeFrame,
  MAX_RECORD_PLAINTEXT_BYTES,
  peekHeader,
  resumeFrame,
  streamKey,
} from '@tether/relay-frames';
import { WebSocket } from 'ws';
import { onCleanup, type ServiceProcess, startService } from './services.js';

/**
 * A Data frame's payload: the largest a stream carries, one Noise record of 60 KiB (MAX_RECORD_PLAINTEXT_BYTES)
 * and its AEAD tag (TAG_LENGTH_BYTES), as the executor and the SDK seal a long message (and codex does). Until 2026-12-07 the
 * bench sent 64 KiB, larger than any real frame: each then took two TCP segments on loopback (its 65,483-byte MSS)
 * where a real record takes one. `BENCH_RELAY_FRAME_BYTES` sets another size.
 */
export const FRAME_BYTES = Number(process.env.BENCH_RELAY_FRAME_BYTES ?? MAX_RECORD_PLAINTEXT_BYTES + TAG_LENGTH_BYTES);
/**
 * Bytes in flight (sent, not yet received) the sender allows, like a reader's window: without one, a sender
 * faster than its receiver makes the relay reset the stream (`relay_backpressure`, at 4 MiB queued), as designed.
 */
export const WINDOW_BYTES = 3 * 1024 * 1024;

export const tick = () => new Promise<void>((resolve) => setImmediate(resolve));
export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** A fresh Ed25519 key: the bench signs relay URLs as the registry would. */
export function benchSigningKey(): SigningKey {
  const pair = generateKeyPairSync('ed25519');
  return { privateKey: pair.privateKey, publicKey: pair.publicKey };
}

export function signedUrl(
  key: SigningKey,
  base: string,
  role: 'environment' | 'harness',
  environmentId: string,
): string {
  const expiresAt = Math.floor(Date.now() / 1000) + 3600;
  // A harness URL is one bundle's, with a nonce of its own, as the registry signs it: the relay bounds the sockets
  // of one URL (--max-sockets-per-url).
  const nonce = role === 'harness' ? { nonce: nonceForGrant() } : {};
  return signRelayUrl(base, { role, environmentId, registrationId: 'reg-bench', epoch: 1, expiresAt, ...nonce }, key);
}

export async function dial(target: string): Promise<WebSocket> {
  const ws = new WebSocket(target, { perMessageDeflate: false, maxPayload: 256 * 1024 });
  await once(ws, 'open');
  return ws;
}

/**
 * `relay serve` (the built bin) on 127.0.0.1 port 0, trusting `key` through `--registry-key-file`; its key file
 * is removed when it closes.
 */
export async function startRelay(
  key: SigningKey,
  options: { maxConnectionsPerIp: number; nodeArgs?: string[] },
): Promise<ServiceProcess> {
  const dir = mkdtempSync(join(tmpdir(), 'relay-bench-'));
  const removeDir = onCleanup(async () => rmSync(dir, { recursive: true, force: true }));
  const pem = join(dir, 'registry.pub.pem');
  writeFileSync(pem, key.publicKey.export({ type: 'spki', format: 'pem' }) as string);
  const relay = await startService(
    'relay',
    [
      'serve',
      '--listen',
      '127.0.0.1:0',
      '--registry-key-file',
      pem,
      '--max-connections-per-ip',
      String(options.maxConnectionsPerIp),
      // All from one address: the relay-wide cap (20 000 by default) must not be what a large run meets first.
      '--max-connections',
      String(Math.max(20_000, options.maxConnectionsPerIp)),
      '--log-level',
      'warn',
    ],
    options.nodeArgs ? { nodeArgs: options.nodeArgs } : {},
  );
  return {
    ...relay,
    close: async () => {
      await relay.close();
      await removeDir();
    },
  };
}

/** `relay_streams` from a relay's /metrics (claimed streams). */
export async function relayStreams(relayUrl: string): Promise<number> {
  const metrics = await (await fetch(`${relayUrl.replace('ws:', 'http:')}/metrics`)).text();
  const value = /^relay_streams(?:\{[^}]*\})? (\d+)$/m.exec(metrics)?.[1];
  if (value === undefined) throw new Error('the relay reports no relay_streams');
  return Number(value);
}

/** Two endpoints of a set of streams, paired through a relay or directly. */
export interface Pairing {
  /** The sending side (an environment socket, or the server side of direct sockets), one per stream. */
  senders: WebSocket[];
  /** The receiving side, one per stream. */
  receivers: WebSocket[];
  /** One encoded Data frame per stream, routed to that stream's receiver. */
  frames: Buffer[];
  close(): Promise<void>;
}

/**
 * `environments` environment sockets (default one) and `streams` harness sockets spread over them (stream i on
 * environment i mod `environments`), each stream claimed and answered.
 */
export async function viaRelay(key: SigningKey, relayUrl: string, streams: number, environments = 1): Promise<Pairing> {
  const label = `bench-${randomUUID().slice(0, 8)}`;
  const envs: WebSocket[] = [];
  let claims = 0;
  for (let e = 0; e < environments; e++) {
    const env = await dial(signedUrl(key, relayUrl, 'environment', `${label}-${e}`));
    // The environment sees each claim (Resume) before any traffic.
    env.on('message', () => claims++);
    envs.push(env);
  }
  const senders: WebSocket[] = [];
  const receivers: WebSocket[] = [];
  const frames: Buffer[] = [];
  for (let i = 0; i < streams; i++) {
    const streamId = randomUUID();
    const harness = await dial(signedUrl(key, relayUrl, 'harness', `${label}-${i % environments}`));
    harness.send(encodeFrame(resumeFrame(streamId, 0)));
    senders.push(envs[i % environments] as WebSocket);
    receivers.push(harness);
    frames.push(Buffer.from(encodeFrame(dataFrame(streamId, 1, Buffer.alloc(FRAME_BYTES, i)))));
  }
  while (claims < streams) await tick();
  for (const env of envs) env.removeAllListeners('message');
  // Answer every handshake so the streams are past the handshake stage, as in a real session.
  for (const [i, frame] of frames.entries()) {
    (senders[i] as WebSocket).send(encodeFrame(handshakeFrame(decodeFrame(frame).streamId, Buffer.from('m2'))));
  }
  await Promise.all(receivers.map((r) => once(r, 'message')));
  return {
    senders,
    receivers,
    frames,
    close: async () => {
      const all = [...envs, ...receivers];
      for (const ws of all) ws.close();
      await Promise.all(all.map((ws) => (ws.readyState === 3 ? null : once(ws, 'close'))));
    },
  };
}

/**
 * Sends `totalMiB` of Data frames (FRAME_BYTES) from the senders to the receivers, round-robin over the streams, and
 * waits until every byte arrived. Resolves with the bytes received and the seconds it took.
 */
export async function transfer(p: Pairing, totalMiB: number): Promise<{ bytes: number; seconds: number }> {
  const totalFrames = Math.floor((totalMiB * 1024 * 1024) / FRAME_BYTES);
  let received = 0;
  let bytes = 0;
  let wake: (() => void) | null = null;
  let resolveDone: () => void = () => {};
  const done = new Promise<void>((resolve) => {
    resolveDone = resolve;
  });
  for (const receiver of p.receivers) {
    receiver.on('message', (data: Buffer) => {
      bytes += data.length;
      if (++received === totalFrames) resolveDone();
      if (wake) {
        const w = wake;
        wake = null;
        w();
      }
    });
  }
  const start = performance.now();
  for (let sent = 0; sent < totalFrames; sent++) {
    const stream = sent % p.frames.length;
    const frame = p.frames[stream] as Buffer;
    // Event-driven: wait for the receiver to take data, no polling.
    while (sent * frame.length - bytes > WINDOW_BYTES) {
      await new Promise<void>((resolve) => {
        wake = resolve;
      });
    }
    (p.senders[stream] as WebSocket).send(frame, { binary: true });
  }
  await done;
  const seconds = (performance.now() - start) / 1000;
  for (const receiver of p.receivers) receiver.removeAllListeners('message');
  const expected = totalFrames * (p.frames[0] as Buffer).length;
  if (bytes !== expected) throw new Error(`received ${bytes} bytes, sent ${expected}`);
  return { bytes, seconds };
}

/** MB/s of `transfer`. */
export async function throughput(p: Pairing, totalMiB: number): Promise<number> {
  const { bytes, seconds } = await transfer(p, totalMiB);
  return bytes / 1e6 / seconds;
}

/** What each stream of an `activeTransfer` delivered. */
export interface ActiveRun {
  /** MB/s of each stream (in stream order) over the measured interval. */
  rates: number[];
  /** Their sum (MB/s). */
  aggregate: number;
  /** Bytes delivered in the whole run (measured interval, the settling before it and the drain after it). */
  bytes: number;
}

/**
 * Every stream at once, each sending Data frames (FRAME_BYTES) as fast as its own window lets it, for `seconds`. The
 * window is the receiver's, as in a real stream: the receiver answers every quarter window of frames with an `Ack`
 * on the same stream (back through the relay, or over the direct socket; Tether's SDK returns flow-control credit
 * every quarter window too), and a sender keeps at most `windowBytes` of frames not yet acknowledged, sending a
 * quarter window at a time. A stream's rate is what it delivered between `settleSeconds` and the end (every stream
 * runs throughout that interval), so the rates say how the streams shared the path. Then sending stops and the run
 * waits for every frame and every Ack in flight: each stream must have received exactly the frames it sent, each
 * one its own (its length, its first 64 bytes (field tags and stream id) and its last byte (the stream's fill
 * byte) compared), or the run throws. `atEnd` runs when the interval ends.
 *
 * Why Acks and not the sender counting what the receiver got (as `transfer` does): both ends live in this one
 * process, and a sender woken by its receiver's message sends within the read of the receiver's socket, which
 * libuv goes on reading (up to 32 reads a turn) while the turnaround refills it. The streams read last in a turn
 * then made several round trips to the others' one (slowest ÷ fastest ≈ 0.3 through the relay, with every frame
 * already delivered and waiting in the bench's sockets): the bench, not the path, picked the fast streams. An
 * Ack reaches the sender on another socket, as it would in another process.
 */
export async function activeTransfer(
  p: Pairing,
  options: { seconds: number; settleSeconds: number; windowBytes: number; atEnd?: () => void },
): Promise<ActiveRun> {
  /** Per stream: its frames, its ends, its window and Ack interval in frames, frames sent, received and acked. */
  const streams = p.receivers.map((receiver, i) => {
    const frame = p.frames[i] as Buffer;
    const streamId = decodeFrame(frame).streamId;
    const window = Math.max(4, Math.round(options.windowBytes / frame.length));
    return {
      frame,
      ack: Buffer.from(encodeFrame(ackFrame(streamId))),
      key: streamKey(streamId),
      sender: p.senders[i] as WebSocket,
      receiver,
      window,
      ackEvery: Math.floor(window / 4),
      sent: 0,
      received: 0,
      acked: 0,
    };
  });
  type Stream = (typeof streams)[number];
  const byKey = new Map(streams.map((s) => [s.key, s]));
  let sending = true;
  let failure: Error | null = null;
  let drained: (() => void) | null = null;
  /** Frames sent and not yet acknowledged, all streams. */
  let unacked = 0;
  /** Sends whole Ack intervals while the window has room for one, so that every frame sent is acknowledged. */
  const pump = (s: Stream) => {
    while (sending && s.sent - s.acked + s.ackEvery <= s.window) {
      for (let n = 0; n < s.ackEvery; n++) s.sender.send(s.frame, { binary: true });
      s.sent += s.ackEvery;
      unacked += s.ackEvery;
    }
  };
  for (const [i, s] of streams.entries()) {
    const { frame, receiver } = s;
    receiver.on('message', (data: Buffer) => {
      if (
        data.length !== frame.length ||
        data[data.length - 1] !== frame[frame.length - 1] ||
        data.compare(frame, 0, 64, 0, 64) !== 0
      ) {
        failure ??= new Error(`stream ${i} received a frame that is not its own (${data.length} bytes)`);
      }
      if (++s.received % s.ackEvery === 0) receiver.send(s.ack, { binary: true });
    });
  }
  for (const sender of new Set(streams.map((s) => s.sender))) {
    sender.on('message', (data: Buffer) => {
      const header = peekHeader(data);
      const s = header ? byKey.get(header.streamKey) : undefined;
      if (!s || header?.kind !== 'ack') {
        failure ??= new Error('a sender received something other than an Ack of one of its streams');
        return;
      }
      s.acked += s.ackEvery;
      unacked -= s.ackEvery;
      if (sending) pump(s);
      else if (unacked === 0) drained?.();
    });
  }
  for (const s of streams) pump(s);
  await sleep(options.settleSeconds * 1000);
  const from = streams.map((s) => s.received);
  const t0 = performance.now();
  await sleep((options.seconds - options.settleSeconds) * 1000);
  const to = streams.map((s) => s.received);
  const t1 = performance.now();
  options.atEnd?.();
  sending = false;
  if (unacked > 0) {
    // Every frame in flight must arrive and be acknowledged; one that is not within a minute fails the run below.
    const timeout = setTimeout(() => drained?.(), 60_000);
    await new Promise<void>((resolve) => {
      drained = resolve;
    });
    clearTimeout(timeout);
  }
  for (const s of streams) {
    s.receiver.removeAllListeners('message');
    s.sender.removeAllListeners('message');
  }
  if (failure) throw failure;
  for (const [i, s] of streams.entries()) {
    if (s.received !== s.sent || s.acked !== s.sent) {
      throw new Error(`stream ${i}: ${s.sent} frames sent, ${s.received} received, ${s.acked} acknowledged`);
    }
  }
  const seconds = (t1 - t0) / 1000;
  const rates = streams.map((s, i) => (((to[i] as number) - (from[i] as number)) * s.frame.length) / 1e6 / seconds);
  const bytes = streams.reduce((sum, s) => sum + s.received * s.frame.length, 0);
  return { rates, aggregate: rates.reduce((a, b) => a + b, 0), bytes };
}

/**
 * `environments` environment sockets named `<label>-<n>`, each answering every claim with a handshake frame, so
 * that every stream claimed on them is fully paired.
 */
export async function openEnvironments(
  key: SigningKey,
  relayUrl: string,
  options: { environments: number; label: string },
): Promise<WebSocket[]> {
  const sockets: WebSocket[] = [];
  for (let e = 0; e < options.environments; e++) {
    const env = await dial(signedUrl(key, relayUrl, 'environment', `${options.label}-${e}`));
    env.on('message', (data: Buffer) => {
      env.send(encodeFrame(handshakeFrame(decodeFrame(data).streamId, Buffer.from('m2'))));
    });
    sockets.push(env);
  }
  return sockets;
}

/**
 * `streams` idle harness sockets spread over the environments `openEnvironments` opened with the same label and
 * count, each claiming a stream and waiting for its answer (250 dialled at a time).
 */
export async function openIdleStreams(
  key: SigningKey,
  relayUrl: string,
  options: { streams: number; environments: number; label: string },
): Promise<WebSocket[]> {
  const sockets: WebSocket[] = [];
  const BATCH = 250;
  for (let i = 0; i < options.streams; i += BATCH) {
    const batch = await Promise.all(
      Array.from({ length: Math.min(BATCH, options.streams - i) }, async (_, j) => {
        const ws = await dial(
          signedUrl(key, relayUrl, 'harness', `${options.label}-${(i + j) % options.environments}`),
        );
        const answered = once(ws, 'message');
        ws.send(encodeFrame(resumeFrame(randomUUID(), 0)));
        await answered;
        return ws;
      }),
    );
    sockets.push(...batch);
  }
  return sockets;
}
