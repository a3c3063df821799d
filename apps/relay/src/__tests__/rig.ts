import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildRegistry, generateToken, hashToken, openSqliteStore, type RegistryStore } from '@tether/registry';
import { afterEach } from 'vitest';
import { createRelay, type Relay } from '../app.js';
import type { RelayLimits } from '../limits.js';
import { signingKey } from './support.js';

/** The fields of the registry answers these tests read (register, connect, admin environments). */
export interface RegistryBody {
  url: string;
  environment_id: string;
  executor_registration_id: string;
  executor_public_key: Record<string, unknown>;
  harness_key_authorization: string;
  environments: Array<{ environment_id: string; relay_link: string; relay_node: string | null }>;
}

export interface Rig {
  registryUrl: string;
  relays: Array<{ relay: Relay; url: string }>;
  tokens: { executor: string; harness: string; admin: string };
  /** JSON POST/GET to the registry with a bearer token. */
  call(
    method: 'GET' | 'POST' | 'DELETE',
    path: string,
    token: string,
    body?: unknown,
  ): Promise<{ status: number; body: RegistryBody }>;
}

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/**
 * Our real registry (factory, SQLite in a temp dir, listening on 127.0.0.1:0) with `nodes` relays as its
 * relay nodes, each sending presence heartbeats with its own relay-role key (bound to its URL).
 */
export async function startRig(nodes = 1, limits: Partial<RelayLimits> = {}, heartbeatIntervalMs = 500): Promise<Rig> {
  const dir = mkdtempSync(join(tmpdir(), 'relay-rig-'));
  const store: RegistryStore = openSqliteStore(join(dir, 'registry.db'));
  const relays: Rig['relays'] = [];
  for (let i = 0; i < nodes; i++) {
    const relay = createRelay({ publicKey: signingKey.publicKey, limits });
    relays.push({ relay, url: await relay.listen('127.0.0.1', 0) });
  }
  const app = await buildRegistry(
    { relayUrls: relays.map((r) => r.url), relayPresenceTtlMs: 5_000 },
    { store, signingKey },
  );
  const registryUrl = await app.listen({ host: '127.0.0.1', port: 0 });
  cleanups.push(async () => {
    await Promise.all(relays.map((r) => r.relay.close()));
    await app.close();
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });
  const tokens = { executor: generateToken(), harness: generateToken(), admin: generateToken() };
  for (const role of ['executor', 'harness', 'admin'] as const) {
    await store.createApiKey({
      id: `key-${role}`,
      tokenHash: hashToken(tokens[role]),
      role,
      environments: '*',
      label: role,
      createdAt: Date.now(),
    });
  }
  for (const [i, { relay, url }] of relays.entries()) {
    const token = generateToken();
    await store.createApiKey({
      id: `key-relay-${i}`,
      tokenHash: hashToken(token),
      role: 'relay',
      relayUrl: url,
      environments: '*',
      label: `relay ${i}`,
      createdAt: Date.now(),
    });
    await relay.startHeartbeat({ registryUrl, token, intervalMs: heartbeatIntervalMs });
  }
  const call: Rig['call'] = async (method, path, token, body) => {
    const response = await fetch(`${registryUrl}${path}`, {
      method,
      headers: { authorization: `Bearer ${token}`, ...(body ? { 'content-type': 'application/json' } : {}) },
      ...(body ? { body: JSON.stringify(body) } : {}),
    });
    return { status: response.status, body: (await response.json()) as RegistryBody };
  };
  return { registryUrl, relays, tokens, call };
}
