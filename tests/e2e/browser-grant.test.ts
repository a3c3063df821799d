/**
 * `harness login --web` through the real built registry, relay, executor and harness: the printed link carries a
 * one-time grant, which exchanges once for a session token that /connect accepts for that environment only.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { generateIdentity, publicKeyToJson } from '@tether/noise';
import { repoRoot, type Stack, startStack } from '@tether/test-kit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runWithTarget } from './harness-checks.js';

const ENVIRONMENT = 'browser-grant-1';
const work = mkdtempSync(join(tmpdir(), 'tether-browser-grant-'));
let stack: Stack;

/** The workspace's harness CLI, with the variables naming the stack and ENVIRONMENT (and `env` over them). */
const harness = (args: string[], env: NodeJS.ProcessEnv = {}) =>
  runWithTarget(process.execPath, [join(repoRoot(), 'apps', 'harness', 'dist', 'main.js'), ...args], {
    stack,
    environmentId: ENVIRONMENT,
    work,
    env,
  });

const post = (url: string, body: object, token?: string) =>
  fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(token ? { authorization: `Bearer ${token}` } : {}) },
    body: JSON.stringify(body),
  });

beforeAll(async () => {
  stack = await startStack();
  await stack.startExecutor('tether', ENVIRONMENT);
}, 120_000);

afterAll(async () => {
  await stack?.close();
  rmSync(work, { recursive: true, force: true });
});

describe('harness login --web', () => {
  it('prints a one-time link whose grant opens a session on that environment only', async () => {
    const env = { TETHER_HARNESS_REGISTRY: stack.registryUrl, TETHER_HARNESS_API_KEY: stack.keys.harness };
    const result = await harness(['login', '--web', '--environment-id', ENVIRONMENT, '--ttl', '120'], env);
    expect(result.stderr).toBe(''); // stderr is not a terminal: no hint
    expect(result.code).toBe(0);
    const lines = result.stdout.split('\n');
    expect(lines).toHaveLength(2);
    const link = new URL(lines[0] as string);
    expect(`${link.origin}${link.pathname}`).toBe(`${stack.registryUrl}/ui/`);
    const fragment = new URLSearchParams(link.hash.slice(1));
    expect(fragment.get('env')).toBe(ENVIRONMENT);
    const grant = fragment.get('grant') as string;
    expect(grant).toMatch(/^tbgr_/);

    const exchanged = await post(`${stack.registryUrl}/cloud/browser-grants/exchange`, { grant });
    expect(exchanged.status).toBe(200);
    const session = (await exchanged.json()) as { token: string; environment_id: string; expires_at: number };
    expect(session.environment_id).toBe(ENVIRONMENT);
    expect(session.expires_at).toBeGreaterThan(Date.now() / 1000 + 3000);

    const harnessKey = publicKeyToJson(generateIdentity().publicKey);
    const connect = (id: string) =>
      post(`${stack.registryUrl}/cloud/environment/${id}/connect`, { harness_public_key: harnessKey }, session.token);
    const here = await connect(ENVIRONMENT);
    expect(here.status).toBe(200);
    expect(((await here.json()) as { environment_id: string }).environment_id).toBe(ENVIRONMENT);
    const elsewhere = await connect('browser-grant-2');
    expect(elsewhere.status).toBe(403);
    expect(((await elsewhere.json()) as { error: { code: string } }).error.code).toBe('forbidden_environment');

    const again = await post(`${stack.registryUrl}/cloud/browser-grants/exchange`, { grant });
    expect(again.status).toBe(401);
    expect(((await again.json()) as { error: { code: string } }).error.code).toBe('invalid_grant');
  });

  it('needs --web, and a key that covers the environment', async () => {
    const env = { TETHER_HARNESS_REGISTRY: stack.registryUrl, TETHER_HARNESS_API_KEY: stack.keys.harness };
    const bare = await harness(['login', '--environment-id', ENVIRONMENT], env);
    expect(bare.code).toBe(2);
    expect(bare.stderr).toMatch(/login needs --web/);
    const wrongKey = await harness(['login', '--web', ENVIRONMENT], {
      ...env,
      TETHER_HARNESS_API_KEY: stack.keys.executor,
    });
    expect(wrongKey.code).toBe(255);
    expect(wrongKey.stdout).toBe('');
    expect(wrongKey.stderr).toMatch(/refused the harness API key .*HTTP 403/);
    const badTtl = await harness(['login', '--web', ENVIRONMENT, '--ttl', '901'], env);
    expect(badTtl.code).toBe(2);
  });
});
