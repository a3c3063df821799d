/**
 * `harness forward` (ssh -L) through the real product path: the harness bin → registry bin (bundle) → relay
 * bin → our executor in remote mode, every byte inside the end-to-end encrypted session. Targets are
 * servers on the environment's machine (this one): an HTTP server, a half-closing echo, a closed port.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { createServer as createHttpServer, get, type Server as HttpServer } from 'node:http';
import { type AddressInfo, connect, createServer, type Server, type Socket } from 'node:net';
import { join } from 'node:path';
import { ExecServerClient } from '@tether/client';
import { Method } from '@tether/exec-protocol';
import { type PeerHandle, repoRoot, type Stack, startStack } from '@tether/test-kit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const ENVIRONMENT = 'env-forward-e2e';
/** An executor whose policy allows one loopback port only (the HTTP server's). */
const NARROW_ENVIRONMENT = 'env-forward-narrow';
const NO_FORWARD_ENVIRONMENT = 'env-forward-off';
const CODEX_ENVIRONMENT = 'env-forward-codex';
const BLOB_BYTES = 20 * 1024 * 1024;

const sha256 = (data: Buffer) => createHash('sha256').update(data).digest('hex');

interface Forward {
  child: ChildProcess;
  /** Local ports, in the order of the specs. */
  ports: number[];
  stderr: () => string;
  /** SIGTERM, then the exit code. */
  stop(): Promise<number | null>;
}

function harnessChild(args: string[], env: NodeJS.ProcessEnv): ChildProcess {
  return spawn(process.execPath, [join(repoRoot(), 'apps', 'harness', 'dist', 'main.js'), ...args], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
}

/** Starts `harness forward` and waits until every spec listens. */
async function startForward(specs: string[], env: NodeJS.ProcessEnv, environmentId = ENVIRONMENT): Promise<Forward> {
  const child = harnessChild(['forward', '--environment-id', environmentId, ...specs], env);
  let stdout = '';
  let stderr = '';
  child.stderr?.on('data', (d: Buffer) => {
    stderr += d;
  });
  const ports = await new Promise<number[]>((resolve, reject) => {
    child.stdout?.on('data', (d: Buffer) => {
      stdout += d;
      const found = [...stdout.matchAll(/^forwarding 127\.0\.0\.1:(\d+) -> /gm)].map((m) => Number(m[1]));
      if (found.length === specs.length) resolve(found);
    });
    child.once('exit', (code) => reject(new Error(`harness forward exited ${code}: ${stderr}`)));
  });
  const exited = once(child, 'exit') as Promise<[number | null]>;
  return {
    child,
    ports,
    stderr: () => stderr,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      const [code] = await exited;
      return code;
    },
  };
}

/** Runs the harness to completion. */
async function runHarness(
  args: string[],
  env: NodeJS.ProcessEnv,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = harnessChild(args, env);
  let stdout = '';
  let stderr = '';
  child.stdout?.on('data', (d: Buffer) => {
    stdout += d;
  });
  child.stderr?.on('data', (d: Buffer) => {
    stderr += d;
  });
  const [code] = (await once(child, 'close')) as [number | null];
  return { code, stdout, stderr };
}

function download(port: number, path: string): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    get({ host: '127.0.0.1', port, path, agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.once('end', () =>
        res.statusCode === 200 ? resolve(Buffer.concat(chunks)) : reject(new Error(`HTTP ${res.statusCode}`)),
      );
      res.once('error', reject);
    }).once('error', reject);
  });
}

/** Connects, sends nothing, and resolves with what arrived before the forward closed the connection. */
async function connectUntilClosed(port: number): Promise<{ received: number }> {
  const socket = connect({ host: '127.0.0.1', port });
  let received = 0;
  socket.on('data', (c: Buffer) => {
    received += c.length;
  });
  socket.on('error', () => undefined); // a reset is a close too
  await once(socket, 'close');
  return { received };
}

async function listen(server: Server | HttpServer): Promise<number> {
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return (server.address() as AddressInfo).port;
}

