import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  type HttpProxy,
  NO_AMBIENT_PROXY,
  repoRoot,
  runToEndBytes,
  type Stack,
  startHttpProxy,
  startStack,
} from '@tether/test-kit';
import { afterAll, afterEach, beforeAll, expect, it } from 'vitest';

const work = mkdtempSync(join(tmpdir(), 'tether-harness-proxy-'));
let stack: Stack;
const proxies: HttpProxy[] = [];

beforeAll(async () => {
  stack = await startStack();
  await stack.startExecutor('tether', 'proxy-env');
}, 120_000);

afterEach(async () => {
  for (const proxy of proxies.splice(0)) await proxy.close();
});

afterAll(async () => {
  await stack?.close();
  rmSync(work, { recursive: true, force: true });
});

async function harness(
  args: string[],
  env: NodeJS.ProcessEnv,
): Promise<{ code: number | null; stdout: Buffer; stderr: string }> {
  const { code, stdout, stderr } = await runToEndBytes(
    process.execPath,
    [join(repoRoot(), 'apps', 'harness', 'bin', 'harness.js'), ...args],
    {
      env: {
        ...process.env,
        ...NO_AMBIENT_PROXY,
        TETHER_CONFIG: join(work, 'no-config.toml'),
        TETHER_HARNESS_REGISTRY: stack.registryUrl,
        TETHER_HARNESS_ENVIRONMENT_ID: 'proxy-env',
        TETHER_HARNESS_API_KEY: stack.keys.harness,
        ...env,
      },
    },
  );
  return { code, stdout, stderr };
}

it('harness exec goes through HTTP_PROXY: /connect in absolute form, the relay through CONNECT, every byte', async () => {
  const proxy = await startHttpProxy({ credentials: 'user:pa55' });
  proxies.push(proxy);
  const script = 'head -c 8388608 /dev/zero | tr "\\0" x; echo tail';
  const run = await harness(['exec', '--', 'sh', '-c', script], {
    HTTP_PROXY: proxy.url.replace('http://', 'http://user:pa55@'),
  });
  expect(run.stderr).toBe('');
  expect(run.code).toBe(0);
  const expected = createHash('sha256').update(Buffer.concat([Buffer.alloc(8388608, 'x'), Buffer.from('tail\n')]));
  expect(createHash('sha256').update(run.stdout).digest('hex')).toBe(expected.digest('hex'));
  const routes = proxy.seen.map(
    ({ kind, target, authorization }) => `${kind} ${target} ${authorization ? 'auth' : '-'}`,
  );
  expect(routes).toContain(`forward ${stack.registryUrl}/cloud/environment/proxy-env/connect auth`);
  expect(routes.some((route) => /^connect 127\.0\.0\.1:\d+ auth$/.test(route))).toBe(true);
});

it('NO_PROXY keeps the harness off the proxy', async () => {
  const proxy = await startHttpProxy();
  proxies.push(proxy);
  const run = await harness(['exec', '--', 'echo', 'direct'], { HTTP_PROXY: proxy.url, NO_PROXY: '127.0.0.1' });
  expect(run).toMatchObject({ code: 0, stderr: '' });
  expect(run.stdout.toString()).toBe('direct\n');
  expect(proxy.seen).toEqual([]);
});

it('a proxy that is down exits 255 naming the proxy without its credentials; a malformed one exits 2', async () => {
  const down = await startHttpProxy();
  const port = new URL(down.url).port;
  await down.close();
  const run = await harness(['exec', '--', 'true'], { HTTP_PROXY: `http://user:hunter2@127.0.0.1:${port}` });
  expect(run.code).toBe(255);
  expect(run.stderr).toContain(`through the proxy http://127.0.0.1:${port}`);
  expect(run.stderr).not.toContain('hunter2');
  const malformed = await harness(['exec', '--', 'true'], { HTTP_PROXY: 'http://user:hunter2@[oops' });
  expect(malformed.code).toBe(2);
  expect(malformed.stderr).toBe('harness: HTTP_PROXY is not a proxy URL (expected http://HOST:PORT)\n');
});
