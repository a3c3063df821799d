import { createHash, generateKeyPairSync, randomBytes, randomUUID } from 'node:crypto';
import { dataFrame, encodeFrame, handshakeFrame, heartbeatFrame, resetFrame, resumeFrame } from '@tether/relay-frames';
import { describe, expect, it } from 'vitest';
import { Endpoint, isReset, metric, refusal, signedUrl, startRelay } from './__tests__/support.js';
import { CLOSE, DEFAULT_LIMITS } from './limits.js';

/** A harness socket that has claimed `streamId` and whose claim reached the environment. */
async function pairedHarness(url: string, env: Endpoint, environmentId = 'env-1', streamId = randomUUID()) {
  const harness = await Endpoint.open(signedUrl(url, 'harness', environmentId));
  harness.send(resumeFrame(streamId, 0));
  await env.next((f) => f.kind === 'resume' && f.streamId === streamId, 'the Resume');
  return { harness, streamId };
}

describe('pairing and forwarding', () => {
  it('forwards the claim and the handshake verbatim and routes answers back by stream id', async () => {
    const { url, relay } = await startRelay();
    const env = await Endpoint.open(signedUrl(url, 'environment', 'env-1'));
    const harness = await Endpoint.open(signedUrl(url, 'harness', 'env-1'));
    const streamId = randomUUID();
    const resume = encodeFrame(resumeFrame(streamId, 0));
    const hello = encodeFrame(handshakeFrame(streamId, randomBytes(1500)));
    harness.ws.send(resume);
    harness.ws.send(hello);
    await env.count(() => true, 2);
    expect(env.raw.map((b) => b.toString('hex'))).toEqual([
      Buffer.from(resume).toString('hex'),
      Buffer.from(hello).toString('hex'),
    ]);
    const answer = encodeFrame(handshakeFrame(streamId, randomBytes(1200)));
    env.ws.send(answer);
    env.send(dataFrame(streamId, 0, Buffer.from('ciphertext-0')));
    await harness.count(() => true, 2);
    expect(harness.raw[0]?.toString('hex')).toBe(Buffer.from(answer).toString('hex'));
    expect(harness.frames[1]).toMatchObject({ kind: 'data', seq: 0 });
    expect(relay.stats()).toMatchObject({ environments: 1, harnessSockets: 1, streams: 1 });
    expect(metric(relay, 'relay_forwarded_frames_total{direction="to_environment"}')).toBe(2);
    expect(metric(relay, 'relay_forwarded_frames_total{direction="to_harness"}')).toBe(2);
    expect(metric(relay, 'relay_forwarded_bytes_total{direction="to_environment"}')).toBe(
      resume.byteLength + hello.byteLength,
    );
  });

  it('multiplexes 100 streams on one environment socket with interleaved traffic, bytes intact per stream', async () => {
    const { url, relay } = await startRelay();
    const env = await Endpoint.open(signedUrl(url, 'environment', 'env-1'));
    const streams = await Promise.all(Array.from({ length: 100 }, () => pairedHarness(url, env)));
    expect(relay.stats().streams).toBe(100);
    // The environment answers each handshake first, as an executor does (this ends the handshake stage).
    for (const { streamId } of streams) env.send(handshakeFrame(streamId, Buffer.from('msg2')));
    await Promise.all(streams.map(({ harness }) => harness.next((f) => f.kind === 'handshake')));
    const FRAMES = 12;
    const sentUp = new Map<string, ReturnType<typeof createHash>>();
    const sentDown = new Map<string, ReturnType<typeof createHash>>();
    // Round-robin: every harness sends one frame per round and the environment answers every stream per
    // round, so frames of all streams interleave on the environment socket in both directions.
    for (let seq = 0; seq < FRAMES; seq++) {
      for (const { harness, streamId } of streams) {
        const payload = randomBytes(1 + ((seq * 7919 + streamId.charCodeAt(0)) % 3000));
        (sentUp.get(streamId) ?? sentUp.set(streamId, createHash('sha256')).get(streamId))?.update(payload);
        harness.send(dataFrame(streamId, seq, payload));
      }
      for (const { streamId } of [...streams].reverse()) {
        const payload = randomBytes(1 + ((seq * 104_729) % 5000));
        (sentDown.get(streamId) ?? sentDown.set(streamId, createHash('sha256')).get(streamId))?.update(payload);
        env.send(dataFrame(streamId, seq, payload));
      }
    }
    await env.count((f) => f.kind === 'data', 100 * FRAMES);
    for (const { harness, streamId } of streams) {
      const down = await harness.count((f) => f.kind === 'data', FRAMES);
      expect(harness.frames.filter((f) => f.kind === 'reset')).toEqual([]);
      // Each harness saw only its own stream, in order, with exactly the bytes sent.
      expect(down.every((f) => f.streamId === streamId)).toBe(true);
      expect(down.map((f) => (f.kind === 'data' ? f.seq : -1))).toEqual([...Array(FRAMES).keys()]);
      const got = createHash('sha256');
      for (const f of down) if (f.kind === 'data') got.update(f.payload);
      expect(got.digest('hex')).toBe(sentDown.get(streamId)?.digest('hex'));
      const up = env.frames.filter((f) => f.kind === 'data' && f.streamId === streamId);
      expect(up.map((f) => (f.kind === 'data' ? f.seq : -1))).toEqual([...Array(FRAMES).keys()]);
      const gotUp = createHash('sha256');
      for (const f of up) if (f.kind === 'data') gotUp.update(f.payload);
      expect(gotUp.digest('hex')).toBe(sentUp.get(streamId)?.digest('hex'));
    }
  });

  it('drops and counts environment frames for unknown streams and malformed frames', async () => {
    const { url, relay } = await startRelay();
    const env = await Endpoint.open(signedUrl(url, 'environment', 'env-1'));
    const { harness, streamId } = await pairedHarness(url, env);
    env.send(dataFrame('not-a-stream', 0, Buffer.from('x')));
    env.ws.send(Buffer.from([0xff, 0xff, 0xff]));
    env.send(dataFrame(streamId, 0, Buffer.from('after')));
    await harness.next((f) => f.kind === 'data');
    expect(harness.frames).toHaveLength(1);
    expect(metric(relay, 'relay_drops_total{reason="unknown_stream"}')).toBe(1);
    expect(metric(relay, 'relay_drops_total{reason="malformed_frame"}')).toBe(1);
  });
});

