import { randomUUID } from 'node:crypto';
import { RpcConnection } from '@tether/jsonrpc';
import { generateIdentity, publicKeyToJson } from '@tether/noise';
import { dataFrame, encodeFrame, type Frame, handshakeFrame, resetFrame, resumeFrame } from '@tether/relay-frames';
import { SecureStreamError } from '@tether/secure-stream';
import { createLogger, Telemetry } from '@tether/telemetry';
import { describe, expect, it } from 'vitest';
import { ExecutorMetrics } from '../metrics.js';
import { keyPrincipal, type Principal, UNATTRIBUTED_PRINCIPAL } from '../principal.js';
import { ExecServer } from '../server.js';
import { cleanups, framesOn, openSecureStream, openStream, setup, waitFor } from './__tests__/rig.js';
import { BACKPRESSURE_RESET, HANDSHAKE_BUDGET_RESET, LIMIT_RESET, UNKNOWN_STREAM_RESET } from './multiplexer.js';

describe('remote mode: registration and streams', () => {
  it('registers its key, and serves a stream the registry validates', async () => {
    const { rendezvous, link, socket } = await setup();
    expect(rendezvous.registers).toEqual([
      { security_profile: 'noise_hybrid_ik_v1', executor_public_key: publicKeyToJson(link.identity.publicKey) },
    ]);
    const { client, identity } = await openStream(socket, link);
    expect(rendezvous.validations).toEqual([
      {
        executor_registration_id: 'reg-1',
        harness_public_key: publicKeyToJson(identity.publicKey),
        harness_key_authorization: 'authorization-1',
      },
    ]);
    const init = await client.call<{ sessionId: string }>('initialize', { clientName: 'remote-test' });
    expect(init.sessionId).toMatch(/^[0-9a-f-]{36}$/);
  });

  it('serves many streams on one socket, each with its own session', async () => {
    const { link, socket } = await setup();
    const streams = await Promise.all([1, 2, 3].map((n) => openStream(socket, link, `authorization-${n}`)));
    const sessions = await Promise.all(
      streams.map(({ client }) => client.call<{ sessionId: string }>('initialize', { clientName: 'mux' })),
    );
    expect(new Set(sessions.map((s) => s.sessionId)).size).toBe(3);
  });

  it('resets a stream the registry refuses, without answering the handshake', async () => {
    const { rendezvous, link, socket } = await setup();
    rendezvous.valid = false;
    await expect(openStream(socket, link)).rejects.toMatchObject({ name: SecureStreamError.NAME, code: 'reset' });
    expect(rendezvous.validations).toHaveLength(1);
  });

  it('resets streams beyond its stream limit and keeps serving the others', async () => {
    const { link, socket } = await setup({ limits: { maxStreams: 1 } });
    const first = await openStream(socket, link);
    const frames = framesOn(socket);
    const refused = randomUUID();
    socket.send(encodeFrame(resumeFrame(refused)));
    socket.send(encodeFrame(handshakeFrame(refused, new Uint8Array(64).fill(1))));
    await waitFor(() => frames.some((f) => f.streamId === refused), 'the refusal');
    expect(frames.find((f) => f.streamId === refused)).toMatchObject({ kind: 'reset', reason: LIMIT_RESET });
    await expect(first.client.call('initialize', { clientName: 'still-served' })).resolves.toBeDefined();
  });

  it('queues handshakes beyond its validation limit instead of refusing them', async () => {
    const { rendezvous, link, socket } = await setup({ limits: { maxPendingValidations: 2 } });
    rendezvous.validateDelayMs = 50;
    const streams = await Promise.all([1, 2, 3, 4, 5, 6].map((n) => openStream(socket, link, `authorization-${n}`)));
    const sessions = await Promise.all(
      streams.map(({ client }) => client.call<{ sessionId: string }>('initialize', { clientName: 'burst' })),
    );
    expect(new Set(sessions.map((s) => s.sessionId)).size).toBe(6);
    expect(rendezvous.validations).toHaveLength(6);
    expect(rendezvous.peakValidations).toBe(2);
  });

  it('failed handshakes spend a budget that refills: while it is spent new streams are reset unread, the socket stays', async () => {
    let now = 0;
    const { link, socket, rendezvous } = await setup({
      limits: { failedHandshakeBurst: 3, failedHandshakeRefillMs: 1_000 },
      clock: () => now,
    });
    const healthy = await openStream(socket, link, 'before-the-garbage');
    const frames = framesOn(socket);
    const garbage = async (expectedReason: string) => {
      const streamId = randomUUID();
      socket.send(encodeFrame(handshakeFrame(streamId, new Uint8Array(40).fill(7))));
      await waitFor(() => frames.some((f) => f.streamId === streamId), 'the reset of a garbage handshake');
      expect(frames.find((f) => f.streamId === streamId)).toMatchObject({ kind: 'reset', reason: expectedReason });
    };
    for (let i = 0; i < 3; i++) await garbage('noise_relay_protocol_error');
    // Spent: garbage and a good harness alike are reset before any decryption; no /validate is asked.
    await garbage(HANDSHAKE_BUDGET_RESET);
    await expect(openStream(socket, link, 'during-the-spell')).rejects.toMatchObject({ code: 'reset' });
    expect(rendezvous.validations).toHaveLength(1);
    expect(link.streams).toBe(1);
    // The socket and the stream opened before are untouched.
    await expect(healthy.client.call('initialize', { clientName: 'still-served' })).resolves.toBeDefined();
    expect(rendezvous.sockets).toHaveLength(1);
    expect(socket.readyState).toBe(socket.OPEN);
    // One refill period later a handshake goes through again.
    now += 1_000;
    const after = await openStream(socket, link, 'after-the-spell');
    await expect(after.client.call('initialize', { clientName: 'after' })).resolves.toBeDefined();
  });

  it('rate-limits /validate per harness key: a key over its budget is refused without asking the registry', async () => {
    let now = 0;
    const { link, socket, rendezvous } = await setup({
      limits: { validationBurstPerKey: 2, validationRefillMs: 1_000 },
      clock: () => now,
    });
    const busy = generateIdentity();
    await openStream(socket, link, 'busy-1', busy);
    await openStream(socket, link, 'busy-2', busy);
    await expect(openStream(socket, link, 'busy-3', busy)).rejects.toMatchObject({ code: 'reset' });
    expect(rendezvous.validations.map((v) => v.harness_key_authorization)).toEqual(['busy-1', 'busy-2']);
    // Another harness key has its own budget; a refused handshake does not spend the socket's.
    await openStream(socket, link, 'other-1');
    expect(rendezvous.validations).toHaveLength(3);
    now += 1_000;
    await openStream(socket, link, 'busy-4', busy);
    expect(rendezvous.validations.map((v) => v.harness_key_authorization)).toEqual([
      'busy-1',
      'busy-2',
      'other-1',
      'busy-4',
    ]);
  });

  it('holds relay-stream messages to max_message_bytes: a larger one gets a clear error, the stream goes on', async () => {
    const limit = 256 * 1024;
    const { link, socket } = await setup({ maxMessageBytes: limit });
    const stream = await openSecureStream(socket, link);
    const received: Array<{ id?: unknown; result?: unknown; error?: { code: number; message: string } }> = [];
    stream.start({
      onMessage: (data) => received.push(JSON.parse(data.toString())),
      onClose: () => undefined,
      onDrain: () => undefined,
    });
    const initialize = (id: number, clientName: string) =>
      stream.send(JSON.stringify({ id, method: 'initialize', params: { clientName } }));
    initialize(1, 'x'.repeat(limit + 1));
    await waitFor(() => received.length >= 1, 'the refusal');
    expect(received[0]).toEqual({
      id: -1,
      error: {
        code: -32600,
        message: expect.stringMatching(/message of 262\d{3} bytes exceeds the limit of 262144 bytes$/),
      },
    });
    initialize(2, 'within-the-limit');
    await waitFor(() => received.length >= 2, 'the answer');
    expect(received[1]).toMatchObject({ id: 2, result: { sessionId: expect.any(String) } });
    expect(stream.status).toBe('open');
  });

  it('stops a relay-stream message while it arrives once its bytes are past max_message_bytes (no 64 MiB buffered)', async () => {
    const limit = 256 * 1024;
    const { link, socket } = await setup({ maxMessageBytes: limit });
    const stream = await openSecureStream(socket, link);
    const received: Array<{ id?: unknown; error?: { code: number; message: string } }> = [];
    let closed = '';
    stream.start({
      onMessage: (data) => received.push(JSON.parse(data.toString())),
      onClose: (reason) => {
        closed = reason;
      },
      onDrain: () => undefined,
    });
    // 8 MiB declared: far past the bound (limit + framing + one record + the reorder window ≈ 1.4 MiB).
    stream.send(JSON.stringify({ id: 1, method: 'initialize', params: { clientName: 'x'.repeat(8 * 1024 * 1024) } }));
    await waitFor(() => closed !== '', 'the stream to be reset');
    expect(received).toEqual([
      {
        id: -1,
        error: {
          code: -32600,
          message: expect.stringMatching(/message of more than 262144 bytes \(still arriving\) exceeds the limit$/),
        },
      },
    ]);
    expect(link.streams).toBe(0);
  });

  it('ignores text messages, and answers Data for a stream it does not know with one Reset', async () => {
    const { link, socket } = await setup();
    const frames = framesOn(socket);
    socket.send('{"method":"initialize"}');
    socket.send(
      encodeFrame({
        kind: 'data',
        version: 1,
        streamId: 'nobody',
        ack: 0,
        ackBits: 0,
        seq: 0,
        segmentIndex: 0,
        segmentCount: 1,
        payload: new Uint8Array([1]),
      } as Frame),
    );
    const { client } = await openStream(socket, link);
    await expect(client.call('initialize', { clientName: 'after-noise' })).resolves.toBeDefined();
    expect(frames.filter((f) => f.streamId === 'nobody')).toEqual([
      expect.objectContaining({ kind: 'reset', reason: UNKNOWN_STREAM_RESET }),
    ]);
  });

  it('counts every frame it drops by reason, and logs Data for an unknown stream once per stream id', async () => {
    const telemetry = await Telemetry.create({ serviceName: 'executor-test', prometheus: true });
    const lines: Array<Record<string, unknown>> = [];
    const logger = createLogger({
      name: 'executor',
      level: 'debug',
      destination: { write: (line: string) => lines.push(JSON.parse(line) as Record<string, unknown>) },
    });
    const { link, socket } = await setup({ metrics: new ExecutorMetrics(telemetry), logger });
    const frames = framesOn(socket);
    socket.send('text');
    socket.send(Buffer.from([0xff, 0xff, 0xff]));
    for (let seq = 0; seq < 3; seq++) socket.send(encodeFrame(dataFrame('nobody', seq, new Uint8Array([seq + 1]))));
    socket.send(encodeFrame(dataFrame('nobody-else', 0, new Uint8Array([1]))));
    const { client } = await openStream(socket, link); // after the noise above, on the same socket
    await client.call('initialize', { clientName: 'after-drops' });
    await waitFor(() => frames.filter((f) => f.kind === 'reset').length >= 2, 'the resets');
    const text = await telemetry.prometheus();
    const series = (reason: string) =>
      Number(
        new RegExp(`^exec_server_remote_relay_frames_dropped_total\\{[^}]*reason="${reason}"[^}]*\\} (\\d+)`, 'm').exec(
          text,
        )?.[1],
      );
    expect({ unknown: series('unknown_stream'), invalid: series('invalid'), text: series('text') }).toEqual({
      unknown: 4,
      invalid: 1,
      text: 1,
    });
    const warned = lines.filter(
      (l) => l.msg === 'dropped relay data for a stream this socket does not know; resetting it',
    );
    expect(warned.map((l) => [l.level, l.streamId])).toEqual([
      [40, 'nobody'],
      [40, 'nobody-else'],
    ]);
  });

  it('frees a stream slot when the relay resets the stream (harness gone), however many times', async () => {
    const { link, socket } = await setup({ limits: { maxStreams: 2 } });
    for (let round = 0; round < 6; round++) {
      const { client, streamId } = await openStream(socket, link, `authorization-${round}`);
      await client.call('initialize', { clientName: `round-${round}` });
      // What the relay sends when a harness socket closes.
      socket.send(encodeFrame(resetFrame(streamId, 'harness_closed')));
      await waitFor(() => link.streams === 0, 'the slot to be freed');
    }
  });

  it('resets a stream whose consumer stopped taking frames once its queue passes the bound', async () => {
    const { link, socket } = await setup({
      limits: { maxQueuedBytesPerStream: 64 * 1024 },
      // The executor side stops reading this stream (as a JSON-RPC connection with full lanes does).
      onStream: (stream) => stream.pause(),
    });
    const { streamId } = await openStream(socket, link);
    const frames = framesOn(socket);
    for (let seq = 0; seq < 8; seq++) {
      socket.send(encodeFrame(dataFrame(streamId, seq, new Uint8Array(16 * 1024).fill(seq + 1))));
    }
    await waitFor(() => frames.some((f) => f.streamId === streamId && f.kind === 'reset'), 'the reset');
    expect(frames.find((f) => f.streamId === streamId && f.kind === 'reset')).toMatchObject({
      reason: BACKPRESSURE_RESET,
    });
    await waitFor(() => link.streams === 0, 'the slot to be freed');
  });

  it('keeps its own copy of what it queues for a paused stream (the socket reuses its receive buffers)', async () => {
    const server = new ExecServer({ reaper: false });
    cleanups.push(() => server.close());
    let resume = () => {};
    const { link, socket } = await setup({
      onStream: (stream) => {
        stream.pause(); // everything that arrives now is queued by the stream's link
        resume = () => stream.resume();
        server.serve(new RpcConnection(stream));
      },
    });
    const { client } = await openStream(socket, link);
    // Messages of several records each, whose slabs the socket reuses while the first ones wait.
    const big = 'n'.repeat(150_000);
    const calls = [
      client.call<{ sessionId: string }>('initialize', { clientName: `first-${big}` }),
      ...[1, 2, 3].map((i) => client.call('process/read', { processId: `p${i}-${big}` }).catch((e: Error) => e)),
    ];
    await new Promise((resolve) => setTimeout(resolve, 100));
    resume();
    const [init, ...rest] = await Promise.all(calls);
    expect(init).toMatchObject({ sessionId: expect.any(String) });
    // Each request arrived whole and decrypted: answered, on a stream that is still open.
    for (const answer of rest) expect(answer).toBeInstanceOf(Error);
    expect(link.streams).toBe(1);
  });

  it('refused or abandoned handshakes do not count as failures of the relay socket', async () => {
    const { rendezvous, link, socket } = await setup({ limits: { failedHandshakeBurst: 2 } });
    rendezvous.valid = false;
    for (let i = 0; i < 4; i++) {
      await expect(openStream(socket, link, `refused-${i}`)).rejects.toMatchObject({ code: 'reset' });
    }
    rendezvous.valid = true;
    const { client } = await openStream(socket, link);
    await expect(client.call('initialize', { clientName: 'still-connected' })).resolves.toBeDefined();
    expect(rendezvous.sockets).toHaveLength(1);
  });
});