describe('harness forward through registry, relay and executor', () => {
  let stack: Stack;
  let executor: PeerHandle;
  let env: NodeJS.ProcessEnv;
  const blob = randomBytes(BLOB_BYTES);
  const blobHash = sha256(blob);
  let http: HttpServer;
  let httpPort: number;
  /** Reads until EOF, answers the sha256 of it, then closes; or sends first and reads after (`/reverse`). */
  let halfClose: Server;
  let halfClosePort: number;
  const halfCloseSockets = new Set<Socket>();
  let closedPort: number;

  beforeAll(async () => {
    http = createHttpServer((req, res) => {
      if (req.url === '/blob') {
        res.writeHead(200, { 'content-length': String(blob.length) });
        res.end(blob);
      } else {
        res.writeHead(200, { 'content-length': '2' });
        res.end('ok');
      }
    });
    httpPort = await listen(http);
    halfClose = createServer({ allowHalfOpen: true }, (socket) => {
      halfCloseSockets.add(socket);
      socket.once('close', () => halfCloseSockets.delete(socket));
      const hash = createHash('sha256');
      let first = true;
      socket.on('data', (c: Buffer) => {
        // `R`: the server half-closes first (sends its greeting and FIN), then reads until the client's EOF.
        if (first && c[0] === 0x52) socket.end('greeting from the target\n');
        first = false;
        hash.update(c);
      });
      socket.once('end', () => {
        if (!socket.writableEnded) socket.end(`${hash.digest('hex')}\n`);
        else socket.destroy();
      });
    });
    halfClosePort = await listen(halfClose);
    const probe = createServer();
    closedPort = await listen(probe);
    await new Promise((resolve) => probe.close(resolve));

    stack = await startStack();
    executor = await stack.startExecutor('tether', ENVIRONMENT);
    env = { TETHER_HARNESS_REGISTRY: stack.registryUrl, TETHER_HARNESS_API_KEY: stack.keys.harness };
  }, 120_000);

  afterAll(async () => {
    await stack?.close();
    for (const socket of halfCloseSockets) socket.destroy();
    await Promise.all(
      [http, halfClose].map((server) => (server ? new Promise((resolve) => server.close(resolve)) : undefined)),
    );
  });

  it('downloads 20 MiB with equal sha256, and serves 20 connections at once', { timeout: 180_000 }, async () => {
    const forward = await startForward([`0:127.0.0.1:${httpPort}`], env);
    try {
      const [port] = forward.ports as [number];
      const one = await download(port, '/blob');
      expect(one.length).toBe(BLOB_BYTES);
      expect(sha256(one)).toBe(blobHash);

      const many = await Promise.all(Array.from({ length: 20 }, () => download(port, '/blob'))).catch(async (err) => {
        await new Promise((r) => setTimeout(r, 500));
        throw new Error(`${err.message}; stderr: ${forward.stderr()}; executor: ${executor.stderr().slice(-3000)}`);
      });
      for (const body of many) expect(sha256(body)).toBe(blobHash);
      expect(forward.stderr()).toBe('');
    } finally {
      const code = await forward.stop();
      expect(code, forward.stderr()).toBe(0);
    }
  });

  it('half-closes each direction on its own', { timeout: 60_000 }, async () => {
    const forward = await startForward([`0:localhost:${halfClosePort}`], env);
    try {
      const [port] = forward.ports as [number];
      // Client → target ends first: the target still answers after our FIN.
      const payload = randomBytes(3 * 1024 * 1024);
      const socket = connect({ host: '127.0.0.1', port, allowHalfOpen: true });
      const answer: Buffer[] = [];
      socket.on('data', (c: Buffer) => answer.push(c));
      socket.end(payload);
      await once(socket, 'end');
      expect(Buffer.concat(answer).toString()).toBe(`${sha256(payload)}\n`);
      socket.destroy();

      // Target → client ends first: we still write after its FIN, and it reads all of it.
      const reverse = connect({ host: '127.0.0.1', port, allowHalfOpen: true });
      const got: Buffer[] = [];
      reverse.on('data', (c: Buffer) => got.push(c));
      reverse.write('R');
      await once(reverse, 'end');
      expect(Buffer.concat(got).toString()).toBe('greeting from the target\n');
      const tail = randomBytes(512 * 1024);
      reverse.end(tail);
      await once(reverse, 'close');
      expect(forward.stderr()).toBe('');
    } finally {
      expect(await forward.stop()).toBe(0);
    }
  });

  it('refuses a target the executor does not allow, and a closed port, and keeps serving', {
    timeout: 60_000,
  }, async () => {
    const narrow = await stack.startExecutor('tether', NARROW_ENVIRONMENT, {
      args: ['--forward-allow', `127.0.0.1:${httpPort}`],
    });
    const forward = await startForward(
      [
        `0:127.0.0.1:${httpPort}`,
        `0:127.0.0.1:${halfClosePort}`, // loopback, but not the allowed port
        '0:192.0.2.1:80', // TEST-NET-1: never loopback
      ],
      env,
      NARROW_ENVIRONMENT,
    );
    const open = await startForward([`0:127.0.0.1:${closedPort}`], env);
    try {
      const [allowed, otherPort, testNet] = forward.ports as [number, number, number];
      expect(await connectUntilClosed(otherPort)).toEqual({ received: 0 });
      expect(await connectUntilClosed(testNet)).toEqual({ received: 0 });
      expect(forward.stderr()).toContain(`127.0.0.1:${halfClosePort} is not allowed by this executor's forward policy`);
      expect(forward.stderr()).toContain("192.0.2.1:80 is not allowed by this executor's forward policy");
      // The forward goes on.
      expect(sha256(await download(allowed, '/blob'))).toBe(blobHash);

      // Allowed (default policy: loopback), but nothing listens there.
      const [refused] = open.ports as [number];
      expect(await connectUntilClosed(refused)).toEqual({ received: 0 });
      expect(open.stderr()).toContain(`connection to 127.0.0.1:${closedPort} refused on the executor`);
      expect(await connectUntilClosed(refused)).toEqual({ received: 0 });
    } finally {
      expect(await forward.stop()).toBe(0);
      expect(await open.stop()).toBe(0);
      await narrow.close();
    }
  });

  it('fails clearly against an executor without forwarding (codex, --no-forward)', { timeout: 120_000 }, async () => {
    const codex = await stack.startExecutor('codex', CODEX_ENVIRONMENT);
    const off = await stack.startExecutor('tether', NO_FORWARD_ENVIRONMENT, { args: ['--no-forward'] });
    try {
      for (const environmentId of [CODEX_ENVIRONMENT, NO_FORWARD_ENVIRONMENT]) {
        const result = await runHarness(['forward', '--environment-id', environmentId, `0:127.0.0.1:${httpPort}`], env);
        expect(result.stderr).toContain('this executor does not offer TCP forwarding (capability tcpForward)');
        expect(result.code).toBe(1);
      }
    } finally {
      await codex.close();
      await off.close();
    }
  });

  // `--no-forward` turns off `tcp/connect` only. It is not a network boundary: `http/request` (Codex's method,
  // as open in Codex's executor) and any command the harness runs reach the same addresses. SECURITY.md says so.
  it('--no-forward is not a network boundary: http/request and a command still reach the loopback server', {
    timeout: 120_000,
  }, async () => {
    const off = await stack.startExecutor('tether', NO_FORWARD_ENVIRONMENT, { args: ['--no-forward'] });
    const client = await ExecServerClient.connectRendezvous({
      registryUrl: stack.registryUrl,
      apiKey: stack.keys.harness,
      environmentId: NO_FORWARD_ENVIRONMENT,
      clientName: 'forward-policy-e2e',
    });
    try {
      expect(client.capabilities.has('tcpForward')).toBe(false);
      const answer = await client.call(Method.httpRequest, {
        method: 'GET',
        url: `http://127.0.0.1:${httpPort}/`,
        requestId: 'no-forward-http',
      });
      expect(answer.status).toBe(200);
      expect(Buffer.from(answer.bodyBase64, 'base64').toString()).toBe('ok');
      const fetched = await runHarness(
        [
          'exec',
          '--environment-id',
          NO_FORWARD_ENVIRONMENT,
          '--',
          process.execPath,
          '-e',
          `fetch('http://127.0.0.1:${httpPort}/').then(async (r) => console.log(r.status, await r.text()))`,
        ],
        env,
      );
      expect(fetched.stdout).toBe('200 ok\n');
      expect(fetched.code).toBe(0);
    } finally {
      client.close();
      await off.close();
    }
  });

  it('rejects a malformed spec with a usage error', async () => {
    const result = await runHarness(['forward', '--environment-id', ENVIRONMENT, '8080:localhost'], env);
    expect(result.stderr).toContain('expected [BIND:]LPORT:HOST:RPORT');
    expect(result.code).toBe(2);
    expect(executor.pid).toBeGreaterThan(0);
  });
});
