// CLI behaviours of codex-rs/cli/tests/exec_server.rs that apply to a local executor, run against
// codex (`codex exec-server`, config in $CODEX_HOME/config.toml) and tether (`node
// apps/executor/dist/main.js`, config in $TETHER_HOME/config.toml), plus the listen-URL rules.
import { writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { join } from 'node:path';
import { connectWs, initialize, runPeer } from '@tether/test-kit';
import { describe, expect, it } from 'vitest';
import { KIND_CASES, useHarness } from './support.ts';

function readyz(url: string): Promise<number> {
  const target = new URL(url.replace(/^ws:/, 'http:'));
  return new Promise((resolve, reject) => {
    const req = request({ host: target.hostname, port: target.port, path: '/readyz' }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
    });
    req.setTimeout(10_000, () => req.destroy(new Error('readyz timed out')));
    req.on('error', reject);
    req.end();
  });
}

describe.each(KIND_CASES)('cli: %s', (_label, kind) => {
  const h = useHarness();

  /** A peer with `--strict-config` and this `config.toml`, which must end it with an error (not a timeout). */
  async function strictConfigRefuses(listen: string, config: string) {
    const run = await runPeer({
      kind,
      args: ['--strict-config', '--listen', listen],
      homeFiles: { 'config.toml': config },
    });
    expect(run.timedOut).toBe(false);
    expect(run.code).not.toBe(0);
    return run;
  }

  it('--strict-config rejects unknown config fields', async () => {
    const run = await strictConfigRefuses('ws://127.0.0.1:0', 'foo = "bar"\n');
    expect(run.stderr).toContain('unknown configuration field');
    expect(run.stdout).toBe('');
  });

  it('--strict-config rejects invalid TOML', async () => {
    const run = await strictConfigRefuses('stdio', 'not valid toml = [\n');
    // codex: `Error: <home>/config.toml:1:5: key with no value, expected \`=\``
    expect(run.stderr).toContain(`${run.home}/config.toml`);
  });

  /** Starts a stdio peer, runs initialize over it, closes stdin; returns the exit and stderr. */
  async function serveOnce(args: string[], homeFiles?: Record<string, string>) {
    const peer = await h.start(kind, 'stdio', { args, ...(homeFiles ? { homeFiles } : {}) });
    const client = await h.connect(peer);
    const result = await initialize(client);
    expect(result.sessionId).toEqual(expect.any(String));
    peer.stdin.end();
    return { exit: await peer.exited, stderr: peer.stderr() };
  }

  it('without --strict-config an unknown field is ignored', async () => {
    const { exit } = await serveOnce([], { 'config.toml': 'foo = "bar"\n' });
    expect(exit).toEqual({ code: 0, signal: null });
  });

  it('without --strict-config invalid TOML is ignored silently', async () => {
    const { exit, stderr } = await serveOnce([], { 'config.toml': 'not valid toml = [\n' });
    expect(exit).toEqual({ code: 0, signal: null });
    expect(stderr).not.toContain('not valid toml');
  });

  it('--concurrent-requests 2 and 4 are accepted; 0 and non-numbers are usage errors', async () => {
    for (const count of ['2', '4']) {
      const run = await runPeer({ kind, args: ['--listen', 'stdio', '--concurrent-requests', count] });
      expect({ count, code: run.code, timedOut: run.timedOut }).toEqual({ count, code: 0, timedOut: false });
    }
    for (const count of ['0', 'abc']) {
      const run = await runPeer({ kind, args: ['--listen', 'stdio', '--concurrent-requests', count] });
      expect(run.timedOut).toBe(false);
      expect(run.code, `--concurrent-requests ${count}`).not.toBe(0);
      expect(run.stderr).toContain('--concurrent-requests');
    }
  });

  it('CODEX_EXEC_SERVER_EXIT_ON_STDIN_CLOSE=false is allowed in local mode', async () => {
    const run = await runPeer({
      kind,
      args: ['--listen', 'stdio'],
      env: { CODEX_EXEC_SERVER_EXIT_ON_STDIN_CLOSE: 'false' },
    });
    expect({ code: run.code, timedOut: run.timedOut }).toEqual({ code: 0, timedOut: false });
  });

  it('rejects listen URLs that are not ws://IP:PORT or stdio', async () => {
    const cases: Array<[string, string]> = [
      ['ws://localhost:1234', 'invalid websocket --listen URL `ws://localhost:1234`; expected `ws://IP:PORT`'],
      ['ws://127.0.0.1', 'invalid websocket --listen URL `ws://127.0.0.1`; expected `ws://IP:PORT`'],
      ['http://127.0.0.1:1234', 'unsupported --listen URL `http://127.0.0.1:1234`; expected `ws://IP:PORT` or `stdio`'],
    ];
    for (const [listen, message] of cases) {
      const run = await runPeer({ kind, args: ['--listen', listen] });
      expect(run.timedOut).toBe(false);
      expect(run.code, listen).not.toBe(0);
      expect(run.stderr).toContain(message);
    }
  });

  it('accepts --listen stdio:// (EOF → exit 0)', async () => {
    const run = await runPeer({ kind, args: ['--listen', 'stdio://'] });
    expect({ code: run.code, timedOut: run.timedOut, stdout: run.stdout }).toEqual({
      code: 0,
      timedOut: false,
      stdout: '',
    });
  });

  it('serves /readyz and exits 0 on SIGTERM (ws)', async () => {
    const peer = await h.start(kind, 'ws');
    expect(peer.url).toMatch(/^ws:\/\/127\.0\.0\.1:\d+$/);
    expect(await readyz(peer.url!)).toBe(200);
    peer.kill('SIGTERM');
    expect(await peer.exited).toEqual({ code: 0, signal: null });
  });

  it('--strict-config without a config file starts', async () => {
    const peer = await h.start(kind, 'ws', { args: ['--strict-config'] });
    expect(await readyz(peer.url!)).toBe(200);
  });

  it('--concurrent-requests 4 serves a ws session', async () => {
    const peer = await h.start(kind, 'ws', { args: ['--concurrent-requests', '4'] });
    const client = await connectWs(peer.url!);
    try {
      await initialize(client);
      expect(await client.call('environment/status', {})).toEqual({ status: 'ready' });
    } finally {
      await client.close();
    }
  });

  if (kind === 'tether') {
    it('tether: --config PATH is honoured by --strict-config', async () => {
      const path = join(h.workDir, 'explicit-config.toml');
      writeFileSync(path, 'foo = "bar"\n');
      const run = await runPeer({ kind, args: ['--strict-config', '--config', path, '--listen', 'stdio'] });
      expect(run.timedOut).toBe(false);
      expect(run.code).not.toBe(0);
      expect(run.stderr).toContain('unknown configuration field');
    });
  }
});
