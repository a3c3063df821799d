import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { cliRunner } from './__tests__/cli-runner.js';

const work = mkdtempSync(join(tmpdir(), 'tether-harness-transport-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));
const harness = cliRunner(work);

describe('harness CLI registry transport security', () => {
  /** A registry stand-in on 127.0.0.1:0 that refuses every key (HTTP 401): reaching it is what is tested. */
  async function refusingRegistry(): Promise<{ port: number; requests: () => number; close: () => Promise<void> }> {
    const { createServer } = await import('node:http');
    let requests = 0;
    const server = createServer((req, res) => {
      requests++;
      req.resume();
      res.writeHead(401, { 'content-type': 'application/json' });
      res.end('{"error":{"code":"unauthorized","message":"no"}}');
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return {
      port: (server.address() as { port: number }).port,
      requests: () => requests,
      close: () =>
        new Promise<void>((resolve) => {
          server.closeAllConnections();
          server.close(() => resolve());
        }),
    };
  }

  it('refuses a plain http:// registry off loopback unless --allow-insecure-registry or its variable', async () => {
    const registry = await refusingRegistry();
    try {
      // 0.0.0.0 is not a loopback address, yet on Linux a connection to it reaches this host's listener.
      const base = {
        TETHER_HARNESS_REGISTRY: `http://0.0.0.0:${registry.port}`,
        TETHER_HARNESS_API_KEY: 'secret-harness-key',
      };
      const refused = await harness(['exec', '--environment-id', 'env-x', '--', 'true'], base);
      expect(refused.code).toBe(2);
      expect(refused.stderr).toContain('refusing the plain http:// registry at 0.0.0.0');
      expect(refused.stderr).toContain('sent in clear');
      expect(refused.stderr).toContain('--allow-insecure-registry');
      expect(refused.stderr).not.toContain('secret-harness-key');
      expect(registry.requests()).toBe(0);

      for (const [args, env] of [
        [['--allow-insecure-registry'], base],
        [[], { ...base, TETHER_HARNESS_ALLOW_INSECURE_REGISTRY: '1' }],
        [[], { ...base, TETHER_ALLOW_INSECURE_REGISTRY: '1' }],
      ] as const) {
        const allowed = await harness(['exec', ...args, '--environment-id', 'env-x', '--', 'true'], env);
        expect(allowed.code).toBe(255);
        expect(allowed.stderr).toContain('refused the harness API key');
      }
      expect(registry.requests()).toBe(3);
      // Loopback needs no flag.
      const loopback = await harness(['exec', '--environment-id', 'env-x', '--', 'true'], {
        ...base,
        TETHER_HARNESS_REGISTRY: `http://127.0.0.1:${registry.port}`,
      });
      expect(loopback.stderr).toContain('refused the harness API key');
    } finally {
      await registry.close();
    }
  });

  it('--help names the flags', async () => {
    for (const command of [[], ['exec'], ['cp']]) {
      const result = await harness([...command, '--help'], {});
      expect(result.stdout).toContain(
        command.length === 0 ? 'TETHER_HARNESS_ALLOW_INSECURE_REGISTRY' : '--allow-insecure-registry',
      );
    }
    expect((await harness(['cp', '--help'], {})).stdout).toContain('--executor-key <file>');
  });

  it('--executor-key must name a readable public key file', async () => {
    const env = { TETHER_HARNESS_REGISTRY: 'http://127.0.0.1:9', TETHER_HARNESS_API_KEY: 'k' };
    const missing = await harness(
      ['exec', '--environment-id', 'e1', '--executor-key', join(work, 'nope.json'), '--', 'true'],
      env,
    );
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain('cannot read the executor key');
    const garbage = join(work, 'garbage-key.json');
    writeFileSync(garbage, '{"suite":"nope"}');
    const bad = await harness(['exec', '--environment-id', 'e1', '--executor-key', garbage, '--', 'true'], env);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain(`${garbage} is not an executor public key`);
  });

  it('--url serves one executor: a copy between two environments is refused', async () => {
    const result = await harness(['cp', '--url', 'ws://127.0.0.1:9', 'env-a:/x', 'env-b:/y'], {});
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('--url reaches one executor');
  });
});
