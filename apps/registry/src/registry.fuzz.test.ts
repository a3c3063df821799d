import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { generateIdentity, publicKeyToJson } from '@tether/noise';
import fc from 'fast-check';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createKey, newSigningKey } from './__tests__/app-fixture.js';
import { buildRegistry } from './app.js';
import { openSqliteStore, type RegistryStore, type Role } from './store/index.js';

// Hostile requests at the registry (issue 16): any method, path, id, Authorization header and JSON body is
// answered with a 2xx or a 4xx `{"error":{"code",…}}`, never a 5xx. Runs per property: TETHER_FUZZ_RUNS
// (`pnpm fuzz` raises it), a third of it here since each run is an HTTP request through the whole app.
const numRuns = Math.max(50, Math.ceil((Number(process.env.TETHER_FUZZ_RUNS) || 300) / 3));
// TETHER_FUZZ_SEED replays a failure's printed seed.
if (process.env.TETHER_FUZZ_SEED) fc.configureGlobal({ seed: Number(process.env.TETHER_FUZZ_SEED) });

let dir: string;
let store: RegistryStore;
let app: FastifyInstance;
const tokens: Partial<Record<Role, string>> = {};

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'registry-fuzz-'));
  store = openSqliteStore(join(dir, 'registry.db'));
  app = await buildRegistry(
    // Rate limits lifted: with many runs, every request would otherwise be the same 429 after the first 600.
    { relayUrls: ['ws://relay-a:8081'], rateLimit: { unauthenticated: 1e9, perKey: 1e9 } },
    { store, signingKey: newSigningKey() },
  );
  for (const role of ['executor', 'harness', 'admin', 'relay'] as const) {
    tokens[role] = await createKey(store, {
      id: `fuzz-${role}`,
      role,
      environments: '*',
      label: role,
      createdAt: Date.now(),
    });
  }
});

afterAll(async () => {
  await app?.close();
  await store?.close();
  rmSync(dir, { recursive: true, force: true });
});

const publicKey = publicKeyToJson(generateIdentity().publicKey);
const ROUTES = [
  ['POST', '/cloud/environment/:id/register'],
  ['POST', '/cloud/environment/:id/connect'],
  ['POST', '/cloud/environment/:id/validate'],
  ['GET', '/v1/relay-signing-key'],
  ['POST', '/v1/relay/heartbeat'],
  ['GET', '/v1/environments'],
  ['DELETE', '/v1/environments/:id/registrations/:id'],
  ['DELETE', '/v1/keys/:id'],
  ['POST', '/v1/environments/:id/owner'],
  ['GET', '/v1/relay/nodes'],
  ['GET', '/livez'],
  ['GET', '/readyz'],
  ['GET', '/metrics'],
] as const;

/** Path segments: valid ids, near misses, traversal, encodings, long and non-ASCII ones. */
const segment = fc.oneof(
  fc.stringMatching(/^[A-Za-z0-9_-]{1,12}$/),
  fc.constantFrom('', '..', '.', '%2e%2e', '%00', '%2F', 'a%20b', 'x'.repeat(129), 'x'.repeat(300), 'é', '*', '?'),
  fc.string({ unit: 'binary-ascii', maxLength: 12 }).map(encodeURIComponent),
  fc.string({ maxLength: 8 }),
);

const path = fc.oneof(
  fc
    .tuple(fc.constantFrom(...ROUTES), segment, segment)
    .map(([[, route], a, b]) => route.replace(':id', a).replace(':id', b)),
  // A request target always starts with `/` (an empty one is not a request at all).
  fc.webPath().map((p) => (p.startsWith('/') ? p : `/${p}`)),
  fc.string({ unit: 'binary-ascii', maxLength: 30 }).map((s) => `/${s}`),
);

const authorization = fc.oneof(
  fc.constantFrom('executor', 'harness', 'admin', 'relay').map((role) => `Bearer ${tokens[role as Role]}`),
  fc.string({ unit: 'binary-ascii', maxLength: 40 }),
  fc.string({ maxLength: 20 }).map((s) => `Bearer ${s}`),
  fc.constantFrom('Bearer ', 'Basic abc', 'bearer x', `Bearer ${'x'.repeat(600)}`),
);

/** Bodies with the registry's field names and values of every type (valid keys among them). */
const fieldValue = fc.oneof(
  fc.jsonValue({ maxDepth: 2 }),
  fc.constant(publicKey),
  fc.constant({ ...publicKey, suite: 'other' }),
  fc.constantFrom('noise_hybrid_ik_v1', 'ws://relay-a:8081', 'x'.repeat(5000)),
  fc.array(fc.string({ maxLength: 6 }), { maxLength: 4 }),
);
const body = fc.oneof(
  fc.jsonValue({ maxDepth: 3 }),
  fc.dictionary(
    fc.constantFrom(
      'security_profile',
      'executor_public_key',
      'harness_public_key',
      'harness_key_authorization',
      'executor_registration_id',
      'url',
      'environments',
      'api_key_id',
      '__proto__',
      'constructor',
    ),
    fieldValue,
    { maxKeys: 4 },
  ),
);

const request = fc.record(
  {
    method: fc.constantFrom('GET', 'POST', 'DELETE', 'PUT', 'PATCH', 'OPTIONS', 'HEAD'),
    url: path,
    authorization,
    body: fc.oneof(
      body.map((b) => JSON.stringify(b)),
      fc.string({ unit: 'binary', maxLength: 40 }),
    ),
    contentType: fc.constantFrom('application/json', 'application/json; charset=utf-8', 'text/plain', 'x/y', ''),
  },
  { requiredKeys: ['method', 'url'] },
);

describe('fuzz: registry requests', () => {
  it('answers any request with 2xx or a 4xx JSON error, never a 5xx', async () => {
    await fc.assert(
      fc.asyncProperty(request, async (r) => {
        fc.pre(URL.canParse(r.url, 'http://localhost')); // inject() needs a URL
        const headers: Record<string, string> = {};
        if (r.authorization !== undefined) headers.authorization = r.authorization;
        if (r.contentType) headers['content-type'] = r.contentType;
        const withBody = r.body !== undefined && r.method !== 'GET' && r.method !== 'HEAD';
        const res = await app.inject({
          method: r.method,
          url: r.url,
          headers,
          ...(withBody ? { payload: r.body } : {}),
        });
        expect(res.statusCode, `${r.method} ${r.url} → ${res.statusCode} ${res.body}`).toBeLessThan(500);
        if (res.statusCode >= 400 && r.method !== 'HEAD') {
          const parsed = JSON.parse(res.body) as { error?: { code?: unknown } };
          expect(typeof parsed.error?.code).toBe('string');
        }
      }),
      { numRuns },
    );
  });
});
