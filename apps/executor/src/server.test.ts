import { pathToFileUri } from '@tether/exec-protocol';
import { createMemoryTransportPair, RpcClient, RpcConnection } from '@tether/jsonrpc';
import { isAlive } from '@tether/test-kit';
import { afterEach, describe, expect, it } from 'vitest';
import type { ExecutorConfig } from './config.js';
import { ExecServer } from './server.js';

interface Note {
  method: string;
  params: Record<string, unknown>;
}

const servers: ExecServer[] = [];

afterEach(async () => {
  await Promise.all(servers.splice(0).map((server) => server.close()));
});

function makeServer(config: Partial<ExecutorConfig> = {}): ExecServer {
  const server = new ExecServer({ config: { pingIntervalMs: 0, ...config } });
  servers.push(server);
  return server;
}

function connect(server: ExecServer) {
  const [serverSide, clientSide] = createMemoryTransportPair();
  const processor = server.serve(new RpcConnection(serverSide));
  const notes: Note[] = [];
  const connection = new RpcClientConnection(clientSide, notes);
  return { client: connection.client, notes, processor, connection: connection.raw };
}

class RpcClientConnection {
  readonly raw: RpcConnection;
  readonly client: RpcClient;
  constructor(transport: ConstructorParameters<typeof RpcConnection>[0], notes: Note[]) {
    this.raw = new RpcConnection(transport);
    this.client = new RpcClient(this.raw, {
      onNotification: (method, params) => notes.push({ method, params: params as Record<string, unknown> }),
      callTimeoutMs: 10_000,
    });
  }
}

async function ready(server: ExecServer, resumeSessionId?: string) {
  const c = connect(server);
  const result = await c.client.call<{ sessionId: string; environmentInfo: Record<string, unknown> }>('initialize', {
    clientName: 'test',
    resumeSessionId: resumeSessionId ?? null,
  });
  c.client.notify('initialized', {});
  return { ...c, ...result };
}

const cwd = pathToFileUri(process.cwd());
const sh = (script: string) => ['/bin/sh', '-c', script];

async function start(client: RpcClient, processId: string, argv: string[], extra: Record<string, unknown> = {}) {
  return client.call('process/start', { processId, argv, cwd, env: { PATH: '/usr/bin:/bin' }, tty: false, ...extra });
}

async function waitFor(notes: Note[], predicate: (n: Note) => boolean): Promise<Note> {
  await expect.poll(() => notes.find(predicate), { timeout: 10_000, interval: 5 }).toBeDefined();
  return notes.find(predicate)!;
}

const text = (notes: Note[], processId: string) =>
  notes
    .filter((n) => n.method === 'process/output' && n.params.processId === processId)
    .sort((a, b) => (a.params.seq as number) - (b.params.seq as number))
    .map((n) => Buffer.from(n.params.chunk as string, 'base64').toString())
    .join('');

describe('handshake gating', () => {
  it('refuses methods before initialize and before initialized, naming the family', async () => {
    const server = makeServer();
    const { client } = connect(server);
    await expect(client.call('process/start', {})).rejects.toMatchObject({
      code: -32600,
      message: 'client must call initialize before using exec methods',
    });
    await expect(client.call('environment/info', null)).rejects.toMatchObject({
      message: 'client must call initialize before using environment info methods',
    });
    await client.call('initialize', { clientName: 't' });
    await expect(client.call('process/read', { processId: 'x' })).rejects.toMatchObject({
      code: -32600,
      message: 'client must send initialized before using exec methods',
    });
    await expect(client.call('initialize', { clientName: 't' })).rejects.toMatchObject({
      code: -32600,
      message: 'initialize may only be sent once per connection',
    });
    client.notify('initialized', {});
    await expect(client.call('process/read', { processId: 'x' })).rejects.toMatchObject({
      message: 'unknown process id x',
    });
  });

  it('answers an unknown method with -32601 and the Codex text', async () => {
    const { client } = await ready(makeServer());
    await expect(client.call('bogus/method', {})).rejects.toMatchObject({
      code: -32601,
      message: 'exec-server stub does not implement `bogus/method` yet',
    });
  });

  it('returns the session id and environment info with capabilities', async () => {
    const { sessionId, environmentInfo, client } = await ready(makeServer());
    expect(sessionId).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(environmentInfo).toMatchObject({ platformOs: 'linux', cwd, capabilities: { processList: true } });
    await expect(client.call('environment/info', {})).resolves.toEqual(environmentInfo);
    await expect(client.call('environment/status', null)).resolves.toEqual({ status: 'ready' });
  });

  it('closes the connection on an unknown notification, `initialized` too early, or a stray response', async () => {
    const server = makeServer();
    for (const send of [
      (c: RpcConnection) => c.sendNotification('bogus/notify', {}),
      (c: RpcConnection) => c.sendNotification('initialized', {}),
      (c: RpcConnection) => c.sendResponse(77, {}),
    ]) {
      const { connection } = connect(server);
      send(connection);
      await expect(connection.closed).resolves.toBe('peer closed');
    }
  });

  it('lets a client retry initialize after a failed resume', async () => {
    const { client } = connect(makeServer());
    await expect(client.call('initialize', { clientName: 't', resumeSessionId: 'nope' })).rejects.toMatchObject({
      code: -32600,
      message: 'unknown session id nope',
    });
    await expect(client.call('initialize', { clientName: 't' })).resolves.toHaveProperty('sessionId');
  });
});

