/**
 * `harness login --web` against the real registry (built bins through startStack): the link on stdout, the hint
 * only on a terminal, the registry and key resolved as for exec, and the usage errors.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { type Stack, startStack } from '@tether/test-kit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { run } from '../cli.js';

const work = mkdtempSync(join(tmpdir(), 'tether-login-'));
let stack: Stack;

async function harness(args: string[], env: NodeJS.ProcessEnv, stderrIsTTY = false) {
  const stdout = new PassThrough();
  const stderr = Object.assign(new PassThrough(), { isTTY: stderrIsTTY });
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  stdout.on('data', (chunk: Buffer) => out.push(chunk));
  stderr.on('data', (chunk: Buffer) => err.push(chunk));
  const code = await run(args, {
    stdin: new PassThrough(),
    stdout,
    stderr,
    env: { TETHER_CONFIG: join(work, 'no-config.toml'), ...env },
  });
  return { code, stdout: Buffer.concat(out).toString(), stderr: Buffer.concat(err).toString() };
}

beforeAll(async () => {
  stack = await startStack();
}, 60_000);

afterAll(async () => {
  await stack?.close();
  rmSync(work, { recursive: true, force: true });
});

describe('harness login --web', () => {
  it('prints the link on stdout, and on a terminal a hint with the expiry on stderr', async () => {
    const env = { TETHER_HARNESS_REGISTRY: stack.registryUrl, TETHER_HARNESS_API_KEY: stack.keys.harness };
    const before = Date.now();
    const result = await harness(['login', '--web', 'dev-1', '--ttl', '600'], env, true);
    expect(result.code).toBe(0);
    expect(result.stdout).toMatch(
      new RegExp(`^${stack.registryUrl.replace(/[.]/g, '\\.')}/ui/#env=dev-1&grant=tbgr_[A-Za-z0-9_-]{43}\\n$`),
    );
    const at = new Date(Math.floor(before / 1000) * 1000 + 600_000);
    const late = new Date(at.getTime() + 60_000);
    const hhmm = (d: Date) => `${String(d.getHours()).padStart(2, '0')}:${String(d.getMinutes()).padStart(2, '0')}`;
    expect(
      [hhmm(at), hhmm(late)].map((t) => `harness: open this link in a browser; it works once and expires at ${t}\n`),
    ).toContain(result.stderr);
  });

  it('takes the registry and environment from a config context and the key from --api-key-file', async () => {
    const keyFile = join(work, 'key');
    writeFileSync(keyFile, `${stack.keys.harness}\n`, { mode: 0o600 });
    const config = join(work, 'config.toml');
    const setup = await harness(
      ['config', 'set-context', 'ci', '--registry', stack.registryUrl, '--environment-id', 'dev-2', '--use'],
      { TETHER_CONFIG: config },
    );
    expect(setup.code).toBe(0);
    const result = await harness(['login', '--web', '--api-key-file', keyFile], { TETHER_CONFIG: config });
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    expect(result.stdout).toContain('/ui/#env=dev-2&grant=tbgr_');
  });

  it('refuses without --web, without a key, with a bad --ttl and with a plain http:// registry off loopback', async () => {
    const env = { TETHER_HARNESS_REGISTRY: stack.registryUrl, TETHER_HARNESS_API_KEY: stack.keys.harness };
    expect(await harness(['login', 'dev-1'], env)).toEqual({
      code: 2,
      stdout: '',
      stderr: 'harness: login needs --web (the only kind of login for now: a one-time browser link)\n',
    });
    const noKey = await harness(['login', '--web', 'dev-1'], { TETHER_HARNESS_REGISTRY: stack.registryUrl });
    expect(noKey.code).toBe(2);
    expect(noKey.stderr).toMatch(/no API key/);
    expect((await harness(['login', '--web', 'dev-1', '--ttl', '0'], env)).code).toBe(2);
    const tooLong = await harness(['login', '--web', 'dev-1', '--ttl', '16m'], env);
    expect([tooLong.code, tooLong.stderr]).toEqual([2, expect.stringContaining('at least 1s and at most 15m')]);
    const insecure = await harness(['login', '--web', 'dev-1', '--registry', 'http://registry.example'], env);
    expect(insecure.code).toBe(2);
    expect(insecure.stderr).toMatch(/refusing the plain http:\/\/ registry/);
    const wrong = await harness(['login', '--web', 'dev-1'], { ...env, TETHER_HARNESS_API_KEY: 'treg_nope' });
    expect(wrong.code).toBe(255);
    expect(wrong.stderr).toMatch(/HTTP 401/);
  });
});