describe('resets', () => {
  it('sends the environment Reset{stream_id, harness_closed} when a harness socket closes', async () => {
    const { url, relay } = await startRelay();
    const env = await Endpoint.open(signedUrl(url, 'environment', 'env-1'));
    const { harness, streamId } = await pairedHarness(url, env);
    harness.ws.close(1000);
    const reset = await env.next(isReset(streamId));
    expect(reset).toMatchObject({ reason: 'harness_closed' });
    await expect.poll(() => relay.stats().streams).toBe(0);
    expect(metric(relay, 'relay_resets_total{reason="harness_closed"}')).toBe(1);
  });

  it('does not send a second Reset when the harness reset its own stream first', async () => {
    const { url } = await startRelay();
    const env = await Endpoint.open(signedUrl(url, 'environment', 'env-1'));
    const first = await pairedHarness(url, env);
    first.harness.send(resetFrame(first.streamId, 'stream_closed'));
    first.harness.ws.close(1000);
    await first.harness.closed;
    // A later stream's traffic proves the relay handled the close before it.
    const second = await pairedHarness(url, env);
    second.harness.ws.close(1000);
    await env.next(isReset(second.streamId, 'harness_closed'));
    expect(env.frames.filter(isReset(first.streamId))).toEqual([expect.objectContaining({ reason: 'stream_closed' })]);
  });

  it('closes the harness socket after forwarding the environment’s Reset, freeing the stream id', async () => {
    const { url, relay } = await startRelay();
    const env = await Endpoint.open(signedUrl(url, 'environment', 'env-1'));
    const { harness, streamId } = await pairedHarness(url, env);
    env.send(resetFrame(streamId, 'noise_relay_protocol_error'));
    expect(await harness.next(isReset(streamId))).toMatchObject({ reason: 'noise_relay_protocol_error' });
    expect((await harness.closed).code).toBe(CLOSE.STREAM_RESET);
    expect(relay.stats().streams).toBe(0);
    const again = await pairedHarness(url, env, 'env-1', streamId);
    expect(again.streamId).toBe(streamId);
  });

  it('resets and closes every harness socket when the environment socket closes', async () => {
    const { url, relay } = await startRelay();
    const env = await Endpoint.open(signedUrl(url, 'environment', 'env-1'));
    const streams = await Promise.all([1, 2, 3].map(() => pairedHarness(url, env)));
    env.ws.close(1000);
    for (const { harness, streamId } of streams) {
      expect(await harness.next(isReset(streamId))).toMatchObject({ reason: 'environment_closed' });
      expect((await harness.closed).code).toBe(CLOSE.GOING_AWAY);
    }
    expect(relay.stats()).toMatchObject({ environments: 0, streams: 0 });
    expect(metric(relay, 'relay_resets_total{reason="environment_closed"}')).toBe(3);
  });

  it('replaces the environment socket: old streams reset, old socket closed, new harnesses pair with the new one', async () => {
    const { url, relay } = await startRelay();
    const oldEnv = await Endpoint.open(signedUrl(url, 'environment', 'env-1'));
    const old = await pairedHarness(url, oldEnv);
    const newEnv = await Endpoint.open(signedUrl(url, 'environment', 'env-1'));
    expect(await old.harness.next(isReset(old.streamId))).toMatchObject({ reason: 'environment_replaced' });
    // Same registration (same epoch): the replaced executor is told to reconnect, not that it was superseded.
    expect((await oldEnv.closed).code).toBe(CLOSE.REPLACED_SAME_REGISTRATION);
    const fresh = await pairedHarness(url, newEnv);
    newEnv.send(dataFrame(fresh.streamId, 0, Buffer.from('hi')));
    await fresh.harness.next((f) => f.kind === 'data');
    expect(relay.environments()).toEqual(['env-1']);
    expect(oldEnv.frames.some((f) => f.streamId === fresh.streamId)).toBe(false);
  });
});