describe('remote mode: who a stream acts for', () => {
  it('serves each stream for the key its /validate named (unattributed without one); a session resumes only for its key', async () => {
    const seen: Principal[] = [];
    const server = new ExecServer({ reaper: false });
    cleanups.push(() => server.close());
    const { rendezvous, link, socket } = await setup({
      onStream: (stream, principal) => {
        seen.push(principal);
        server.serve(new RpcConnection(stream), { principal });
      },
    });
    rendezvous.keys = { 'auth-alice': ['key_alice', 'harness'], 'auth-bob': ['key_bob', 'harness'] };
    const alice = await openStream(socket, link, 'auth-alice');
    const { sessionId } = await alice.client.call<{ sessionId: string }>('initialize', { clientName: 'alice' });
    await openStream(socket, link, 'auth-none');
    const bob = await openStream(socket, link, 'auth-bob');
    expect(seen).toEqual([
      keyPrincipal('key_alice', 'harness'),
      UNATTRIBUTED_PRINCIPAL,
      keyPrincipal('key_bob', 'harness'),
    ]);
    alice.client.close();
    await expect(bob.client.call('initialize', { clientName: 'bob', resumeSessionId: sessionId })).rejects.toThrow(
      `unknown session id ${sessionId}`,
    );
    const again = await openStream(socket, link, 'auth-alice');
    await expect
      .poll(() =>
        again.client
          .call<{ sessionId: string }>('initialize', { clientName: 'alice-again', resumeSessionId: sessionId })
          .then((answer) => answer.sessionId)
          .catch((err: Error) => err.message),
      )
      .toBe(sessionId);
  });
});