describe('processes', () => {
  it('pushes output, exit and close with one seq counter', async () => {
    const { client, notes } = await ready(makeServer());
    await expect(
      start(client, 'p', sh("printf 'out\\n'; sleep 0.1; printf 'err\\n' >&2; sleep 0.1; exit 7")),
    ).resolves.toEqual({
      processId: 'p',
      sandboxType: 'none',
    });
    await waitFor(notes, (n) => n.method === 'process/closed');
    const events = notes.map((n) => [n.method, n.params.seq, n.params.stream ?? n.params.exitCode ?? null]);
    expect(events).toEqual([
      ['process/output', 1, 'stdout'],
      ['process/output', 2, 'stderr'],
      ['process/exited', 3, 7],
      ['process/closed', 4, null],
    ]);
    await expect(client.call('process/read', { processId: 'p' })).resolves.toEqual({
      chunks: [
        { seq: 1, stream: 'stdout', chunk: Buffer.from('out\n').toString('base64') },
        { seq: 2, stream: 'stderr', chunk: Buffer.from('err\n').toString('base64') },
      ],
      nextSeq: 5,
      exited: true,
      exitCode: 7,
      closed: true,
      failure: null,
      sandboxDenied: false,
    });
  });

  it('maps bad input to clear JSON-RPC errors', async () => {
    const { client } = await ready(makeServer());
    const base = { processId: 'bad', argv: ['true'], cwd, env: {}, tty: false };
    const cases: Array<[Record<string, unknown>, number, string | RegExp]> = [
      [{ ...base, argv: [] }, -32602, 'argv must not be empty'],
      [{ ...base, cwd: undefined }, -32602, 'missing field `cwd`'],
      [{ ...base, tty: 'yes' }, -32602, 'invalid type: string "yes", expected a boolean'],
      [{ ...base, cwd: '/tmp' }, -32602, 'invalid URI: relative URL without a base'],
      [{ ...base, cwd: 'http://x/tmp' }, -32602, 'unsupported path URI scheme `http`'],
      [
        { ...base, cwd: 'file://server/share' },
        -32602,
        "cwd URI `file://server/share` is not valid on this exec-server host: 'file://server/share' is invalid on 'linux'",
      ],
      [{ ...base, argv: ['/no/such/binary'] }, -32603, /No such file or directory/],
      [{ ...base, cwd: 'file:///no/such/dir' }, -32603, /No such file or directory/],
      [{ ...base, sandbox: { permissions: {} } }, -32602, 'missing field `type`'],
    ];
    for (const [params, code, message] of cases) {
      const error = await client.call('process/start', params).then(
        () => null,
        (err: { code: number; message: string }) => err,
      );
      expect(error?.code, JSON.stringify(params)).toBe(code);
      if (code === -32603) expect((error as { data?: unknown }).data).toEqual({ kind: 'spawnNotFound' });
      if (typeof message === 'string') expect(error?.message).toBe(message);
      else expect(error?.message).toMatch(message);
    }
    // Failed starts released the id.
    await expect(start(client, 'bad', ['true'])).resolves.toMatchObject({ processId: 'bad' });
    await expect(start(client, 'bad', ['true'])).rejects.toMatchObject({
      code: -32600,
      message: 'process bad already exists',
    });
  });

  it('writes to stdin with writeId dedupe and reports statuses', async () => {
    const { client, notes } = await ready(makeServer());
    await start(client, 'cat', ['cat'], { pipeStdin: true });
    await start(client, 'nostdin', ['sleep', '5']);
    const write = (processId: string, data: string, writeId: string) =>
      client.call('process/write', { processId, chunk: Buffer.from(data).toString('base64'), writeId });
    await expect(write('cat', 'one\n', 'w1')).resolves.toEqual({ status: 'accepted' });
    await expect(write('cat', 'one\n', 'w1')).resolves.toEqual({ status: 'accepted' });
    await expect(write('cat', 'two\n', 'w2')).resolves.toEqual({ status: 'accepted' });
    await expect(write('nostdin', 'x', 'w1')).resolves.toEqual({ status: 'stdinClosed' });
    await expect(write('ghost', 'x', 'w1')).resolves.toEqual({ status: 'unknownProcess' });
    await expect(write('cat', 'x', '')).rejects.toMatchObject({ code: -32602, message: 'writeId must not be empty' });
    await expect(client.call('process/write', { processId: 'cat', chunk: 'eA==' })).rejects.toMatchObject({
      code: -32602,
      message: 'missing field `writeId`',
    });
    await expect(client.call('process/write', { processId: 'cat', chunk: '!!', writeId: 'w9' })).rejects.toMatchObject({
      code: -32602,
    });
    await expect(client.call('process/closeStdin', { processId: 'cat' })).resolves.toEqual({ status: 'accepted' });
    await waitFor(notes, (n) => n.method === 'process/closed' && n.params.processId === 'cat');
    expect(text(notes, 'cat')).toBe('one\ntwo\n');
    await expect(client.call('process/terminate', { processId: 'nostdin' })).resolves.toEqual({ running: true });
  });

  it('serves the extensions: list, resize, PTY size at start, extended signals', async () => {
    const { client, notes } = await ready(makeServer());
    await start(
      client,
      'tty',
      sh('stty size; trap "echo got-usr1; exit 3" USR1; echo armed; while :; do sleep 0.05; done'),
      {
        tty: true,
        size: { rows: 33, cols: 101 },
      },
    );
    await expect.poll(() => text(notes, 'tty'), { timeout: 10_000 }).toContain('armed');
    expect(text(notes, 'tty')).toContain('33 101');
    await expect(client.call('process/resize', { processId: 'tty', rows: 40, cols: 120 })).resolves.toEqual({});
    const list = await client.call<{ processes: Array<Record<string, unknown>> }>('process/list', {});
    expect(list.processes).toEqual([
      expect.objectContaining({ processId: 'tty', state: 'running', tty: true, exitCode: null }),
    ]);
    await expect(client.call('process/signal', { processId: 'tty', signal: 'user1' })).resolves.toEqual({});
    const exited = await waitFor(notes, (n) => n.method === 'process/exited');
    expect(exited.params.exitCode).toBe(3);
    expect(text(notes, 'tty')).toContain('got-usr1');
    await expect(client.call('process/resize', { processId: 'tty', rows: 0, cols: 1 })).rejects.toMatchObject({
      code: -32602,
    });
  });
});