describe('authentication at the upgrade', () => {
  it('accepts a valid signature for each role', async () => {
    const { url, relay } = await startRelay();
    await Endpoint.open(signedUrl(url, 'environment', 'env-1'));
    await Endpoint.open(signedUrl(url, 'harness', 'env-1'));
    expect(metric(relay, 'relay_connections_total{role="environment"}')).toBe(1);
    expect(metric(relay, 'relay_connections_total{role="harness"}')).toBe(1);
  });

  it.each([
    ['a forged signature', 401, (u: string) => u.replace(/sig=[^&]+/, `sig=${randomBytes(64).toString('base64url')}`)],
    ['no signature', 401, (u: string) => u.replace(/&sig=[^&]+/, '')],
    [
      'a harness grant turned into an environment one',
      401,
      (u: string) => u.replace('role=harness', 'role=environment'),
    ],
    ['another environment', 401, (u: string) => u.replace('/env-1?', '/env-2?')],
    ['an unknown role', 403, (u: string) => u.replace('role=harness', 'role=admin')],
  ])('refuses %s with HTTP %i and keeps no socket', async (_what, status, tamper) => {
    const { url, relay } = await startRelay();
    const answer = await refusal(tamper(signedUrl(url, 'harness', 'env-1')));
    expect(answer.status).toBe(status);
    expect(relay.stats()).toMatchObject({ environments: 0, harnessSockets: 0 });
    await expect.poll(() => new Promise((r) => relay.server.getConnections((_e, n) => r(n)))).toBe(0);
  });

  it('refuses an expired grant and one signed by another key with 401', async () => {
    const { url, relay } = await startRelay();
    const expired = await refusal(
      signedUrl(url, 'environment', 'env-1', { expiresAt: Math.floor(Date.now() / 1000) - 1 }),
    );
    expect(expired).toEqual({ status: 401, body: 'expired\n' });
    const other = generateKeyPairSync('ed25519');
    const foreign = await refusal(signedUrl(url, 'environment', 'env-1', { key: other }));
    expect(foreign.status).toBe(401);
    expect(metric(relay, 'relay_upgrades_refused_total{reason="expired"}')).toBe(1);
    expect(metric(relay, 'relay_upgrades_refused_total{reason="bad_signature"}')).toBe(1);
  });
});

