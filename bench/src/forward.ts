/**
 * `pnpm bench` (port forwarding section; alone: `pnpm --filter @tether/bench bench:forward`): a download
 * through `harness forward` (registry, relay and executor bins; Noise end to end) side by side with `ssh -L`
 * to a private OpenSSH server on loopback, same target, same run. The target is a TCP server here that sends
 * the payload and closes; each round opens one connection to the forward's local port and times it from
 * connect to the last byte, sha256 verified. Both forwards are started once, before timing (as a user keeps
 * one running), and each carries one unmeasured download first. Prints a table and writes bench/results/forward-latest.json.
 *
 *   BENCH_FORWARD_MIB=256 BENCH_FORWARD_REPEATS=5 pnpm --filter @tether/bench bench:forward
 *
 * Needs `sshd` (Debian: openssh-server); without it the ssh column is reported as unavailable.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { type AddressInfo, connect, createServer, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, startStack } from '@tether/test-kit';
import { harnessEnv, harnessMain, median, writeResults } from './commands.js';
import { startSshd } from './sshd.js';

const SIZE_MIB = Number(process.env.BENCH_FORWARD_MIB ?? 256);
const REPEATS = Number(process.env.BENCH_FORWARD_REPEATS ?? 5);
const ENVIRONMENT = 'bench-forward';
const BLOCK = randomBytes(1024 * 1024);

/** The payload: SIZE_MIB copies of one random MiB (its sha256 computed the same way). */
function expectedHash(): string {
  const hash = createHash('sha256');
  for (let i = 0; i < SIZE_MIB; i++) hash.update(BLOCK);
  return hash.digest('hex');
}

/** Sends the payload to every connection, honouring backpressure, then closes its side. */
function startTarget() {
  const sockets = new Set<Socket>();
  const server = createServer((socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
    socket.on('error', () => undefined);
    let sent = 0;
    const pump = () => {
      while (sent < SIZE_MIB) {
        sent++;
        if (!socket.write(BLOCK)) {
          socket.once('drain', pump);
          return;
        }
      }
      socket.end();
    };
    pump();
  });
  return {
    server,
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

/** One download from the local port: seconds from connect to the end, and the sha256 of what came. */
async function download(port: number): Promise<{ seconds: number; hash: string; bytes: number }> {
  const started = performance.now();
  const socket = connect({ host: '127.0.0.1', port });
  const hash = createHash('sha256');
  let bytes = 0;
  socket.on('data', (chunk: Buffer) => {
    bytes += chunk.length;
    hash.update(chunk);
  });
  await once(socket, 'end');
  const seconds = (performance.now() - started) / 1000;
  socket.destroy();
  return { seconds, hash: hash.digest('hex'), bytes };
}

/** Waits until something accepts on the port (the forward is listening). */
async function waitForPort(port: number, child: ChildProcess): Promise<void> {
  for (let attempt = 0; attempt < 200; attempt++) {
    if (child.exitCode !== null) throw new Error(`forward exited ${child.exitCode}`);
    const ok = await new Promise<boolean>((resolve) => {
      const probe = connect({ host: '127.0.0.1', port });
      probe.once('connect', () => {
        probe.destroy();
        resolve(true);
      });
      probe.once('error', () => resolve(false));
    });
    if (ok) return;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`nothing listens on ${port}`);
}

async function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  child.kill('SIGTERM');
  await once(child, 'exit');
}

const dir = mkdtempSync(join(tmpdir(), 'tether-bench-forward-'));
const target = startTarget();
target.server.listen(0, '127.0.0.1');
await once(target.server, 'listening');
const targetPort = (target.server.address() as AddressInfo).port;
const stack = await startStack();
const sshd = await startSshd(dir);
const children: ChildProcess[] = [];
try {
  await stack.startExecutor('tether', ENVIRONMENT);
  const expected = expectedHash();
  const bytes = SIZE_MIB * 1024 * 1024;

  const tetherPort = await freePort();
  const harness = spawn(
    process.execPath,
    [harnessMain(), 'forward', '--environment-id', ENVIRONMENT, `${tetherPort}:127.0.0.1:${targetPort}`],
    { env: harnessEnv(stack), stdio: ['ignore', 'ignore', 'inherit'] },
  );
  children.push(harness);
  await waitForPort(tetherPort, harness);

  let sshPort: number | null = null;
  let cipher = 'n/a';
  if (sshd) {
    sshPort = await freePort();
    const options = sshd.scpArgs.slice(0, -2); // the key and no-prompt options, without scp's -P PORT
    const probe = spawnSync('ssh', ['-v', ...options, '-p', String(sshd.port), `${sshd.user}@127.0.0.1`, 'true'], {
      encoding: 'utf8',
    });
    cipher = /kex: client->server cipher: (\S+)/.exec(probe.stderr)?.[1] ?? 'unknown';
    const ssh = spawn(
      'ssh',
      [
        ...options,
        '-p',
        String(sshd.port),
        '-N',
        '-o',
        'ExitOnForwardFailure=yes',
        '-L',
        `127.0.0.1:${sshPort}:127.0.0.1:${targetPort}`,
        `${sshd.user}@127.0.0.1`,
      ],
      { stdio: ['ignore', 'ignore', 'inherit'] },
    );
    children.push(ssh);
    await waitForPort(sshPort, ssh);
  }

  // One unmeasured download through each first: steady state, not V8's first compile or cold pools.
  for (const port of [sshPort, tetherPort]) {
    if (port !== null) await download(port);
  }
  const results: { ssh: number[]; tether: number[] } = { ssh: [], tether: [] };
  for (let round = 0; round < REPEATS; round++) {
    // Alternate who goes first.
    const order = round % 2 === 0 ? (['ssh', 'tether'] as const) : (['tether', 'ssh'] as const);
    for (const peer of order) {
      const port = peer === 'ssh' ? sshPort : tetherPort;
      if (port === null) continue;
      const run = await download(port);
      if (run.bytes !== bytes || run.hash !== expected) {
        throw new Error(`${peer}: got ${run.bytes} bytes, sha256 ${run.hash}; expected ${bytes}, ${expected}`);
      }
      results[peer].push(run.seconds);
    }
  }
  const mbps = (seconds: number) => bytes / 1e6 / seconds;
  const ssh = results.ssh.length ? mbps(median(results.ssh)) : null;
  const tether = mbps(median(results.tether));
  const ratio = ssh ? tether / ssh : null;
  process.stdout.write(
    `\nPort forward, ${SIZE_MIB} MiB download, median of ${REPEATS} (one connection each, sha256 verified; ssh cipher ${cipher})\n\n`,
  );
  process.stdout.write(
    '| transfer | ssh -L (MB/s) | harness forward (MB/s) | harness/ssh | target | met |\n|---|---:|---:|---:|---|---|\n',
  );
  process.stdout.write(
    `| download ${SIZE_MIB} MiB | ${ssh?.toFixed(0) ?? 'n/a (no sshd)'} | ${tether.toFixed(0)} | ${ratio ? `${ratio.toFixed(2)}×` : 'n/a'} | ≥ 1.0× | ${ratio === null ? 'n/a' : ratio >= 1 ? 'yes' : 'no'} |\n`,
  );
  writeResults('forward-latest.json', { sizeMiB: SIZE_MIB, repeats: REPEATS, cipher, results, ssh, tether, ratio });
} finally {
  for (const child of children) await stopChild(child);
  await sshd?.close();
  await stack.close();
  await target.close();
  rmSync(dir, { recursive: true, force: true });
}