describe('sessions', () => {
  it('keeps a detached session for a resume: output made while away is readable and writes work', async () => {
    const server = makeServer();
    const first = await ready(server);
    await start(first.client, 'p', sh('echo before; read line; echo after:$line'), { pipeStdin: true });
    await waitFor(first.notes, (n) => n.method === 'process/output');
    first.client.close();
    await first.processor.done;

    const second = await ready(server, first.sessionId);
    expect(second.sessionId).toBe(first.sessionId);
    await expect(
      second.client.call('process/write', {
        processId: 'p',
        chunk: Buffer.from('hi\n').toString('base64'),
        writeId: 'a',
      }),
    ).resolves.toEqual({ status: 'accepted' });
    await waitFor(second.notes, (n) => n.method === 'process/closed');
    const read = await second.client.call<{ chunks: Array<{ chunk: string }> }>('process/read', { processId: 'p' });
    expect(read.chunks.map((c) => Buffer.from(c.chunk, 'base64').toString()).join('')).toBe('before\nafter:hi\n');
  });

  it('refuses to resume a session that is still attached (-32010)', async () => {
    const server = makeServer();
    const first = await ready(server);
    const { client } = connect(server);
    await expect(
      client.call('initialize', { clientName: 't', resumeSessionId: first.sessionId }),
    ).rejects.toMatchObject({
      code: -32010,
      message: `session ${first.sessionId} is already attached to another connection`,
    });
  });

  it('kills the processes of a session nobody resumes within the TTL', async () => {
    const server = makeServer({ detachedTtlMs: 100 });
    const first = await ready(server);
    await start(first.client, 'sleeper', ['sleep', '30']);
    const [entry] = (await first.client.call<{ processes: Array<{ pid: number }> }>('process/list', {})).processes;
    first.client.close();
    await first.processor.done;
    await expect.poll(() => isAlive(entry!.pid), { timeout: 10_000 }).toBe(false);
    const { client } = connect(server);
    await expect(
      client.call('initialize', { clientName: 't', resumeSessionId: first.sessionId }),
    ).rejects.toMatchObject({
      message: `unknown session id ${first.sessionId}`,
    });
  });

  it('kills every process on close', async () => {
    const server = makeServer();
    const { client } = await ready(server);
    await start(client, 'a', sh('sleep 30 & sleep 30'));
    const [entry] = (await client.call<{ processes: Array<{ pid: number }> }>('process/list', {})).processes;
    await server.close();
    expect(isAlive(entry!.pid)).toBe(false);
    expect(server.registry.size).toBe(0);
  });
});

