// Protocol edge cases from exec-protocol.md, with the expectations taken from the real codex binary
// (see CODEX-FINDINGS.md where the two differ). Run for every peer × transport.
import { mkdirSync } from 'node:fs';
import { join, resolve } from 'node:path';
import {
  b64,
  collectUntilClosed,
  decodeB64Text,
  fileUri,
  isAlive,
  readProcess,
  readUntilOutput,
  type TestClient,
  waitUntil,
} from '@tether/test-kit';
import { describe, expect, it } from 'vitest';
import { CASES, resumeWhenDetached, sh, useHarness } from './support.ts';

const UUID_V4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

async function write(client: TestClient, processId: string, text: string, writeId: string): Promise<string> {
  const result = await client.call<{ status: string }>('process/write', { processId, chunk: b64(text), writeId });
  return result.status;
}

describe.each(CASES)('protocol: %s', (_label, { kind, transport }) => {
  const h = useHarness();
  const malformedPrefix =
    transport === 'ws'
      ? 'failed to parse websocket JSON-RPC message from exec-server websocket '
      : 'failed to parse JSON-RPC message from exec-server stdio: ';

  describe('handshake', () => {
    it('initialize returns a UUID v4 sessionId and environmentInfo; jsonrpc member never sent', async () => {
      const { client, initializeResult, sessionId } = await h.session(kind, transport);
      expect(sessionId).toMatch(UUID_V4);
      const info = initializeResult.environmentInfo as Record<string, unknown>;
      expect(info).toMatchObject({
        shell: { name: expect.any(String), path: expect.any(String) },
        cwd: expect.stringMatching(/^file:\/\//),
        platformOs: process.platform,
      });
      const response = await client.request('environment/info', null);
      expect(response.result).toEqual(info);
      expect(client.messages.every((m) => !('jsonrpc' in m))).toBe(true);
    });

    it('environmentInfo has Codex 0.171.0 fields: providerId (one per build), temporaryDirectories from TMPDIR', async () => {
      const tmp = join(h.workDir, `tmpdir-${kind}-${transport}`);
      mkdirSync(tmp, { recursive: true });
      const first = await h.session(kind, transport);
      const withTmp = await h.session(kind, transport, { env: { TMPDIR: tmp } });
      const info = first.initializeResult.environmentInfo as Record<string, unknown>;
      const infoWithTmp = withTmp.initializeResult.environmentInfo as Record<string, unknown>;
      expect(info.providerId).toMatch(/^sha256:[0-9a-f]{64}$/);
      expect(infoWithTmp.providerId).toBe(info.providerId);
      const inherited = process.env.TMPDIR;
      expect(info.temporaryDirectories).toEqual(inherited ? [fileUri(resolve(inherited))] : []);
      expect(infoWithTmp.temporaryDirectories).toEqual([fileUri(tmp)]);
      expect(infoWithTmp.tempDir).toBe(fileUri(tmp));
      // Codex reports its package's helper directory; ours reports what `[environment] prepend_path_dirs` names.
      if (kind === 'codex') {
        expect(info.prependPathDirs).toEqual([expect.stringMatching(/^file:\/\/.*\/codex-path$/)]);
      } else {
        expect(info).not.toHaveProperty('prependPathDirs');
        const configured = await h.session(kind, transport, {
          homeFiles: { 'config.toml': '[environment]\nprepend_path_dirs = ["/opt/tools/bin", "/usr/local/x"]\n' },
        });
        expect((configured.initializeResult.environmentInfo as Record<string, unknown>).prependPathDirs).toEqual([
          'file:///opt/tools/bin',
          'file:///usr/local/x',
        ]);
      }
    });

    it('gates exec methods before initialize and before initialized', async () => {
      const peer = await h.start(kind, transport);
      const client = await h.connect(peer);
      const params = h.startParams('gated', ['true']);
      expect((await client.request('process/start', params)).error).toEqual({
        code: -32600,
        message: 'client must call initialize before using exec methods',
      });
      expect((await client.request('process/read', { processId: 'gated' })).error).toEqual({
        code: -32600,
        message: 'client must call initialize before using exec methods',
      });
      await client.call('initialize', { clientName: 'tether-conformance' });
      expect((await client.request('process/start', params)).error).toEqual({
        code: -32600,
        message: 'client must send initialized before using exec methods',
      });
      client.notify('initialized', {});
      expect(await client.call('process/start', params)).toMatchObject({ processId: 'gated' });
    });

    it('rejects a second initialize, before and after initialized', async () => {
      const peer = await h.start(kind, transport);
      const client = await h.connect(peer);
      await client.call('initialize', { clientName: 'tether-conformance' });
      const error = { code: -32600, message: 'initialize may only be sent once per connection' };
      expect((await client.request('initialize', { clientName: 'again' })).error).toEqual(error);
      client.notify('initialized', {});
      expect((await client.request('initialize', { clientName: 'again' })).error).toEqual(error);
      expect(await client.call('environment/status', {})).toEqual({ status: 'ready' });
    });

    it('ignores a second initialized: the connection stays and answers (CODEX-FINDINGS 21)', async () => {
      const peer = await h.start(kind, transport);
      const client = await h.connect(peer);
      await client.call('initialize', { clientName: 'tether-conformance' });
      client.notify('initialized', {});
      client.notify('initialized', {});
      expect(await client.call('environment/status', {})).toEqual({ status: 'ready' });
    });

    it('unknown resumeSessionId → -32600, then a plain initialize on the same connection works', async () => {
      const peer = await h.start(kind, transport);
      const client = await h.connect(peer);
      const unknown = await client.request('initialize', {
        clientName: 'tether-conformance',
        resumeSessionId: 'no-such-session',
      });
      expect(unknown.error).toEqual({ code: -32600, message: 'unknown session id no-such-session' });
      const result = await client.call<{ sessionId: string }>('initialize', { clientName: 'tether-conformance' });
      expect(result.sessionId).toMatch(UUID_V4);
    });
  });

  describe('envelope', () => {
    it('echoes integer, negative and string ids and accepts a jsonrpc member', async () => {
      const { client } = await h.session(kind, transport);
      for (const id of [42, -7, 0, 'abc', 'id with spaces', '17']) {
        const response = await client.request('environment/status', {}, { id });
        expect(response.id).toStrictEqual(id);
        expect(response.result).toEqual({ status: 'ready' });
      }
      client.sendRaw(JSON.stringify({ jsonrpc: '2.0', id: 'with-jsonrpc', method: 'environment/status' }));
      const response = await client.waitForMessage((m) => m.id === 'with-jsonrpc');
      expect(response).toEqual({ id: 'with-jsonrpc', result: { status: 'ready' } });
    });

    it('unknown method → -32601 with the stub text', async () => {
      const { client } = await h.session(kind, transport);
      const response = await client.request('bogus/method', {});
      expect(response.error).toEqual({
        code: -32601,
        message: 'exec-server stub does not implement `bogus/method` yet',
      });
    });

    it('malformed JSON → error with id -1 and the connection keeps working', async () => {
      const peer = await h.start(kind, transport);
      const client = await h.connect(peer);
      const before = client.messages.length;
      client.sendRaw('not-json');
      const error = await client.waitForMessage((m) => client.messages.indexOf(m) >= before && m.id === -1);
      expect(error.error?.code).toBe(-32600);
      expect(error.error?.message.startsWith(malformedPrefix)).toBe(true);
      expect(Object.keys(error).sort()).toEqual(['error', 'id']);

      const mark = client.messages.length;
      client.sendRaw('{"id": 10}');
      const shapeError = await client.waitForMessage((m) => client.messages.indexOf(m) >= mark && m.id === -1);
      expect(shapeError.error?.code).toBe(-32600);

      const result = await client.call<{ sessionId: string }>('initialize', { clientName: 'after-garbage' });
      expect(result.sessionId).toMatch(UUID_V4);
    });

    it('ids that are neither string nor integer are parse errors (id -1)', async () => {
      const { client } = await h.session(kind, transport);
      for (const id of [null, true, 1.5]) {
        const mark = client.messages.length;
        client.sendRaw(JSON.stringify({ id, method: 'environment/status' }));
        const error = await client.waitForMessage((m) => client.messages.indexOf(m) >= mark && m.id === -1);
        expect(error.error?.code).toBe(-32600);
      }
      expect(await client.call('environment/status', {})).toEqual({ status: 'ready' });
    });

    it('unknown notification closes the connection', async () => {
      const { peer, client, sessionId } = await h.session(kind, transport);
      await client.call('process/start', h.startParams('victim', sh('echo $$; exec sleep 1000')));
      const { output } = await readUntilOutput(client, 'victim', (o) => o.endsWith('\n'));
      const pid = Number(output.trim());
      client.notify('bogus/notify', {});
      if (transport === 'ws') {
        // The session is detached, not destroyed: it can be resumed and its process still runs.
        await client.closed;
        const resumed = await resumeWhenDetached(h, peer, sessionId, 'again');
        expect(isAlive(pid)).toBe(true);
        expect(await readProcess(resumed!, { processId: 'victim' })).toMatchObject({ exited: false, closed: false });
      } else {
        // stdio serves one connection: its end kills the processes; codex then exits 0 at stdin EOF.
        await waitUntil(() => !isAlive(pid), 'the child of the closed connection to be killed');
        peer.stdin.end();
        expect((await peer.exited).code).toBe(0);
      }
    });
  });

  describe('process/start', () => {
    it('returns {processId, sandboxType:"none"} and ignores unknown fields', async () => {
      const { client } = await h.session(kind, transport);
      const result = await client.call(
        'process/start',
        h.startParams('extra', ['true'], { bogus: 1, another: { nested: true } }),
      );
      expect(result).toEqual({ processId: 'extra', sandboxType: 'none' });
      expect((await collectUntilClosed(client, 'extra')).exitCode).toBe(0);
    });

    it('rejects bad params with -32602', async () => {
      const { client } = await h.session(kind, transport);
      const base = h.startParams('bad', ['true']);
      const without = (key: string) => {
        const copy = { ...base };
        delete copy[key];
        return copy;
      };
      for (const field of ['cwd', 'argv', 'env', 'tty', 'processId']) {
        expect((await client.request('process/start', without(field))).error).toEqual({
          code: -32602,
          message: `missing field \`${field}\``,
        });
      }
      expect((await client.request('process/start', { ...base, argv: [] })).error).toEqual({
        code: -32602,
        message: 'argv must not be empty',
      });
      for (const wrong of [{ argv: 'true' }, { tty: 'yes' }, { processId: 5 }, { env: { A: 1 } }]) {
        expect((await client.request('process/start', { ...base, ...wrong })).error?.code).toBe(-32602);
      }
      expect((await client.request('process/start', null)).error?.code).toBe(-32602);
    });

    it('rejects cwd URIs that are not valid on this host', async () => {
      const { client } = await h.session(kind, transport);
      const base = h.startParams('cwd', ['true']);
      for (const cwd of ['file://server/share', 'file:///C:/dir']) {
        expect((await client.request('process/start', { ...base, cwd })).error).toEqual({
          code: -32602,
          message: `cwd URI \`${cwd}\` is not valid on this exec-server host: '${cwd}' is invalid on 'linux'`,
        });
      }
      expect((await client.request('process/start', { ...base, cwd: '/tmp' })).error?.code).toBe(-32602);
      expect((await client.request('process/start', { ...base, cwd: 'http://x/tmp' })).error).toEqual({
        code: -32602,
        message: 'unsupported path URI scheme `http`',
      });
    });

    it('spawn failures → -32603 {kind:"spawnNotFound"}; the id is released', async () => {
      const { client } = await h.session(kind, transport);
      for (const params of [
        h.startParams('nb', ['/no/such/binary']),
        h.startParams('nb', ['no-such-binary-xyz']),
        h.startParams('nb', ['true'], { cwd: 'file:///nonexistent/directory' }),
      ]) {
        const response = await client.request('process/start', params);
        expect(response.error).toEqual({
          code: -32603,
          message: 'No such file or directory (os error 2)',
          data: { kind: 'spawnNotFound' },
        });
      }
      expect(await client.call('process/start', h.startParams('nb', ['true']))).toMatchObject({ processId: 'nb' });
    });

    it('process id reuse: running and retained ids are rejected', async () => {
      const { client } = await h.session(kind, transport);
      await client.call('process/start', h.startParams('dup', sh('exec sleep 1000')));
      expect((await client.request('process/start', h.startParams('dup', ['true']))).error).toEqual({
        code: -32600,
        message: 'process dup already exists',
      });
      expect(await client.call('process/terminate', { processId: 'dup' })).toEqual({ running: true });
      await collectUntilClosed(client, 'dup');
      // Exited and closed but still retained: still a duplicate.
      expect((await client.request('process/start', h.startParams('dup', ['true']))).error).toEqual({
        code: -32600,
        message: 'process dup already exists',
      });
    });

    it('bare program names resolve even with an empty env; arg0 sets argv[0]', async () => {
      const { client } = await h.session(kind, transport);
      await client.call('process/start', h.startParams('bare', ['echo', 'bare-ok']));
      expect((await collectUntilClosed(client, 'bare')).output).toBe('bare-ok\n');
      await client.call('process/start', h.startParams('arg0', sh('echo $0'), { arg0: 'custom-name' }));
      expect((await collectUntilClosed(client, 'arg0')).output).toBe('custom-name\n');
    });
  });

  describe('env', () => {
    it('the child env is exactly the given env (pipe)', async () => {
      const { client } = await h.session(kind, transport);
      const env = { ALPHA: '1', BETA: 'two words', EMPTY: '', MY_SECRET: 'kept', PATH: '/usr/bin:/bin' };
      await client.call('process/start', h.startParams('env', ['/usr/bin/env'], { env }));
      const lines = (await collectUntilClosed(client, 'env')).output.split('\n').filter(Boolean).sort();
      expect(lines).toEqual(
        Object.entries(env)
          .map(([k, v]) => `${k}=${v}`)
          .sort(),
      );

      await client.call('process/start', h.startParams('env-empty', ['/usr/bin/env']));
      expect((await collectUntilClosed(client, 'env-empty')).output).toBe('');
    });

    it('strips the reserved variables from the given env', async () => {
      const { client } = await h.session(kind, transport);
      const env = {
        KEEP: 'yes',
        CODEX_EXEC_SERVER_EXIT_ON_STDIN_CLOSE: '1',
        NODE_REPL_AUTH_TOKEN: 'x',
        OPENAI_IDENTITY_TOKEN_FILE: '/x',
      };
      await client.call('process/start', h.startParams('env-reserved', ['/usr/bin/env'], { env }));
      expect((await collectUntilClosed(client, 'env-reserved')).output).toBe('KEEP=yes\n');
    });

    it('tty children get the given env plus SHELL (portable-pty behaviour)', async () => {
      const { client } = await h.session(kind, transport);
      await client.call('process/start', h.startParams('env-tty', ['/usr/bin/env'], { env: { A: 'b' }, tty: true }));
      const lines = (await collectUntilClosed(client, 'env-tty')).output.split(/\r?\n/).filter(Boolean).sort();
      expect(lines).toEqual(['A=b', expect.stringMatching(/^SHELL=\//)]);
    });
  });

  describe('process/read', () => {
    it('maxBytes paging: first chunk always returned, nextSeq follows the last returned chunk', async () => {
      const { client } = await h.session(kind, transport);
      // Each chunk is produced only after the previous one was observed, so chunk boundaries are fixed.
      await client.call(
        'process/start',
        h.startParams('pg', sh('printf aaaa; read x; printf bbbbbb; read x; printf cc; read x; exit 3'), {
          pipeStdin: true,
        }),
      );
      await readUntilOutput(client, 'pg', (o) => o === 'aaaa');
      await write(client, 'pg', '\n', 'w1');
      await readUntilOutput(client, 'pg', (o) => o === 'bbbbbb', { afterSeq: 1 });
      await write(client, 'pg', '\n', 'w2');
      await readUntilOutput(client, 'pg', (o) => o === 'cc', { afterSeq: 2 });
      await write(client, 'pg', '\n', 'w3');
      const all = await collectUntilClosed(client, 'pg');
      expect(all.chunks.map((c) => [c.seq, decodeB64Text(c.chunk)])).toEqual([
        [1, 'aaaa'],
        [2, 'bbbbbb'],
        [3, 'cc'],
      ]);
      expect(all.exitCode).toBe(3);

      const page = async (params: Record<string, unknown>) => {
        const r = await readProcess(client, { processId: 'pg', ...params });
        expect(r).toMatchObject({ exited: true, exitCode: 3, closed: true, failure: null });
        return [r.chunks.map((c) => c.seq), r.nextSeq];
      };
      expect(await page({})).toEqual([[1, 2, 3], 6]);
      expect(await page({ afterSeq: 0 })).toEqual([[1, 2, 3], 6]);
      expect(await page({ maxBytes: 0 })).toEqual([[1], 2]);
      expect(await page({ maxBytes: 1 })).toEqual([[1], 2]);
      expect(await page({ maxBytes: 5 })).toEqual([[1], 2]);
      expect(await page({ maxBytes: 10 })).toEqual([[1, 2], 3]);
      expect(await page({ maxBytes: 12 })).toEqual([[1, 2, 3], 4]);
      expect(await page({ afterSeq: 1, maxBytes: 1 })).toEqual([[2], 3]);
      expect(await page({ afterSeq: 3, maxBytes: 10 })).toEqual([[], 6]);
      expect(await page({ afterSeq: 5 })).toEqual([[], 6]);
      expect(await page({ afterSeq: 100, waitMs: 200 })).toEqual([[], 6]);

      // A paging loop with afterSeq = nextSeq - 1 visits every chunk once.
      const seen: number[] = [];
      let afterSeq = 0;
      for (let i = 0; i < 10; i++) {
        const r = await readProcess(client, { processId: 'pg', afterSeq, maxBytes: 5 });
        seen.push(...r.chunks.map((c) => c.seq));
        if (r.chunks.length === 0) break;
        afterSeq = r.nextSeq - 1;
      }
      expect(seen).toEqual([1, 2, 3]);
    });

    it('a quiet process: exited and closed consume seqs; read errors', async () => {
      const { client } = await h.session(kind, transport);
      await client.call('process/start', h.startParams('quiet', ['true']));
      const done = await collectUntilClosed(client, 'quiet');
      expect(done).toMatchObject({ output: '', exitCode: 0, closed: true });
      expect(await readProcess(client, { processId: 'quiet' })).toEqual({
        chunks: [],
        nextSeq: 3,
        exited: true,
        exitCode: 0,
        closed: true,
        failure: null,
        sandboxDenied: false,
      });
      expect((await client.request('process/read', { processId: 'nope' })).error).toEqual({
        code: -32600,
        message: 'unknown process id nope',
      });
      expect((await client.request('process/read', {})).error).toEqual({
        code: -32602,
        message: 'missing field `processId`',
      });
      expect((await client.request('process/read', { processId: 'quiet', afterSeq: -1 })).error?.code).toBe(-32602);
      expect((await client.request('process/read', { processId: 'quiet', afterSeq: 'x' })).error?.code).toBe(-32602);
    });
  });

  describe('process/write', () => {
    it('the same writeId twice reaches the child once', async () => {
      const { client } = await h.session(kind, transport);
      await client.call(
        'process/start',
        h.startParams('dedupe', sh('while IFS= read -r l; do [ "$l" = quit ] && exit 0; echo "got:$l"; done'), {
          pipeStdin: true,
        }),
      );
      expect(await write(client, 'dedupe', 'one\n', 'w1')).toBe('accepted');
      expect(await write(client, 'dedupe', 'one\n', 'w1')).toBe('accepted');
      expect(await write(client, 'dedupe', 'two\n', 'w2')).toBe('accepted');
      expect(await write(client, 'dedupe', 'quit\n', 'w3')).toBe('accepted');
      const collected = await collectUntilClosed(client, 'dedupe');
      expect([collected.output, collected.exitCode]).toEqual(['got:one\ngot:two\n', 0]);
    });

    it('statuses and errors', async () => {
      const { client } = await h.session(kind, transport);
      await client.call('process/start', h.startParams('wr', sh('exec cat'), { pipeStdin: true }));
      expect(await write(client, 'nope', 'x', 'a')).toBe('unknownProcess');
      expect(await write(client, 'wr', '', 'empty')).toBe('accepted');
      expect((await client.request('process/write', { processId: 'wr', chunk: b64('x'), writeId: '' })).error).toEqual({
        code: -32602,
        message: 'writeId must not be empty',
      });
      expect((await client.request('process/write', { processId: 'wr', chunk: b64('x') })).error).toEqual({
        code: -32602,
        message: 'missing field `writeId`',
      });
      expect(
        (await client.request('process/write', { processId: 'wr', chunk: '!!notbase64', writeId: 'b' })).error?.code,
      ).toBe(-32602);
      expect(await write(client, 'wr', 'echoed\n', 'c')).toBe('accepted');
      await readUntilOutput(client, 'wr', (o) => o === 'echoed\n');
      await client.call('process/start', h.startParams('no-stdin', ['true']));
      await collectUntilClosed(client, 'no-stdin');
      expect(await write(client, 'no-stdin', 'x', 'd')).toBe('stdinClosed');
    });
  });

  describe('process/signal and process/terminate', () => {
    it('signal: unknown id → {}, unknown signal → -32602', async () => {
      const { client } = await h.session(kind, transport);
      expect(await client.call('process/signal', { processId: 'nope', signal: 'interrupt' })).toEqual({});
      await client.call('process/start', h.startParams('sig', ['true']));
      await collectUntilClosed(client, 'sig');
      expect(await client.call('process/signal', { processId: 'sig', signal: 'interrupt' })).toEqual({});
      // Codex knows only `interrupt`; tether advertises more signals (capabilities.extendedSignals), so an
      // unknown name is what both must reject.
      const unknownSignal = kind === 'codex' ? 'kill' : 'explode';
      expect((await client.request('process/signal', { processId: 'sig', signal: unknownSignal })).error).toEqual({
        code: -32602,
        message:
          kind === 'codex'
            ? 'unknown variant `kill`, expected `interrupt`'
            : 'unknown variant `explode`, expected one of `interrupt`, `terminate`, `kill`, `hangup`, `quit`, `user1`, `user2`',
      });
      expect((await client.request('process/signal', { processId: 'sig' })).error).toEqual({
        code: -32602,
        message: 'missing field `signal`',
      });
    });

    it('terminate: running → true then exit 137 (pipe); again → false; unknown → false', async () => {
      const { client } = await h.session(kind, transport);
      expect(await client.call('process/terminate', { processId: 'nope' })).toEqual({ running: false });
      await client.call(
        'process/start',
        h.startParams('term', sh('sleep 1000 & echo "$! $$"; trap "" INT TERM; wait'), { pipeStdin: true }),
      );
      const { output } = await readUntilOutput(client, 'term', (o) => o.endsWith('\n'));
      const pids = output.trim().split(' ').map(Number);
      expect(await client.call('process/terminate', { processId: 'term' })).toEqual({ running: true });
      const collected = await collectUntilClosed(client, 'term');
      expect(collected.exitCode).toBe(137);
      for (const pid of pids) await waitUntil(() => !isAlive(pid), `pid ${pid} (process group) to die`);
      expect(await client.call('process/terminate', { processId: 'term' })).toEqual({ running: false });
    });

    it('terminate a tty process: exit code 1', async () => {
      const { client } = await h.session(kind, transport);
      await client.call('process/start', h.startParams('term-tty', sh('echo ready; exec sleep 1000'), { tty: true }));
      await readUntilOutput(client, 'term-tty', (o) => o.includes('ready'));
      expect(await client.call('process/terminate', { processId: 'term-tty' })).toEqual({ running: true });
      expect((await collectUntilClosed(client, 'term-tty')).exitCode).toBe(1);
    });

    it('exit and close follow the terminate with consecutive seqs', async () => {
      const { client } = await h.session(kind, transport);
      await client.call('process/start', h.startParams('term-seq', sh('echo up; exec sleep 1000')));
      await readUntilOutput(client, 'term-seq', (o) => o === 'up\n');
      await client.call('process/terminate', { processId: 'term-seq' });
      await collectUntilClosed(client, 'term-seq');
      expect(await readProcess(client, { processId: 'term-seq' })).toMatchObject({
        chunks: [{ seq: 1, stream: 'stdout' }],
        nextSeq: 4,
        exited: true,
        closed: true,
      });
    });
  });
});
