/** The registry app on a fresh store with the API keys the app tests share, and its log lines as text. */
import { generateKeyPairSync } from 'node:crypto';
import { Writable } from 'node:stream';
import { generateIdentity, publicKeyToJson } from '@tether/noise';
import type { SigningKey } from '@tether/relay-auth';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import { buildRegistry, type RegistryConfig, type RegistryDeps } from '../app.js';
import type { KeyAccess, NewApiKey, RegistryStore, Role } from '../store/index.js';
import { generateToken, hashToken } from '../tokens.js';
import type { Engine } from './engines.js';

/** A new Ed25519 key to sign relay URLs with. */
export function newSigningKey(): SigningKey {
  const pair = generateKeyPairSync('ed25519');
  return { privateKey: pair.privateKey, publicKey: pair.publicKey };
}

/** Creates the API key `key` in `store` with a new token; the token. */
export async function createKey(store: RegistryStore, key: Omit<NewApiKey, 'tokenHash'>): Promise<string> {
  const token = generateToken();
  await store.createApiKey({ ...key, tokenHash: hashToken(token) });
  return token;
}

/** What a logger writes to `stream`, as text. */
export function logCapture(): { stream: Writable; text(): string } {
  let text = '';
  const stream = new Writable({
    write(chunk, _enc, done) {
      text += chunk.toString();
      done();
    },
  });
  return { stream, text: () => text };
}

export interface AppFixture {
  app: FastifyInstance;
  store: RegistryStore;
  /** Each API key's token, by the key's id. */
  tokens: Record<string, string>;
  addKey(id: string, role: Role, environments: string, access?: KeyAccess): Promise<void>;
  /** A request with `bearer` (a token, or null for none) and, when given, a JSON payload. */
  call(
    method: 'POST' | 'DELETE',
    url: string,
    bearer: string | null,
    payload?: object,
  ): Promise<LightMyRequestResponse>;
  close(): Promise<void>;
}

/**
 * The app over a fresh store of `engine`, signing with a new key, and the keys exec (executor, any environment),
 * harness and other (harness, dev-*) and admin (any); exec has registered each of `environments`.
 */
export async function openApp(
  engine: Engine,
  environments: readonly string[],
  config: Omit<RegistryConfig, 'relayUrls'>,
  deps: Omit<RegistryDeps, 'store' | 'signingKey'>,
): Promise<AppFixture> {
  const { store, drop } = await engine.open();
  const app = await buildRegistry(
    { relayUrls: ['ws://127.0.0.1:1'], ...config },
    { store, signingKey: newSigningKey(), ...deps },
  );
  const tokens: Record<string, string> = {};
  const fixture: AppFixture = {
    app,
    store,
    tokens,
    async addKey(id, role, keyEnvironments, access) {
      tokens[id] = await createKey(store, {
        id,
        role,
        environments: keyEnvironments,
        label: id,
        createdAt: 1,
        ...(access === undefined ? {} : { access }),
      });
    },
    call: (method, url, bearer, payload) =>
      app.inject({
        method,
        url,
        headers: bearer === null ? {} : { authorization: `Bearer ${bearer}` },
        ...(payload === undefined ? {} : { payload }),
      }),
    async close() {
      await app.close();
      await store.close();
      await drop();
    },
  };
  await fixture.addKey('exec', 'executor', '*');
  await fixture.addKey('harness', 'harness', 'dev-*');
  await fixture.addKey('other', 'harness', 'dev-*');
  await fixture.addKey('admin', 'admin', '*');
  const executorKey = publicKeyToJson(generateIdentity().publicKey);
  for (const environmentId of environments) {
    const registered = await fixture.call(
      'POST',
      `/cloud/environment/${environmentId}/register`,
      tokens.exec as string,
      {
        security_profile: 'noise_hybrid_ik_v1',
        executor_public_key: executorKey,
      },
    );
    if (registered.statusCode !== 200) throw new Error(`cannot register ${environmentId}: ${registered.body}`);
  }
  return fixture;
}
