/**
 * `registry serve` with the UI flags, in-process: --ui-dir serves the page with the relay origins in its CSP and
 * CORS for --ui-origin; --no-ui drops /ui; a --ui-dir without index.html and a malformed --ui-origin are refused.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { scratch } from '@tether/test-kit';
import { afterEach, describe, expect, it } from 'vitest';
import { buildCli } from './cli.js';

const test = scratch();
afterEach(() => test.cleanup());
const tempDir = () => test.dir('registry-ui-serve-');

/** Starts `registry serve ARGS`; `url` resolves with its printed URL, `stop()` with its exit code and output. */
function serve(args: string[]) {
  let stdout = '';
  let stderr = '';
  let stop: (value?: unknown) => void = () => {};
  let printed: (url: string) => void = () => {};
  const url = new Promise<string>((resolve) => {
    printed = resolve;
  });
  const exited = new Promise<number>((resolve) => {
    const io = {
      stdout: {
        write: (t: string) => {
          stdout += t;
          printed(stdout.split('\n')[0] as string);
          return true;
        },
      },
      stderr: { write: (t: string) => (stderr += t) },
      env: {},
      stopSignal: new Promise((s) => {
        stop = s;
      }),
    };
    const program = buildCli(io, resolve);
    program.exitOverride();
    for (const sub of program.commands) sub.exitOverride();
    program.parseAsync(['node', 'registry', 'serve', ...args]).catch(() => resolve(2));
  });
  return {
    url,
    exited,
    stop: async () => {
      stop();
      return { code: await exited, stdout, stderr };
    },
    stderr: () => stderr,
  };
}

const common = (dir: string) => [
  '--listen',
  '127.0.0.1:0',
  '--database',
  `sqlite:${join(dir, 'r.db')}`,
  '--relay-url',
  'ws://127.0.0.1:7001,wss://relay.example',
  '--log-level',
  'warn',
];

describe('registry serve --ui-dir / --no-ui / --ui-origin', () => {
  it('serves --ui-dir under /ui with the relay origins in the CSP, and CORS for --ui-origin', async () => {
    const dir = tempDir();
    mkdirSync(join(dir, 'ui'));
    writeFileSync(join(dir, 'ui', 'index.html'), '<!doctype html>');
    const server = serve([...common(dir), '--ui-dir', join(dir, 'ui'), '--ui-origin', 'https://ui.example']);
    const url = await server.url;
    const page = await fetch(`${url}/ui/`);
    expect(page.status).toBe(200);
    expect(await page.text()).toBe('<!doctype html>');
    const root = await fetch(`${url}/`, { redirect: 'manual' });
    expect(root.status).toBe(302);
    expect(root.headers.get('location')).toBe('/ui/');
    expect(page.headers.get('content-security-policy')).toContain(
      "connect-src 'self' ws://127.0.0.1:7001 wss://relay.example;",
    );
    const preflight = await fetch(`${url}/cloud/browser-grants/exchange`, {
      method: 'OPTIONS',
      headers: { origin: 'https://ui.example', 'access-control-request-method': 'POST' },
    });
    expect(preflight.status).toBe(204);
    expect(preflight.headers.get('access-control-allow-origin')).toBe('https://ui.example');
    expect((await server.stop()).code).toBe(0);
  });

  it('--no-ui serves no /ui at all', async () => {
    const dir = tempDir();
    const server = serve([...common(dir), '--no-ui']);
    const url = await server.url;
    const page = await fetch(`${url}/ui/`);
    expect(page.status).toBe(404);
    expect(page.headers.get('content-security-policy')).toBeNull();
    const root = await fetch(`${url}/`, { redirect: 'manual' });
    expect(root.status).toBe(404);
    expect(((await root.json()) as { error: { code: string } }).error.code).toBe('not_found');
    expect((await server.stop()).code).toBe(0);
  });

  it('refuses a --ui-dir without index.html and a --ui-origin that is not an origin', async () => {
    const dir = tempDir();
    const empty = serve([...common(dir), '--ui-dir', dir]);
    expect(await empty.exited).toBe(1);
    expect(empty.stderr()).toContain('holds no index.html');
    for (const origin of ['https://ui.example/', 'https://ui.example/path', 'ftp://ui.example', '*']) {
      const bad = serve([...common(dir), '--ui-origin', origin]);
      expect(await bad.exited, origin).toBe(2);
      expect(bad.stderr(), origin).toContain('not an origin');
    }
  });
});
