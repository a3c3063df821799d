/**
 * The harness CLI bin against a hostile executor: a stand-in exec-server on a WebSocket (127.0.0.1:0) that
 * speaks just enough JSON-RPC (`initialize`, `fs/*`) to serve a made-up tree whose listing names entries
 * outside the destination (`../../x`, `a/b`, `..`, ``, a NUL) or a link. `harness cp -r --url` must refuse
 * each with an error naming the entry, write nothing outside the destination, and never create a link.
 * Only the harness side is under test here; the real executor never lists such names.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type HostileTree, hostileFsAnswers, repoRoot } from '@tether/test-kit';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { WebSocketServer } from 'ws';

/** The tree the stand-in serves next (each test sets it). */
let tree: HostileTree = {};

let server: WebSocketServer;
let url: string;
beforeAll(async () => {
  server = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  await once(server, 'listening');
  url = `ws://127.0.0.1:${(server.address() as AddressInfo).port}`;
  server.on('connection', (socket) => {
    const answer = hostileFsAnswers(() => tree);
    socket.on('message', (data) => {
      const message = JSON.parse(String(data)) as { id?: number | string; method: string; params?: unknown };
      if (message.id === undefined) return; // `initialized`
      if (message.method === 'process/start') {
        // An error whose message would drive the user's terminal (a title change, a C1 CSI colour).
        const error = { code: -32603, message: 'no\u001b]0;pwned\u0007 \u009b31mred' };
        socket.send(JSON.stringify({ id: message.id, error }));
        return;
      }
      const result = answer(message.method, (message.params ?? {}) as Record<string, unknown>);
      socket.send(
        JSON.stringify(
          result === null
            ? { id: message.id, error: { code: -32601, message: `${message.method} is not served here` } }
            : { id: message.id, result },
        ),
      );
    });
  });
});
afterAll(async () => {
  for (const client of server?.clients ?? []) client.terminate();
  await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
});

let box: string;
let destination: string;
beforeEach(() => {
  box = mkdtempSync(join(tmpdir(), 'tether-hostile-e2e-'));
  destination = join(box, 'dst');
  mkdirSync(destination);
  writeFileSync(join(box, 'outside.txt'), 'untouched');
  return () => rmSync(box, { recursive: true, force: true });
});

/** Every path in the box outside the destination: what a copy must leave alone. */
function outsideDestination(): string[] {
  return readdirSync(box, { recursive: true, encoding: 'utf8' })
    .filter((path) => path !== 'dst' && !path.startsWith('dst/'))
    .sort();
}

/** Runs the harness bin (the built CLI). */
function harness(args: string[]): Promise<{ code: number | null; stderr: string }> {
  const child = spawn(process.execPath, [join(repoRoot(), 'apps', 'harness', 'bin', 'harness.js'), ...args], {
    env: { ...process.env, TETHER_HARNESS_REGISTRY: '', TETHER_HARNESS_URL: '' },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => {
    stderr += d;
  });
  return new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('exit', (code) => resolve({ code, stderr }));
  });
}

describe('harness cp -r (the CLI bin) from a hostile executor', () => {
  for (const [name, why] of [
    ['../../x', 'contains "/"'],
    ['a/b', 'contains "/"'],
    ['..', 'is ".."'],
    ['', 'is empty'],
    ['x\u0000y', 'contains a NUL byte'],
  ] as const) {
    it(`refuses the entry ${JSON.stringify(name)}, names it, and writes nothing outside the destination`, async () => {
      tree = { '/tree': [{ name, file: 'pwned' }], '/tree/a': [{ name: 'b', file: 'pwned' }] };
      const before = outsideDestination();
      const result = await harness(['cp', '-r', '-q', '--url', url, 'hostile:/tree', destination]);
      expect(result.code).toBe(1);
      expect(result.stderr).toContain(`entry name ${JSON.stringify(name)} ${why}`);
      expect(outsideDestination()).toEqual(before);
      expect(existsSync(join(box, 'x'))).toBe(false);
      expect(readFileSync(join(box, 'outside.txt'), 'utf8')).toBe('untouched');
    });
  }

  it('skips a link entry (`evil -> outside`) and names it: never a link, never what it points to', async () => {
    const claimed = join(box, 'evil-target');
    tree = { '/tree': [{ name: 'evil', file: 'the link target', link: claimed }] };
    const before = outsideDestination();
    const result = await harness(['cp', '-r', '-q', '--url', url, 'hostile:/tree', destination]);
    expect(result.code, result.stderr).toBe(0);
    expect(result.stderr).toBe('harness: skipped the symbolic link hostile:/tree/evil (cp -r copies no links)\n');
    expect(existsSync(join(destination, 'tree', 'evil'))).toBe(false);
    expect(existsSync(claimed)).toBe(false);
    expect(outsideDestination()).toEqual(before);
  });
});

describe('the harness CLI bin prints what a hostile executor says, not what it would do to a terminal', () => {
  it('shows control characters in an executor error message as ?', async () => {
    const result = await harness(['exec', '--url', url, '--', 'true']);
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('no?]0;pwned? ?31mred');
    expect(result.stderr).not.toMatch(/[\u0000-\u0009\u000b-\u001f\u007f-\u009f]/);
  });
});
