import { randomUUID } from 'node:crypto';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { dataFrame, encodeFrame, type Frame, handshakeFrame, resumeFrame } from '@tether/relay-frames';
import { describe, expect, it } from 'vitest';
import type { WebSocket } from 'ws';
import { Endpoint, metric, signedUrl, startRelay } from './__tests__/support.js';
import { CLOSE } from './limits.js';

const FRAME_PAYLOAD = Buffer.alloc(64 * 1024, 7);
const MiB = 1024 * 1024;
// A full GC before each RSS sample, so garbage awaiting collection is not counted as growth.
setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;
const tick = () => new Promise<void>((resolve) => setImmediate(resolve));

/** Sends and yields while the sender's own buffer is full, so the test process never queues much itself. */
async function sendThrottled(ws: WebSocket, bytes: Uint8Array) {
  ws.send(bytes, { binary: true });
  while (ws.bufferedAmount > 256 * 1024) await tick();
}

async function answeredStream(url: string, env: Endpoint, storeData = true) {
  const streamId = randomUUID();
  const harness = await Endpoint.open(signedUrl(url, 'harness', 'env-1'), { storeData });
  harness.send(resumeFrame(streamId, 0));
  await env.next((f) => f.kind === 'resume' && f.streamId === streamId);
  env.send(handshakeFrame(streamId, Buffer.from('msg2')));
  await harness.next((f) => f.kind === 'handshake');
  return { harness, streamId };
}