describe('protocol enforcement', () => {
  it('closes a socket that sends text with 1003 and an oversized message with 1009', async () => {
    const { url, relay } = await startRelay({ maxMessageBytes: 4096 });
    const env = await Endpoint.open(signedUrl(url, 'environment', 'env-1'));
    const texter = await pairedHarness(url, env);
    texter.harness.ws.send('{"method":"initialize"}');
    expect((await texter.harness.closed).code).toBe(CLOSE.TEXT);
    expect(await env.next(isReset(texter.streamId))).toMatchObject({ reason: 'protocol_error' });
    const big = await pairedHarness(url, env);
    big.harness.send(dataFrame(big.streamId, 0, randomBytes(5000)));
    expect((await big.harness.closed).code).toBe(CLOSE.TOO_BIG);
    await env.next(isReset(big.streamId, 'harness_closed'));
    env.ws.send('text');
    expect((await env.closed).code).toBe(CLOSE.TEXT);
    expect(metric(relay, 'relay_drops_total{reason="text_message"}')).toBe(2);
    expect(metric(relay, 'relay_drops_total{reason="oversize_message"}')).toBe(1);
  });

  it('requires Resume first and refuses frames for another stream on a harness socket', async () => {
    const { url } = await startRelay();
    const env = await Endpoint.open(signedUrl(url, 'environment', 'env-1'));
    const noClaim = await Endpoint.open(signedUrl(url, 'harness', 'env-1'));
    noClaim.send(handshakeFrame(randomUUID(), Buffer.from('msg1')));
    expect((await noClaim.closed).code).toBe(CLOSE.PROTOCOL);
    const victim = await pairedHarness(url, env);
    const intruder = await pairedHarness(url, env);
    intruder.harness.send(dataFrame(victim.streamId, 0, Buffer.from('injected')));
    expect((await intruder.harness.closed).code).toBe(CLOSE.PROTOCOL);
    expect(await env.next(isReset(intruder.streamId))).toMatchObject({ reason: 'protocol_error' });
    expect(env.frames.some((f) => f.kind === 'data')).toBe(false);
  });

  it('refuses a second claim of a live stream id and keeps the first', async () => {
    const { url, relay } = await startRelay();
    const env = await Endpoint.open(signedUrl(url, 'environment', 'env-1'));
    const first = await pairedHarness(url, env);
    const second = await Endpoint.open(signedUrl(url, 'harness', 'env-1'));
    second.send(resumeFrame(first.streamId, 0));
    expect(await second.next(isReset(first.streamId))).toMatchObject({ reason: 'duplicate_stream' });
    expect((await second.closed).code).toBe(CLOSE.DUPLICATE_STREAM);
    env.send(dataFrame(first.streamId, 0, Buffer.from('still mine')));
    await first.harness.next((f) => f.kind === 'data');
    expect(env.frames.filter(isReset(first.streamId))).toHaveLength(0);
    expect(metric(relay, 'relay_resets_total{reason="duplicate_stream"}')).toBe(1);
  });

  it('refuses a stream when the environment is offline or was registered again', async () => {
    const { url } = await startRelay();
    const lonely = await Endpoint.open(signedUrl(url, 'harness', 'env-9'));
    const id = randomUUID();
    lonely.send(resumeFrame(id, 0));
    expect(await lonely.next(isReset(id))).toMatchObject({ reason: 'environment_offline' });
    expect((await lonely.closed).code).toBe(CLOSE.TRY_AGAIN);
    const env = await Endpoint.open(signedUrl(url, 'environment', 'env-1', { registrationId: 'reg-2' }));
    const stale = await Endpoint.open(signedUrl(url, 'harness', 'env-1', { registrationId: 'reg-1' }));
    stale.send(resumeFrame(id, 0));
    expect(await stale.next(isReset(id))).toMatchObject({ reason: 'registration_mismatch' });
    expect(env.frames).toHaveLength(0);
  });
});

