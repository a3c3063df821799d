import { generateKeyPairSync, randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { connect, type Socket } from 'node:net';
import { signRevocations } from '@tether/relay-auth';
import { handshakeFrame, resumeFrame } from '@tether/relay-frames';
import { afterEach, describe, expect, it } from 'vitest';
import {
  Endpoint,
  expectServing,
  isReset,
  metric,
  pushRevocations,
  refusal,
  revocationBody,
  signedUrl,
  signingKey,
  startFakeRegistry,
  startRelay,
} from './__tests__/support.js';
import { HEADERS_TIMEOUT_MS, REQUEST_TIMEOUT_MS } from './app.js';
import { CLOSE } from './limits.js';
import { PushSources } from './push-sources.js';
import { MAX_CONCURRENT_PUSHES, PUSH_BODY_TIMEOUT_MS } from './revocations.js';

/** An environment socket of `registrationId` with one answered stream and one harness socket that has not claimed. */
async function environmentWithHarnesses(url: string, environmentId: string, registrationId: string) {
  const env = await Endpoint.open(signedUrl(url, 'environment', environmentId, { registrationId }));
  const harness = await Endpoint.open(signedUrl(url, 'harness', environmentId, { registrationId }));
  const streamId = randomUUID();
  harness.send(resumeFrame(streamId, 0));
  await env.next((f) => f.kind === 'resume' && f.streamId === streamId, 'the Resume');
  env.send(handshakeFrame(streamId, Buffer.from('msg2')));
  await harness.next((f) => f.kind === 'handshake', 'the answer');
  const unclaimed = await Endpoint.open(signedUrl(url, 'harness', environmentId, { registrationId }));
  return { env, harness, streamId, unclaimed };
}

describe('revocation pushed by the registry (POST /v1/revocations)', () => {
  it('closes the revoked registration’s environment socket, its streams and its unclaimed harness sockets', async () => {
    const { url, relay } = await startRelay();
    const revoked = await environmentWithHarnesses(url, 'env-1', 'reg-1');
    const other = await Endpoint.open(signedUrl(url, 'environment', 'env-2', { registrationId: 'reg-9' }));

    expect(await pushRevocations(url, revocationBody([['env-1', 'reg-1']]))).toEqual({
      status: 200,
      body: { status: 'ok' },
    });
    expect(await revoked.harness.next(isReset(revoked.streamId))).toMatchObject({ reason: 'registration_revoked' });
    expect(await revoked.harness.closed).toEqual({ code: CLOSE.REGISTRATION_REVOKED, reason: 'registration_revoked' });
    expect(await revoked.env.closed).toEqual({ code: CLOSE.REGISTRATION_REVOKED, reason: 'registration_revoked' });
    expect((await revoked.unclaimed.closed).code).toBe(CLOSE.REGISTRATION_REVOKED);
    expect(relay.environments()).toEqual(['env-2']);
    await expectServing(url, other, 'env-2', 'reg-9');
    expect(metric(relay, 'relay_revocations_total{source="push"}')).toBe(1);
    expect(metric(relay, 'relay_revoked_sockets_total{role="environment"}')).toBe(1);
    expect(metric(relay, 'relay_revoked_sockets_total{role="harness"}')).toBe(2);
    expect(metric(relay, 'relay_resets_total{reason="registration_revoked"}')).toBe(2);
    expect(metric(relay, 'relay_revocation_pushes_total{result="ok"}')).toBe(1);
  });

  it('refuses new upgrades of both roles naming a revoked registration, and only those', async () => {
    const { url, relay } = await startRelay();
    await pushRevocations(url, revocationBody([['env-1', 'reg-1']]));
    for (const role of ['environment', 'harness'] as const) {
      expect(await refusal(signedUrl(url, role, 'env-1', { registrationId: 'reg-1' }))).toEqual({
        status: 401,
        body: 'registration_revoked\n',
      });
    }
    // The same registration id under another environment is another registration.
    await Endpoint.open(signedUrl(url, 'environment', 'env-2', { registrationId: 'reg-1' }));
    // The environment's next registration (a new key, a new id) connects.
    const next = await Endpoint.open(signedUrl(url, 'environment', 'env-1', { registrationId: 'reg-2', epoch: 2 }));
    await expectServing(url, next, 'env-1', 'reg-2');
    expect(metric(relay, 'relay_upgrades_refused_total{reason="registration_revoked"}')).toBe(2);
  });

  it('keeps refusing for the URL lifetime, then forgets the revocation', async () => {
    let clock = Date.now();
    const { url } = await startRelay({ urlLifetimeMs: 60_000 }, { now: () => clock });
    await pushRevocations(url, revocationBody([['env-1', 'reg-1']]));
    const environmentUrl = signedUrl(url, 'environment', 'env-1', { registrationId: 'reg-1' });
    clock += 59_999;
    expect((await refusal(environmentUrl)).status).toBe(401);
    clock += 1;
    await Endpoint.open(environmentUrl);
  });

  it('skips malformed entries and revokes the well-formed ones of a push; a repeat revokes nothing new', async () => {
    const { url, relay } = await startRelay();
    const env = await Endpoint.open(signedUrl(url, 'environment', 'env-1', { registrationId: 'reg-1' }));
    const body = JSON.stringify({
      revoked_registrations: [
        { environment_id: 'env-1' },
        7,
        { environment_id: 'env-1', registration_id: 'reg-1' },
        { environment_id: '../env', registration_id: 'reg-1' },
      ],
      issued_at: Math.floor(Date.now() / 1000),
    });
    expect((await pushRevocations(url, body)).status).toBe(200);
    expect((await env.closed).code).toBe(CLOSE.REGISTRATION_REVOKED);
    expect((await pushRevocations(url, body)).status).toBe(200);
    expect(metric(relay, 'relay_revocations_total{source="push"}')).toBe(1);
  });

  it('refuses a push without or with a bad signature (401), malformed (400) or over 1 MiB (413), revoking nothing', async () => {
    const { url, relay } = await startRelay();
    const env = await Endpoint.open(signedUrl(url, 'environment', 'env-1', { registrationId: 'reg-1' }));
    const body = revocationBody([['env-1', 'reg-1']]);
    const other = generateKeyPairSync('ed25519');
    const unsigned = await pushRevocations(url, body, { signature: null });
    expect(unsigned).toMatchObject({ status: 401, body: { error: { code: 'bad_signature' } } });
    expect((await pushRevocations(url, body, { key: other })).status).toBe(401);
    // A valid signature over other bytes: the body was altered on the way.
    const forOther = signRevocations(revocationBody([['env-2', 'reg-1']]), signingKey);
    expect((await pushRevocations(url, body, { signature: forOther })).status).toBe(401);
    expect((await pushRevocations(url, body, { signature: 'not base64url!' })).status).toBe(401);
    expect(await pushRevocations(url, '{"revoked_registrations": [')).toMatchObject({
      status: 400,
      body: { error: { code: 'malformed' } },
    });
    expect((await pushRevocations(url, '{"revoked_registrations":"env-1","issued_at":1}')).status).toBe(400);
    const huge = JSON.stringify({
      revoked_registrations: [{ environment_id: 'env-1', registration_id: 'reg-1' }],
      issued_at: 1,
      padding: 'x'.repeat(1024 * 1024),
    });
    expect((await pushRevocations(url, huge)).status).toBe(413);
    expect(env.ws.readyState).toBe(env.ws.OPEN);
    expect(relay.environments()).toEqual(['env-1']);
    expect(metric(relay, 'relay_revocations_total{source="push"}')).toBe(0);
    expect(metric(relay, 'relay_revocation_pushes_total{result="bad_signature"}')).toBe(4);
    expect(metric(relay, 'relay_revocation_pushes_total{result="malformed"}')).toBe(2);
    expect(metric(relay, 'relay_revocation_pushes_total{result="too_large"}')).toBe(1);
    // The rest of the listener is as before.
    const base = url.replace('ws://', 'http://');
    expect((await fetch(`${base}/v1/revocations`)).status).toBe(404);
    expect((await fetch(`${base}/v1/other`, { method: 'POST', body: '{}' })).status).toBe(404);
  });
});

describe('revocation learned from the heartbeat answer', () => {
  it('reads revoked_registrations from the registry’s answer and closes those sockets; an answer without it is fine', async () => {
    const registry = await startFakeRegistry('{"status":"ok"}');
    const { url, relay } = await startRelay();
    const revoked = await environmentWithHarnesses(url, 'env-1', 'reg-1');
    const other = await Endpoint.open(signedUrl(url, 'environment', 'env-2', { registrationId: 'reg-9' }));
    await relay.startHeartbeat({ registryUrl: registry.url, token: 'relay-role-key', intervalMs: 20 });
    // Two answers without the field (an older registry) were read: nothing was revoked.
    await expect.poll(() => metric(relay, 'relay_heartbeats_total{result="ok"}')).toBeGreaterThanOrEqual(2);
    expect(relay.environments().sort()).toEqual(['env-1', 'env-2']);
    expect(registry.state.heartbeats[0]?.authorization).toBe('Bearer relay-role-key');

    registry.state.answer = JSON.stringify({
      status: 'ok',
      revoked_registrations: [
        { environment_id: 'env-1', registration_id: 'reg-1' },
        { registration_id: 'reg-9' },
        'env-2',
      ],
    });
    expect(await revoked.harness.next(isReset(revoked.streamId))).toMatchObject({ reason: 'registration_revoked' });
    expect(await revoked.env.closed).toEqual({ code: CLOSE.REGISTRATION_REVOKED, reason: 'registration_revoked' });
    expect((await revoked.unclaimed.closed).code).toBe(CLOSE.REGISTRATION_REVOKED);
    expect((await refusal(signedUrl(url, 'harness', 'env-1', { registrationId: 'reg-1' }))).status).toBe(401);
    await expectServing(url, other, 'env-2', 'reg-9');
    // Later answers repeat the revocation: it is counted once.
    const beats = metric(relay, 'relay_heartbeats_total{result="ok"}');
    await expect.poll(() => metric(relay, 'relay_heartbeats_total{result="ok"}')).toBeGreaterThan(beats + 1);
    expect(metric(relay, 'relay_revocations_total{source="heartbeat"}')).toBe(1);
  });

  it('ignores an answer over 1 MiB (unread beyond the limit) and malformed answers', async () => {
    const entry = { environment_id: 'env-1', registration_id: 'reg-1' };
    const registry = await startFakeRegistry(
      JSON.stringify({ status: 'ok', revoked_registrations: [entry], padding: 'x'.repeat(1024 * 1024) }),
    );
    const { url, relay } = await startRelay();
    const env = await Endpoint.open(signedUrl(url, 'environment', 'env-1', { registrationId: 'reg-1' }));
    await relay.startHeartbeat({ registryUrl: registry.url, token: 'k', intervalMs: 20 });
    await expect.poll(() => metric(relay, 'relay_heartbeats_total{result="ok"}')).toBeGreaterThanOrEqual(2);
    registry.state.answer = '{"status":"ok","revoked_registrations":[{"environment_id":"env-1",';
    const beats = metric(relay, 'relay_heartbeats_total{result="ok"}');
    await expect.poll(() => metric(relay, 'relay_heartbeats_total{result="ok"}')).toBeGreaterThan(beats + 1);
    expect(env.ws.readyState).toBe(env.ws.OPEN);
    expect(metric(relay, 'relay_revocations_total{source="heartbeat"}')).toBe(0);
    // The same revocation within the limit is acted on.
    registry.state.answer = JSON.stringify({ status: 'ok', revoked_registrations: [entry] });
    expect((await env.closed).code).toBe(CLOSE.REGISTRATION_REVOKED);
  });
});

/**
 * A raw client socket, for requests fetch cannot make (headers without their body, half-sent headers), from
 * `localAddress` (another loopback address, 127.0.0.2…, is another source).
 */
async function rawSocket(
  relayUrl: string,
  localAddress?: string,
): Promise<{ socket: Socket; received: () => string; closed: Promise<void> }> {
  const { hostname, port } = new URL(relayUrl);
  const socket = connect({ port: Number(port), host: hostname, ...(localAddress ? { localAddress } : {}) });
  let text = '';
  socket.setEncoding('utf8');
  socket.on('data', (chunk: string) => {
    text += chunk;
  });
  socket.on('error', () => {});
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
  await once(socket, 'connect');
  rawSockets.push(socket);
  return { socket, received: () => text, closed };
}

const rawSockets: Socket[] = [];
afterEach(() => {
  for (const socket of rawSockets.splice(0)) socket.destroy();
});

/** The head of a push whose body (of `length` bytes) is still to come. */
const pushHead = (signature: string, length: number, extra = '') =>
  `POST /v1/revocations HTTP/1.1\r\nHost: relay\r\nContent-Type: application/json\r\n` +
  `x-tether-signature: ${signature}\r\nContent-Length: ${length}\r\n${extra}\r\n`;

describe('revocation push endpoint under abuse', () => {
  it('answers 401 to a signature header not shaped like an Ed25519 signature before reading any of the body', async () => {
    const { url, relay } = await startRelay();
    for (const signature of ['x', 'A'.repeat(85), 'A'.repeat(87), `${'A'.repeat(85)}=`, `${'A'.repeat(85)}+`]) {
      const raw = await rawSocket(url);
      // A 1 MiB body is announced and never sent: only a check of the header alone can answer.
      raw.socket.write(pushHead(signature, 1024 * 1024));
      await expect.poll(() => raw.received()).toMatch(/^HTTP\/1\.1 401 [\s\S]*"bad_signature"/);
      await raw.closed;
    }
    expect(metric(relay, 'relay_revocation_pushes_total{result="bad_signature"}')).toBe(5);
  });

  it(`reads at most ${MAX_CONCURRENT_PUSHES} pushes at once and answers 503 busy beyond, unread`, async () => {
    const { url, relay } = await startRelay();
    const env = await Endpoint.open(signedUrl(url, 'environment', 'env-1', { registrationId: 'reg-1' }));
    const body = revocationBody([['env-1', 'reg-1']]);
    const signature = signRevocations(body, signingKey);
    const slow = [];
    // Each from a source of its own (one source has one push read at once: below).
    for (let i = 0; i < MAX_CONCURRENT_PUSHES; i++) {
      const raw = await rawSocket(url, `127.0.0.${i + 2}`);
      // Node answers 100 Continue as it hands the request to the handler: from then on, it is being read.
      raw.socket.write(pushHead(signature, Buffer.byteLength(body), 'Expect: 100-continue\r\n'));
      await expect.poll(() => raw.received()).toContain('100 Continue');
      slow.push(raw);
    }
    expect(await pushRevocations(url, body)).toMatchObject({ status: 503, body: { error: { code: 'busy' } } });
    expect(metric(relay, 'relay_revocation_pushes_total{result="busy"}')).toBe(1);
    expect(env.ws.readyState).toBe(env.ws.OPEN);
    // One slow push completes (and revokes): its place is free again.
    const first = slow[0] as (typeof slow)[number];
    first.socket.write(body);
    await expect.poll(() => first.received()).toMatch(/HTTP\/1\.1 200 /);
    expect((await env.closed).code).toBe(CLOSE.REGISTRATION_REVOKED);
    expect((await pushRevocations(url, revocationBody([['env-2', 'reg-2']]))).status).toBe(200);
  });

  it('reads one push per source address at once: a second is 503 source_busy unread, another source gets a slot', async () => {
    const { url, relay } = await startRelay();
    const env = await Endpoint.open(signedUrl(url, 'environment', 'env-1', { registrationId: 'reg-1' }));
    const body = revocationBody([['env-1', 'reg-1']]);
    const signature = signRevocations(body, signingKey);
    // A shaped signature and a large body announced, sent slowly (here: not at all).
    const hog = await rawSocket(url, '127.0.0.2');
    hog.socket.write(pushHead('A'.repeat(86), 1024 * 1024, 'Expect: 100-continue\r\n'));
    await expect.poll(() => hog.received()).toContain('100 Continue');
    const again = await rawSocket(url, '127.0.0.2');
    again.socket.write(pushHead(signature, 1024 * 1024));
    await expect.poll(() => again.received()).toMatch(/^HTTP\/1\.1 503 [\s\S]*"source_busy"/);
    await again.closed;
    // The registry, from its own address, is read and acted on at once.
    expect(await pushRevocations(url, body)).toMatchObject({ status: 200 });
    expect((await env.closed).code).toBe(CLOSE.REGISTRATION_REVOKED);
    expect(metric(relay, 'relay_revocation_pushes_total{result="source_busy"}')).toBe(1);
  });

  it('cuts a push whose body has not arrived within 2 s of its headers (408) and frees its slot', {
    timeout: 15_000,
  }, async () => {
    expect(PUSH_BODY_TIMEOUT_MS).toBe(2_000);
    const { url, relay } = await startRelay();
    const env = await Endpoint.open(signedUrl(url, 'environment', 'env-1', { registrationId: 'reg-1' }));
    const body = revocationBody([['env-1', 'reg-1']]);
    const slow = await rawSocket(url, '127.0.0.2');
    slow.socket.write(pushHead(signRevocations(body, signingKey), Buffer.byteLength(body)));
    slow.socket.write(body.slice(0, 10));
    // No deadline asserted: the request timeout (30 s) would cut it too, after the test's own.
    await expect.poll(() => slow.received(), { timeout: 10_000 }).toMatch(/^HTTP\/1\.1 408 [\s\S]*"timeout"/);
    await slow.closed;
    expect(metric(relay, 'relay_revocation_pushes_total{result="timeout"}')).toBe(1);
    expect(env.ws.readyState).toBe(env.ws.OPEN);
    // The same source has its slot back.
    const next = await rawSocket(url, '127.0.0.2');
    next.socket.write(pushHead(signRevocations(body, signingKey), Buffer.byteLength(body)) + body);
    await expect.poll(() => next.received()).toMatch(/^HTTP\/1\.1 200 /);
    expect((await env.closed).code).toBe(CLOSE.REGISTRATION_REVOKED);
  });

  it('takes pushes only from the registry’s addresses when they are known: another is 403 forbidden_source unread', async () => {
    const { url, relay } = await startRelay({}, { pushSources: PushSources.fixed(['127.0.0.1']) });
    const env = await Endpoint.open(signedUrl(url, 'environment', 'env-1', { registrationId: 'reg-1' }));
    const body = revocationBody([['env-1', 'reg-1']]);
    const signature = signRevocations(body, signingKey);
    // A genuine push, replayed from elsewhere: refused before its body is read (1 MiB announced, never sent).
    const stranger = await rawSocket(url, '127.0.0.2');
    stranger.socket.write(pushHead(signature, 1024 * 1024));
    await expect.poll(() => stranger.received()).toMatch(/^HTTP\/1\.1 403 [\s\S]*"forbidden_source"/);
    await stranger.closed;
    expect(env.ws.readyState).toBe(env.ws.OPEN);
    expect(metric(relay, 'relay_revocation_pushes_total{result="forbidden_source"}')).toBe(1);
    // From the registry's address it is taken.
    expect(await pushRevocations(url, body)).toMatchObject({ status: 200 });
    expect((await env.closed).code).toBe(CLOSE.REGISTRATION_REVOKED);
  });

  it('takes pushes under the node URL’s path prefix, as upgrades are', async () => {
    const { url, relay } = await startRelay();
    const env = await Endpoint.open(signedUrl(`${url}/edge`, 'environment', 'env-1', { registrationId: 'reg-1' }));
    const body = revocationBody([['env-1', 'reg-1']]);
    const response = await fetch(`${url.replace('ws://', 'http://')}/edge/v1/revocations`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-tether-signature': signRevocations(body, signingKey) },
      body,
    });
    expect(response.status).toBe(200);
    expect((await env.closed).code).toBe(CLOSE.REGISTRATION_REVOKED);
    expect(relay.environments()).toEqual([]);
  });

  it('gives plain HTTP requests short header and request deadlines, which upgraded WebSockets do not inherit', async () => {
    const { url, relay } = await startRelay();
    expect([relay.server.headersTimeout, relay.server.requestTimeout]).toEqual([
      HEADERS_TIMEOUT_MS,
      REQUEST_TIMEOUT_MS,
    ]);
    expect(HEADERS_TIMEOUT_MS).toBeLessThanOrEqual(10_000);
    expect(REQUEST_TIMEOUT_MS).toBeLessThanOrEqual(30_000);
    // Shorter still for the test; Node checks them on the relay's own interval, not its 30 s default.
    relay.server.headersTimeout = 100;
    relay.server.requestTimeout = 200;
    const env = await Endpoint.open(signedUrl(url, 'environment', 'env-1', { registrationId: 'reg-1' }));
    // A push whose headers never end, then one whose body never comes: each is cut off by the server.
    const headers = await rawSocket(url);
    headers.socket.write('POST /v1/revocations HTTP/1.1\r\nHost: relay\r\n');
    await headers.closed;
    const body = revocationBody([['env-1', 'reg-1']]);
    const stalled = await rawSocket(url);
    stalled.socket.write(pushHead(signRevocations(body, signingKey), Buffer.byteLength(body)));
    await stalled.closed;
    // The environment socket, older than both, outlived their deadlines and still carries streams.
    expect(env.ws.readyState).toBe(env.ws.OPEN);
    await expectServing(url, env, 'env-1', 'reg-1');
  });
});