describe('backpressure', () => {
  it('resets a harness that stops reading (relay_backpressure) with bounded memory, and the other stream keeps flowing', async () => {
    const bound = 2 * MiB;
    const { url, relay } = await startRelay({ harnessMaxBufferedBytes: bound, closeGraceMs: 200 });
    const env = await Endpoint.open(signedUrl(url, 'environment', 'env-1'), { storeData: false });
    const stalled = await answeredStream(url, env, false);
    const reader = await answeredStream(url, env, false);
    stalled.harness.ws.pause(); // stops reading its socket: the kernel buffers fill, then the relay's

    const toStalled = encodeFrame(dataFrame(stalled.streamId, 1, FRAME_PAYLOAD));
    const toReader = encodeFrame(dataFrame(reader.streamId, 1, FRAME_PAYLOAD));
    const isBackpressureReset = (f: Frame) =>
      f.kind === 'reset' && f.streamId === stalled.streamId && f.reason === 'relay_backpressure';
    gc();
    const rssBefore = process.memoryUsage().rss;
    let rssGrowth = 0;
    let maxQueued = 0;
    let sentToReader = 0;
    let sentToStalled = 0;
    // 256 MiB towards the stalled stream (far more than any buffer on the way), interleaved with the reader's.
    for (let i = 0; i < 4096; i++) {
      await sendThrottled(env.ws, toStalled);
      sentToStalled++;
      await sendThrottled(env.ws, toReader);
      sentToReader++;
      // The reader behaves like a harness with a 1 MiB window: it is never the one that falls behind, however
      // slowly this process gets scheduled (the relay's bound for it is 2 MiB).
      while (sentToReader - reader.harness.dataFrames > 16) await tick();
      maxQueued = Math.max(maxQueued, relay.stats().queuedBytes.harness);
      if (i % 128 === 127) {
        gc();
        rssGrowth = Math.max(rssGrowth, process.memoryUsage().rss - rssBefore);
      }
    }
    await env.next(isBackpressureReset, 'the relay_backpressure Reset');

    // The reader got every frame although its neighbour never read again.
    await reader.harness.dataCount(sentToReader);
    expect(reader.harness.frames.filter((f) => f.kind === 'reset')).toEqual([]);
    expect(relay.stats().streams).toBe(1);
    // The relay never queued much more than the bound for the stalled harness plus one frame (and the reader's).
    expect(maxQueued).toBeLessThanOrEqual(bound + 4 * toStalled.byteLength);
    expect(sentToStalled * FRAME_PAYLOAD.byteLength).toBe(256 * MiB);
    // Without the bound the relay would hold most of 256 MiB for the stalled harness; allocator churn from the traffic stays well below.
    expect(rssGrowth).toBeLessThan(64 * MiB);
    expect(metric(relay, 'relay_resets_total{reason="relay_backpressure"}')).toBe(1);
    expect(metric(relay, 'relay_drops_total{reason="unknown_stream"}')).toBeGreaterThan(0);
    // The stalled socket is cut after the grace, freeing what was queued for it; reading again, the harness
    // sees the end of its socket.
    await expect.poll(() => relay.stats().harnessSockets).toBe(1);
    expect(relay.stats().queuedBytes.harness).toBeLessThan(FRAME_PAYLOAD.byteLength * 2);
    stalled.harness.ws.resume();
    const closed = await stalled.harness.closed;
    expect([CLOSE.BACKPRESSURE, 1006]).toContain(closed.code);
  });

  it('pauses a harness while its environment socket is behind and resumes it on drain, losing nothing', async () => {
    const highWater = 512 * 1024;
    const { url, relay } = await startRelay({ environmentHighWaterBytes: highWater });
    const env = await Endpoint.open(signedUrl(url, 'environment', 'env-1'), { storeData: false });
    const { harness, streamId } = await answeredStream(url, env);
    env.ws.pause(); // the executor stops reading

    const frame = encodeFrame(dataFrame(streamId, 1, FRAME_PAYLOAD));
    let sent = 0;
    let maxQueued = 0;
    // Write until the relay pauses the harness; the harness's own buffer then grows, not the relay's.
    while (relay.stats().pausedHarnessSockets === 0 && sent < 4096) {
      harness.ws.send(frame, { binary: true });
      sent++;
      await tick();
      maxQueued = Math.max(maxQueued, relay.stats().queuedBytes.environment);
    }
    expect(relay.stats().pausedHarnessSockets).toBe(1);
    for (let i = 0; i < 64; i++) {
      harness.ws.send(frame, { binary: true });
      sent++;
      await tick();
      maxQueued = Math.max(maxQueued, relay.stats().queuedBytes.environment);
    }
    expect(relay.stats().pausedHarnessSockets).toBe(1);
    expect(maxQueued).toBeLessThanOrEqual(highWater + 2 * frame.byteLength);
    expect(metric(relay, 'relay_backpressure_pauses_total')).toBeGreaterThanOrEqual(1);

    env.ws.resume();
    await env.dataCount(sent);
    expect(env.dataFrames).toBe(sent);
    await expect.poll(() => relay.stats().pausedHarnessSockets).toBe(0);
    expect(env.frames.filter((f) => f.kind === 'reset')).toEqual([]);
  });

  it('lets a paused harness finish its close handshake when its environment goes away', async () => {
    // A grace longer than the test: only a completed close handshake (code 1001) can end the harness socket.
    const { url, relay } = await startRelay({ environmentHighWaterBytes: 256 * 1024, closeGraceMs: 60_000 });
    const env = await Endpoint.open(signedUrl(url, 'environment', 'env-1'), { storeData: false });
    const { harness, streamId } = await answeredStream(url, env);
    env.ws.pause();
    const frame = encodeFrame(dataFrame(streamId, 1, FRAME_PAYLOAD));
    for (let sent = 0; relay.stats().pausedHarnessSockets === 0 && sent < 4096; sent++) {
      harness.ws.send(frame, { binary: true });
      await tick();
    }
    expect(relay.stats().pausedHarnessSockets).toBe(1);
    env.ws.terminate();
    expect(await harness.next((f) => f.kind === 'reset')).toMatchObject({ reason: 'environment_closed' });
    expect((await harness.closed).code).toBe(CLOSE.GOING_AWAY);
    await expect.poll(() => relay.stats().harnessSockets).toBe(0);
    expect(relay.stats().pausedHarnessSockets).toBe(0);
  });
});