describe('concurrency lanes', () => {
  it('with --concurrent-requests 1, a long poll holds back later requests', async () => {
    const { client } = await ready(makeServer({ concurrentRequests: 1 }));
    await start(client, 'slow', sh('sleep 0.3; echo done'));
    const order: string[] = [];
    const poll = client.call('process/read', { processId: 'slow', waitMs: 5000 }).then(() => order.push('read'));
    const status = client.call('environment/status', {}).then(() => order.push('status'));
    await Promise.all([poll, status]);
    expect(order).toEqual(['read', 'status']);
  });

  it('with --concurrent-requests 2, control requests pass a blocked long poll', async () => {
    const { client } = await ready(makeServer({ concurrentRequests: 2 }));
    await start(client, 'slow', ['sleep', '30']);
    const order: string[] = [];
    const poll = client.call('process/read', { processId: 'slow', waitMs: 30_000 }).then(() => order.push('read'));
    await client.call('environment/status', {});
    order.push('status');
    await expect(client.call('process/terminate', { processId: 'slow' })).resolves.toEqual({ running: true });
    await poll;
    expect(order).toEqual(['status', 'read']);
  });
});

describe('stdio', () => {
  it('answers an oversize line with a -1 error and keeps serving, then ends the session at EOF', async () => {
    const { PassThrough } = await import('node:stream');
    const server = makeServer({ maxMessageBytes: 256 });
    const input = new PassThrough();
    const output = new PassThrough();
    const lines: Array<Record<string, unknown>> = [];
    let buffered = '';
    output.on('data', (data: Buffer) => {
      buffered += data.toString();
      for (let i = buffered.indexOf('\n'); i >= 0; i = buffered.indexOf('\n')) {
        lines.push(JSON.parse(buffered.slice(0, i)));
        buffered = buffered.slice(i + 1);
      }
    });
    const served = server.serveStdio(input, output);
    input.write(`${'x'.repeat(1000)}\n`);
    input.write('{"id":1,"method":"initialize","params":{"clientName":"t"}}\n');
    await expect.poll(() => lines.length, { timeout: 5000 }).toBe(2);
    expect(lines[0]).toEqual({
      id: -1,
      error: {
        code: -32600,
        message:
          'failed to parse JSON-RPC message from exec-server stdio: message of 1000 bytes exceeds the limit of 256 bytes',
      },
    });
    expect(lines[1]).toMatchObject({ id: 1, result: { sessionId: expect.any(String) } });
    input.end();
    await served;
    expect(server.registry.size).toBe(0);
  });
});