describe('limits', () => {
  it('caps streams per environment', async () => {
    const { url, relay } = await startRelay({ maxStreamsPerEnvironment: 2 });
    const env = await Endpoint.open(signedUrl(url, 'environment', 'env-1'));
    await pairedHarness(url, env);
    const second = await pairedHarness(url, env);
    const third = await Endpoint.open(signedUrl(url, 'harness', 'env-1'));
    const id = randomUUID();
    third.send(resumeFrame(id, 0));
    expect(await third.next(isReset(id))).toMatchObject({ reason: 'stream_limit' });
    expect((await third.closed).code).toBe(CLOSE.STREAM_LIMIT);
    // A slot freed is a slot available.
    second.harness.ws.close(1000);
    await env.next(isReset(second.streamId, 'harness_closed'));
    await pairedHarness(url, env);
    expect(relay.stats().streams).toBe(2);
  });

  it('caps connections per source IP with HTTP 429, and frees the slot on close', async () => {
    const { url, relay } = await startRelay({ maxConnectionsPerIp: 3 });
    const open = await Promise.all([1, 2, 3].map(() => Endpoint.open(signedUrl(url, 'harness', 'env-1'))));
    expect((await refusal(signedUrl(url, 'harness', 'env-1'))).status).toBe(429);
    expect((await refusal(signedUrl(url, 'environment', 'env-1'))).status).toBe(429);
    open[0]?.ws.close(1000);
    await open[0]?.closed;
    await expect
      .poll(async () => {
        try {
          await Endpoint.open(signedUrl(url, 'harness', 'env-1'));
          return 'open';
        } catch {
          return 'refused';
        }
      })
      .toBe('open');
    expect(metric(relay, 'relay_upgrades_refused_total{reason="ip_limit"}')).toBeGreaterThanOrEqual(2);
  });

  it('bounds the sockets one harness URL holds (4, of which 2 unclaimed) with HTTP 429; other URLs still connect', async () => {
    const { url, relay } = await startRelay({ maxConnectionsPerIp: 64 });
    const env = await Endpoint.open(signedUrl(url, 'environment', 'env-1'));
    const replayed = signedUrl(url, 'harness', 'env-1');
    const opened = [await Endpoint.open(replayed), await Endpoint.open(replayed)];
    expect(await refusal(replayed)).toEqual({ status: 429, body: 'url_unclaimed_limit\n' });
    // Claimed sockets leave the unclaimed count, not the URL's.
    for (const socket of opened) {
      const streamId = randomUUID();
      socket.send(resumeFrame(streamId, 0));
      await env.next((f) => f.kind === 'resume' && f.streamId === streamId, 'the Resume');
    }
    opened.push(await Endpoint.open(replayed), await Endpoint.open(replayed));
    expect(await refusal(replayed)).toEqual({ status: 429, body: 'url_limit\n' });
    // The grant is what counts, not the URL's text: an extra parameter spells the same grant.
    expect((await refusal(`${replayed}&again=1`)).status).toBe(429);
    // Another bundle of the same registration (its own nonce) is another grant.
    await pairedHarness(url, env);
    // An unclaimed socket of the URL closes: the URL may open one again (a retry while an older socket lingers).
    const gone = opened[2] as Endpoint;
    gone.ws.close(1000);
    await gone.closed;
    await expect
      .poll(async () =>
        Endpoint.open(replayed).then(
          () => 'open',
          () => 'refused',
        ),
      )
      .toBe('open');
    expect(metric(relay, 'relay_upgrades_refused_total{reason="url_unclaimed_limit"}')).toBeGreaterThanOrEqual(1);
    expect(metric(relay, 'relay_upgrades_refused_total{reason="url_limit"}')).toBe(2);
  });

  it('bounds a harness URL signed without a nonce (an older registry’s) the same way', async () => {
    const { url, relay } = await startRelay({ maxSocketsPerUrl: 2, maxUnclaimedPerUrl: 2 });
    const legacy = signedUrl(url, 'harness', 'env-1', { nonce: null });
    await Endpoint.open(legacy);
    await Endpoint.open(legacy);
    expect(await refusal(legacy)).toEqual({ status: 429, body: 'url_limit\n' });
    // Environment URLs are not bounded per URL (one socket per environment replaces the other).
    const environment = signedUrl(url, 'environment', 'env-1');
    const first = await Endpoint.open(environment);
    await Endpoint.open(environment);
    expect((await first.closed).code).toBe(CLOSE.REPLACED_SAME_REGISTRATION);
    expect(metric(relay, 'relay_upgrades_refused_total{reason="url_limit"}')).toBe(1);
  });

  it('caps the sockets of the whole relay with HTTP 503 (connection_limit), both roles, and frees a place on close', async () => {
    const { url, relay } = await startRelay({ maxConnections: 3 });
    const env = await Endpoint.open(signedUrl(url, 'environment', 'env-1'));
    const { harness } = await pairedHarness(url, env);
    await Endpoint.open(signedUrl(url, 'harness', 'env-1'));
    expect(await refusal(signedUrl(url, 'harness', 'env-1'))).toEqual({ status: 503, body: 'connection_limit\n' });
    expect((await refusal(signedUrl(url, 'environment', 'env-2'))).status).toBe(503);
    harness.ws.close(1000);
    await harness.closed;
    await expect
      .poll(async () =>
        Endpoint.open(signedUrl(url, 'environment', 'env-2')).then(
          () => 'open',
          () => 'refused',
        ),
      )
      .toBe('open');
    expect(metric(relay, 'relay_upgrades_refused_total{reason="connection_limit"}')).toBeGreaterThanOrEqual(2);
  });

  it('defaults: 4 sockets and 2 unclaimed per harness URL, 20 000 sockets in all, a 3 s claim window', () => {
    expect(DEFAULT_LIMITS).toMatchObject({
      maxSocketsPerUrl: 4,
      maxUnclaimedPerUrl: 2,
      maxConnections: 20_000,
      maxConnectionsPerIp: 1024,
      claimTimeoutMs: 3_000,
    });
  });

  it('limits handshake-stage frames before the environment answers', async () => {
    const { url, relay } = await startRelay({ maxHandshakeFrames: 3 });
    const env = await Endpoint.open(signedUrl(url, 'environment', 'env-1'));
    const { harness, streamId } = await pairedHarness(url, env);
    for (let i = 0; i < 3; i++) harness.send(heartbeatFrame(streamId));
    expect(await env.next(isReset(streamId))).toMatchObject({ reason: 'handshake_limit' });
    expect((await harness.closed).code).toBe(CLOSE.POLICY);
    // Resume + 2 heartbeats were forwarded; the 4th frame was not.
    expect(env.frames.filter((f) => f.streamId === streamId && f.kind !== 'reset')).toHaveLength(3);
    // Once the environment answers, the stage is over and the count no longer applies.
    const ok = await pairedHarness(url, env);
    env.send(handshakeFrame(ok.streamId, Buffer.from('msg2')));
    await ok.harness.next((f) => f.kind === 'handshake');
    for (let i = 0; i < 10; i++) ok.harness.send(dataFrame(ok.streamId, i, Buffer.from('d')));
    await env.count((f) => f.kind === 'data' && f.streamId === ok.streamId, 10);
    expect(metric(relay, 'relay_resets_total{reason="handshake_limit"}')).toBe(1);
  });

  it('resets a stream whose handshake the environment does not answer within the deadline, both ways', async () => {
    const { url, relay } = await startRelay({ handshakeTimeoutMs: 150 });
    const env = await Endpoint.open(signedUrl(url, 'environment', 'env-1'));
    // Claimed first and answered: had its deadline not been cleared by the answer, it would fire first.
    const answered = await pairedHarness(url, env);
    env.send(handshakeFrame(answered.streamId, Buffer.from('msg2')));
    await answered.harness.next((f) => f.kind === 'handshake');
    const { harness, streamId } = await pairedHarness(url, env);
    expect(await env.next(isReset(streamId))).toMatchObject({ reason: 'handshake_timeout' });
    expect(await harness.next(isReset(streamId))).toMatchObject({ reason: 'handshake_timeout' });
    expect(await harness.closed).toEqual({ code: CLOSE.TIMEOUT, reason: 'handshake_timeout' });
    expect(relay.stats().streams).toBe(1);
    await expect.poll(() => relay.stats().harnessSockets).toBe(1); // its buffers are gone with it
    env.send(dataFrame(answered.streamId, 0, Buffer.from('still paired')));
    await answered.harness.next((f) => f.kind === 'data');
    expect(env.frames.filter(isReset(answered.streamId))).toEqual([]);
    expect(metric(relay, 'relay_resets_total{reason="handshake_timeout"}')).toBe(1);
  });

  it('leaves no handshake timer behind: each is cleared when its stream ends and none outlives close()', async () => {
    const timers = () => process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;
    const before = timers();
    const { url, relay } = await startRelay({ handshakeTimeoutMs: 600_000 });
    const env = await Endpoint.open(signedUrl(url, 'environment', 'env-1'));
    const withRelay = timers(); // the relay's ping and sweep intervals
    const streams = await Promise.all([1, 2, 3].map(() => pairedHarness(url, env)));
    expect(timers()).toBe(withRelay + 3);
    // A harness that leaves before the answer takes its timer with it.
    streams[0]?.harness.ws.terminate();
    await env.next(isReset(streams[0]?.streamId as string, 'harness_closed'));
    expect(timers()).toBe(withRelay + 2);
    await relay.close();
    await Promise.all([env.closed, ...streams.map((s) => s.harness.closed)]);
    expect(timers()).toBe(before);
  });

  it('resets an idle stream and closes an unclaimed socket after their timeouts', async () => {
    const { url, relay } = await startRelay({ idleTimeoutMs: 150, claimTimeoutMs: 150 });
    const env = await Endpoint.open(signedUrl(url, 'environment', 'env-1'));
    const { harness, streamId } = await pairedHarness(url, env);
    expect(await env.next(isReset(streamId))).toMatchObject({ reason: 'idle_timeout' });
    expect(await harness.next(isReset(streamId))).toMatchObject({ reason: 'idle_timeout' });
    expect((await harness.closed).code).toBe(CLOSE.TIMEOUT);
    const silent = await Endpoint.open(signedUrl(url, 'harness', 'env-1'));
    expect((await silent.closed).code).toBe(CLOSE.TIMEOUT);
    expect(metric(relay, 'relay_drops_total{reason="claim_timeout"}')).toBe(1);
  });

  it('pings both roles and drops a socket that stops answering', async () => {
    const { url, relay } = await startRelay({ pingIntervalMs: 40, pongTimeoutMs: 200 });
    const live = await Endpoint.open(signedUrl(url, 'environment', 'env-1'));
    let pings = 0;
    live.ws.on('ping', () => pings++);
    const mute = await Endpoint.open(signedUrl(url, 'harness', 'env-1'), { autoPong: false });
    const closed = await mute.closed;
    expect(closed.code).toBe(1006); // terminated, no close frame
    // The live socket is pinged too and answers, so it stays (its pings may be read after the mute one's close
    // on a loaded machine: wait for them rather than count at this instant).
    await expect.poll(() => pings, { timeout: 10_000 }).toBeGreaterThanOrEqual(2);
    expect(live.ws.readyState).toBe(live.ws.OPEN);
    expect(metric(relay, 'relay_drops_total{reason="pong_timeout"}')).toBe(1);
  });
});

