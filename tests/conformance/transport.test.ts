// Transport, session and lifecycle behaviour: HTTP routes, frames, resume, concurrency, shutdown.
// Run for every peer × transport; ws-only behaviours are registered for the ws transport only.
import { writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { join } from 'node:path';
import { connectWs, isAlive, type RpcMessage, readUntilOutput, type TestClient, waitUntil } from '@tether/test-kit';
import { describe, expect, it } from 'vitest';
import { CASES, resumeWhenDetached, sh, useHarness } from './support.ts';

interface HttpResult {
  status: number;
  body: string;
}

function httpRequest(url: string, path: string, method = 'GET', headers: Record<string, string> = {}) {
  const target = new URL(url.replace(/^ws:/, 'http:'));
  return new Promise<HttpResult>((resolve, reject) => {
    const req = request({ host: target.hostname, port: target.port, path, method, headers }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        body += chunk;
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.setTimeout(10_000, () => req.destroy(new Error(`HTTP ${method} ${path} timed out`)));
    req.on('error', reject);
    req.end();
  });
}

/** Starts `sleep` in the background plus a waiting shell; returns both pids (the whole process group). */
async function startSleepers(client: TestClient, startParams: Record<string, unknown>): Promise<number[]> {
  await client.call('process/start', startParams);
  const processId = startParams.processId as string;
  const { output } = await readUntilOutput(client, processId, (o) => o.endsWith('\n'));
  const pids = output.trim().split(' ').map(Number);
  expect(pids.every((pid) => isAlive(pid))).toBe(true);
  return pids;
}

describe.each(CASES)('transport: %s', (_label, { kind, transport }) => {
  const h = useHarness();
  const sleepers = (processId: string) => h.startParams(processId, sh('sleep 1000 & echo "$! $$"; wait'));
  /** Sleepers under `${prefix}1` on pipes and `${prefix}2` on a terminal: the pids of both shells and sleeps. */
  const pipeAndTtySleepers = async (client: TestClient, prefix: string) => [
    ...(await startSleepers(client, sleepers(`${prefix}1`))),
    ...(await startSleepers(client, { ...sleepers(`${prefix}2`), tty: true })),
  ];

  if (transport === 'ws') {
    describe('websocket listener', () => {
      it('prints exactly one ws://IP:PORT line on stdout', async () => {
        const { peer } = await h.session(kind, transport);
        expect(peer.url).toMatch(/^ws:\/\/127\.0\.0\.1:\d+$/);
        expect(peer.stdoutLines).toEqual([peer.url]);
      });

      it('GET /readyz → 200 with an empty body', async () => {
        const peer = await h.start(kind, transport);
        expect(await httpRequest(peer.url!, '/readyz')).toEqual({ status: 200, body: '' });
      });

      it('any request with an Origin header → 403 (upgrade and /readyz)', async () => {
        const peer = await h.start(kind, transport);
        await expect(connectWs(peer.url!, { headers: { Origin: 'http://evil.example' } })).rejects.toThrow(/HTTP 403/);
        expect((await httpRequest(peer.url!, '/readyz', 'GET', { Origin: 'http://evil.example' })).status).toBe(403);
        // Still serving normal clients.
        const client = await h.connect(peer);
        expect(await client.call('initialize', { clientName: 'after-origin' })).toMatchObject({
          sessionId: expect.any(String),
        });
      });

      it('accepts JSON in binary frames; replies in text frames', async () => {
        const peer = await h.start(kind, transport);
        const client = await h.connect(peer);
        client.sendRaw(Buffer.from(JSON.stringify({ id: 1, method: 'initialize', params: { clientName: 'bin' } })));
        const response = await client.waitForMessage((m) => m.id === 1);
        expect(response.result).toMatchObject({ sessionId: expect.any(String) });
        client.sendRaw(Buffer.from(JSON.stringify({ method: 'initialized' })));
        client.sendRaw(Buffer.from(JSON.stringify({ id: 2, method: 'environment/status', params: {} })));
        expect((await client.waitForMessage((m) => m.id === 2)).result).toEqual({ status: 'ready' });
        const mark = client.messages.length;
        client.sendRaw(Buffer.from([0xff, 0xfe, 0x00]));
        const error = await client.waitForMessage((m) => client.messages.indexOf(m) >= mark && m.id === -1);
        expect(error.error?.code).toBe(-32600);
      });

      it('initialized before initialize closes the connection', async () => {
        const peer = await h.start(kind, transport);
        const client = await h.connect(peer);
        client.notify('initialized', {});
        await client.closed;
      });

      it('a response nobody asked for closes the connection', async () => {
        const peer = await h.start(kind, transport);
        const client = await h.connect(peer);
        await client.call('initialize', { clientName: 'stray' });
        client.sendRaw(JSON.stringify({ id: 77, result: {} }));
        await client.closed;
      });

      it('connections have independent sessions', async () => {
        const a = await h.session(kind, transport);
        const b = await h.connect(a.peer);
        const result = await b.call<{ sessionId: string }>('initialize', { clientName: 'second' });
        expect(result.sessionId).not.toBe(a.sessionId);
        b.notify('initialized', {});
        await a.client.call('process/start', h.startParams('only-in-a', ['true']));
        expect((await b.request('process/read', { processId: 'only-in-a' })).error).toEqual({
          code: -32600,
          message: 'unknown process id only-in-a',
        });
      });

      it('resuming a session that is still attached → -32010', async () => {
        const { peer, sessionId } = await h.session(kind, transport);
        const other = await h.connect(peer);
        const response = await other.request('initialize', { clientName: 'thief', resumeSessionId: sessionId });
        expect(response.error).toEqual({
          code: -32010,
          message: `session ${sessionId} is already attached to another connection`,
        });
        // The failed resume leaves the connection free to initialize a fresh session.
        const fresh = await other.call<{ sessionId: string }>('initialize', { clientName: 'fresh' });
        expect(fresh.sessionId).not.toBe(sessionId);
      });

      it('a clean close detaches; the session and its processes survive and can be resumed', async () => {
        const { peer, client, sessionId } = await h.session(kind, transport);
        const pids = await startSleepers(client, sleepers('survivor'));
        await client.close();
        const resumed = await resumeWhenDetached(h, peer, sessionId, 'back');
        expect(pids.every((pid) => isAlive(pid))).toBe(true);
        expect(await resumed.call('process/terminate', { processId: 'survivor' })).toEqual({ running: true });
        for (const pid of pids) await waitUntil(() => !isAlive(pid), `pid ${pid} to die`);
      });

      it('SIGTERM → exit code 0 and every child (process groups included) is killed', async () => {
        const { peer, client } = await h.session(kind, transport);
        const pids = await pipeAndTtySleepers(client, 's');
        peer.kill('SIGTERM');
        expect(await peer.exited).toEqual({ code: 0, signal: null });
        await client.closed;
        for (const pid of pids) await waitUntil(() => !isAlive(pid), `pid ${pid} to die`);
      });

      // Tether's guarantee beyond codex (whose parent-death signal reaches only the direct child): even a
      // SIGKILLed executor leaves no child, grandchild or tty behind.
      if (kind === 'tether') {
        it('SIGKILL of the executor still kills every child, grandchildren and ttys included', async () => {
          const { peer, client } = await h.session(kind, transport);
          const pids = await pipeAndTtySleepers(client, 'k');
          peer.kill('SIGKILL');
          expect(await peer.exited).toEqual({ code: null, signal: 'SIGKILL' });
          for (const pid of pids) await waitUntil(() => !isAlive(pid), `pid ${pid} to die`);
        });
      }
    });
  }

  if (transport === 'stdio') {
    describe('stdio lifecycle', () => {
      it('stdin EOF → exit code 0 and every child is killed', async () => {
        const { peer, client } = await h.session(kind, transport);
        const pids = await pipeAndTtySleepers(client, 's');
        peer.stdin.end();
        expect(await peer.exited).toEqual({ code: 0, signal: null });
        for (const pid of pids) await waitUntil(() => !isAlive(pid), `pid ${pid} to die`);
      });

      it('SIGTERM kills every child; the server exits 0 by stdin EOF at the latest', async () => {
        const { peer, client } = await h.session(kind, transport);
        const pids = await startSleepers(client, sleepers('s1'));
        peer.kill('SIGTERM');
        for (const pid of pids) await waitUntil(() => !isAlive(pid), `pid ${pid} to die`);
        peer.stdin.end();
        expect(await peer.exited).toEqual({ code: 0, signal: null });
      });

      it('blank lines are skipped', async () => {
        const peer = await h.start(kind, transport);
        const client = await h.connect(peer);
        peer.stdin.write('\n   \n');
        const result = await client.call<{ sessionId: string }>('initialize', { clientName: 'blank' });
        expect(result.sessionId).toEqual(expect.any(String));
        expect(client.messages.filter((m) => m.id === -1)).toEqual([]);
      });
    });
  }

  describe('--concurrent-requests', () => {
    const gated = (gate: string) =>
      h.startParams('gated', sh('while [ ! -f "$GATE" ]; do sleep 0.01; done; echo released'), { env: { GATE: gate } });
    const order = (messages: RpcMessage[], ids: number[]) =>
      messages.filter((m) => ids.includes(m.id as number) && m.method === undefined).map((m) => m.id);

    it('default (1): a pending long-poll read delays later requests on the connection', async () => {
      const { client } = await h.session(kind, transport);
      const gate = join(h.workDir, `gate-inline-${kind}`);
      await client.call('process/start', gated(gate));
      const read = client.request('process/read', { processId: 'gated', waitMs: 20_000 }, { id: 100 });
      const status = client.request('environment/status', {}, { id: 101 });
      // Release only after both requests are on the wire; the read must answer first.
      await new Promise((resolve) => setTimeout(resolve, 300));
      writeFileSync(gate, '');
      await Promise.all([read, status]);
      expect(order(client.messages, [100, 101])).toEqual([100, 101]);
    });

    it('--concurrent-requests 4: control requests are answered while a long-poll is pending', async () => {
      const { client } = await h.session(kind, transport, { args: ['--concurrent-requests', '4'] });
      const gate = join(h.workDir, `gate-lanes-${kind}`);
      await client.call('process/start', gated(gate));
      const read = client.request('process/read', { processId: 'gated', waitMs: 20_000 }, { id: 100 });
      expect(await client.call('environment/status', {}, { id: 101 })).toEqual({ status: 'ready' });
      expect(await client.call('process/terminate', { processId: 'nope' }, { id: 102 })).toEqual({ running: false });
      writeFileSync(gate, '');
      const response = await read;
      // Output or the exit (whichever the server sees first) ends the long-poll.
      expect(response.error).toBeUndefined();
      expect(order(client.messages, [100, 101, 102])).toEqual([101, 102, 100]);
    });
  });
});