describe('sandbox refusals', () => {
  const special = (kind: string) => ({ type: 'special', value: { kind } });
  const restricted = (extra: Record<string, unknown> = {}) => ({
    permissions: {
      type: 'managed',
      file_system: { type: 'restricted', entries: [{ path: special('root'), access: 'read' }] },
      network: 'restricted',
    },
    windowsSandboxLevel: 'disabled',
    ...extra,
  });
  const refusal = (promise: Promise<unknown>) =>
    promise.then(
      () => null,
      (err: { code: number; message: string }) => ({ code: err.code, message: err.message }),
    );

  it('a host that cannot sandbox refuses a restricting profile, says why, and does not advertise processSandbox', async () => {
    const { Sandboxer } = await import('@tether/sandbox');
    const sandbox = Sandboxer.none('bubblewrap (bwrap) was not found on PATH: install it');
    const server = new ExecServer({ config: { pingIntervalMs: 0 }, sandbox });
    servers.push(server);
    const { client, environmentInfo } = await ready(server);
    expect(environmentInfo.capabilities).toMatchObject({
      processSandbox: false,
      sandboxedFileStreaming: false,
      networkProxyLaunch: false,
      networkProxyReviewDomains: false,
      networkProxyTransparentTcp: false,
      credentialMasking: false,
      credentialMaskingCustomProviders: false,
    });
    const opened = client.call('fs/open', {
      handleId: 'h',
      path: pathToFileUri('/etc/hostname'),
      sandbox: restricted(),
    });
    expect(await refusal(opened)).toMatchObject({
      code: -32600,
      message: expect.stringMatching(/^filesystem sandbox cannot be enforced/),
    });
    expect(await refusal(start(client, 'p', ['true'], { sandbox: restricted() }))).toEqual({
      code: -32602,
      message:
        'sandbox intent cannot be enforced on this executor: this executor cannot enforce a sandbox: bubblewrap (bwrap) was not found on PATH: install it',
    });
    expect(
      await refusal(client.call('fs/readFile', { path: pathToFileUri('/etc/hostname'), sandbox: restricted() })),
    ).toMatchObject({ code: -32600, message: expect.stringMatching(/^filesystem sandbox cannot be enforced/) });
    // A profile that restricts nothing needs no sandbox: it runs, reported as Codex reports it.
    await expect(
      start(client, 'open', ['true'], {
        sandbox: { permissions: { type: 'disabled' }, windowsSandboxLevel: 'disabled' },
      }),
    ).resolves.toMatchObject({ sandboxType: 'linuxSeccomp' });
    sandbox.close();
  });

  it('refuses arg0 with a sandbox, the batch extensions under one, and dynamic entries without a cwd', async () => {
    const { client } = await ready(makeServer());
    expect(await refusal(start(client, 'a', ['true'], { arg0: 'x', sandbox: restricted() }))).toEqual({
      code: -32602,
      message: 'arg0 is not supported for a sandboxed process',
    });
    expect(
      await refusal(
        client.call('fs/readFiles', {
          paths: [pathToFileUri('/etc/hostname')],
          maxFileBytes: 1024,
          maxTotalBytes: 1024,
          sandbox: restricted(),
        }),
      ),
    ).toEqual({
      code: -32600,
      message: 'fs/readFiles does not run under a restricted filesystem sandbox; use fs/readFile and fs/writeFile',
    });
    const dynamic = restricted({ workspaceRoots: [cwd] });
    (dynamic.permissions.file_system.entries as unknown[]).push({ path: special('project_roots'), access: 'write' });
    expect(
      await refusal(client.call('fs/readFile', { path: pathToFileUri('/etc/hostname'), sandbox: dynamic })),
    ).toEqual({
      code: -32602,
      message: 'file system sandbox context with dynamic permissions requires cwd',
    });
  });
});
