import { generateKeyPairSync } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parsePublicKey } from '@tether/noise';
import { verifyRelayUrl } from '@tether/relay-auth';
import { startPeer } from '@tether/test-kit';
import type { FastifyInstance } from 'fastify';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { createKey } from './__tests__/app-fixture.js';
import { buildRegistry } from './app.js';
import { openSqliteStore, type RegistrationRecord, type RegistryStore } from './store/index.js';

// Black box: the real, unmodified `codex exec-server --remote` against a listening registry.
let dir: string;
let store: RegistryStore;
let app: FastifyInstance;
let url: string;
let token: string;
/** Every `/register` answer the registry gave, in order. */
let registrations: Array<{ status: number; body: string }>;
const signing = generateKeyPairSync('ed25519');

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'registry-codex-'));
  store = openSqliteStore(join(dir, 'registry.db'));
  app = await buildRegistry(
    { relayUrls: ['ws://127.0.0.1:9'] },
    { store, signingKey: { privateKey: signing.privateKey, publicKey: signing.publicKey } },
  );
  registrations = [];
  app.addHook('onSend', async (request, reply, payload) => {
    if (request.url.endsWith('/register')) registrations.push({ status: reply.statusCode, body: String(payload) });
    return payload;
  });
  url = await app.listen({ host: '127.0.0.1', port: 0 });
  token = await createKey(store, {
    id: 'codex-exec',
    role: 'executor',
    environments: 'codex-*',
    label: 'codex',
    createdAt: Date.now(),
  });
});

afterEach(async () => {
  await app.close();
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

async function registrationOf(environmentId: string, timeoutMs = 15_000): Promise<RegistrationRecord> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const found = await store.currentRegistration(environmentId);
    if (found) return found;
    if (Date.now() > deadline) throw new Error(`${environmentId} never registered`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

it('a real codex executor registers with an executor key and its public key is stored', async () => {
  await using codex = await startPeer({
    kind: 'codex',
    transport: 'remote',
    args: ['--remote', url, '--environment-id', 'codex-env_1'],
    env: { CODEX_API_KEY: token },
  });
  const registration = await registrationOf('codex-env_1');
  expect(registration.apiKeyId).toBe('codex-exec');
  expect(registration.securityProfile).toBe('noise_hybrid_ik_v1');
  const key = parsePublicKey(JSON.parse(registration.executorPublicKey));
  expect(key.suite).toBe('Noise_hybridIK_X25519+MLKEM768_AESGCM_SHA256');
  expect(registrations[0]?.status).toBe(200);
  const answer = JSON.parse(registrations[0]?.body ?? '{}');
  expect(answer.executor_registration_id).toBe(registration.registrationId);
  expect(verifyRelayUrl(answer.url, signing.publicKey, Date.now() / 1000)?.role).toBe('environment');
  expect(codex.pid).toBeGreaterThan(0);
});

it('a real codex executor with a wrong key is refused with 401 and exits saying so', async () => {
  await using codex = await startPeer({
    kind: 'codex',
    transport: 'remote',
    args: ['--remote', url, '--environment-id', 'codex-env_2'],
    env: { CODEX_API_KEY: 'treg_wrong' },
  });
  const exit = await Promise.race([
    codex.exited,
    new Promise<never>((_, reject) => setTimeout(() => reject(new Error(codex.stderr())), 15_000)),
  ]);
  expect(registrations.map((r) => r.status)).toEqual([401]);
  expect(exit.code).not.toBe(0);
  expect(codex.stderr()).toContain('environment registry authentication failed (401 Unauthorized)');
  expect(codex.stderr()).toContain('missing or invalid bearer token');
  expect(await store.currentRegistration('codex-env_2')).toBeUndefined();
});
