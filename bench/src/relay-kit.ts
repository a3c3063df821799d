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
import { nonceForGrant, type SigningKey, signRelayUrl } from '@tether/relay-auth';
import { dataFrame, decodeFrame, encodeFrame, handshakeFrame, resumeFrame } from '@tether/relay-frames';
import { WebSocket } from 'ws';
import { onCleanup, type ServiceProcess, startService } from './services.js';

export const FRAME_BYTES = 64 * 1024;
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

/** One environment socket and `streams` harness sockets on it, each stream claimed and answered. */
export async function viaRelay(key: SigningKey, relayUrl: string, streams: number): Promise<Pairing> {
  const environmentId = `bench-${randomUUID().slice(0, 8)}`;
  const env = await dial(signedUrl(key, relayUrl, 'environment', environmentId));
  const receivers: WebSocket[] = [];
  const frames: Buffer[] = [];
  const claimed = new Set<string>();
  env.on('message', (data: Buffer) => {
    // The environment sees each claim (Resume) before any traffic; remember the stream ids.
    claimed.add(data.toString('latin1'));
  });
  for (let i = 0; i < streams; i++) {
    const streamId = randomUUID();
    const harness = await dial(signedUrl(key, relayUrl, 'harness', environmentId));
    harness.send(encodeFrame(resumeFrame(streamId, 0)));
    receivers.push(harness);
    frames.push(Buffer.from(encodeFrame(dataFrame(streamId, 1, Buffer.alloc(FRAME_BYTES, i)))));
  }
  while (claimed.size < streams) await tick();
  env.removeAllListeners('message');
  // Answer every handshake so the streams are past the handshake stage, as in a real session.
  for (const frame of frames) env.send(encodeFrame(handshakeFrame(decodeFrame(frame).streamId, Buffer.from('m2'))));
  await Promise.all(receivers.map((r) => once(r, 'message')));
  return {
    senders: receivers.map(() => env),
    receivers,
    frames,
    close: async () => {
      for (const ws of [env, ...receivers]) ws.close();
      await Promise.all([env, ...receivers].map((ws) => (ws.readyState === 3 ? null : once(ws, 'close'))));
    },
  };
}

/**
 * Sends `totalMiB` of 64 KiB Data frames from the senders to the receivers, round-robin over the streams, and
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