describe('http and lifecycle', () => {
  it('serves /livez, /readyz and /metrics', async () => {
    const { url, relay } = await startRelay();
    const base = url.replace('ws://', 'http://');
    expect((await fetch(`${base}/livez`)).status).toBe(200);
    expect(await (await fetch(`${base}/readyz`)).json()).toEqual({ status: 'ready' });
    const env = await Endpoint.open(signedUrl(url, 'environment', 'env-1'));
    await pairedHarness(url, env);
    const text = await (await fetch(`${base}/metrics`)).text();
    expect(text).toContain('relay_sockets{role="environment"} 1');
    expect(text).toContain('relay_sockets{role="harness"} 1');
    expect(text).toContain('relay_streams 1');
    expect(text).toContain('relay_resets_total{reason="relay_backpressure"} 0');
    expect(text).toContain('relay_queued_bytes{role="environment"}');
    expect((await fetch(`${base}/nope`)).status).toBe(404);
    await relay.close();
    expect(relay.server.listening).toBe(false);
  });

  it('closes every socket with 1001 on close() and refuses nothing afterwards because it no longer listens', async () => {
    const { url, relay } = await startRelay();
    const env = await Endpoint.open(signedUrl(url, 'environment', 'env-1'));
    const { harness } = await pairedHarness(url, env);
    await relay.close();
    expect((await env.closed).code).toBe(CLOSE.GOING_AWAY);
    expect((await harness.closed).code).toBe(CLOSE.GOING_AWAY);
    await expect(Endpoint.open(signedUrl(url, 'environment', 'env-1'))).rejects.toThrow();
    await relay.close(); // idempotent
  });
});
