import { type ChildProcess, spawn } from 'node:child_process';
import { generateKeyPairSync } from 'node:crypto';
import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { waitUntil } from './helpers.js';
import {
  apiKeyEnv,
  type PeerHandle,
  type PeerKind,
  registryArgs,
  repoRoot,
  type StartPeerOptions,
  startPeer,
} from './peer.js';
import type { RelayTap } from './relay-tap.js';
import { keyCreateArgs, STACK_KEY_ROLES } from './stack-keys.js';

/**
 * The product stack as real processes, for black-box tests: the built `registry` (SQLite in a scratch
 * directory) and `relay` bins sharing one signing key, API keys for each role, and executors (ours or
 * codex) started in remote mode against them.
 */
export interface Stack extends AsyncDisposable {
  readonly registryUrl: string;
  /** The relay's own (bound) URL: its metrics, and a connection that bypasses `relayVia`. */
  readonly relayUrl: string;
  /** The relay URL the registry hands out: `relayVia`'s when given, else `relayUrl`. */
  readonly relayPublicUrl: string;
  readonly keys: Readonly<Record<'admin' | 'executor' | 'harness', string>>;
  /** Starts an executor serving `environmentId` and waits until it is on the relay. */
  startExecutor(
    kind: PeerKind,
    environmentId: string,
    options?: Partial<Omit<StartPeerOptions, 'kind' | 'transport'>>,
  ): Promise<PeerHandle>;
  /** The relay's Prometheus text. */
  relayMetrics(): Promise<string>;
  /**
   * Makes another API key of `role` in the registry's database, acting on the environments `glob` matches (an admin
   * key with environments may `/connect` to them).
   */
  createKey(role: 'executor' | 'harness' | 'admin', glob: string): Promise<string>;
  close(): Promise<void>;
}

async function runBin(
  children: ChildProcess[],
  app: 'registry' | 'relay',
  args: string[],
  env: Record<string, string> = {},
): Promise<{ line: string; child: ChildProcess }> {
  const child = spawn(process.execPath, [join(repoRoot(), 'apps', app, 'dist', 'main.js'), ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, TETHER_REGISTRY_LOG_LEVEL: 'warn', TETHER_RELAY_LOG_LEVEL: 'warn', ...env },
  });
  children.push(child);
  let stdout = '';
  let stderr = '';
  child.stderr?.on('data', (d: Buffer) => {
    if (stderr.length < 64 * 1024) stderr += d;
  });
  const line = await new Promise<string>((resolve, reject) => {
    child.stdout?.on('data', (d: Buffer) => {
      stdout += d;
      if (stdout.includes('\n')) resolve(stdout.split('\n')[0] as string);
    });
    child.once('exit', (code) => reject(new Error(`${app} ${args[0]} exited ${code}: ${stderr}`)));
  });
  return { line, child };
}

export interface StackOptions {
  /** Extra `relay serve` arguments (limits). */
  relayArgs?: string[];
  /** Extra `registry serve` arguments (e.g. `--ui-dir DIR`). */
  registryArgs?: string[];
  /**
   * Puts every relay connection through this tap: the registry hands out its URL (`--relay-url`), the relay
   * announces it (`--public-url`), and the tap forwards to the relay (its target is set here). The signed URLs
   * bind no host, so they verify at the relay unchanged.
   */
  relayVia?: RelayTap;
}

export async function startStack(options: StackOptions = {}): Promise<Stack> {
  const dir = mkdtempSync(join(tmpdir(), 'tether-stack-'));
  const children: ChildProcess[] = [];
  const executors: PeerHandle[] = [];
  const served = new WeakMap<PeerHandle, string>();
  const close = async () => {
    for (const peer of executors.splice(0)) await peer.close();
    for (const child of children.splice(0).reverse()) {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGTERM');
        await once(child, 'exit');
      }
    }
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    const keyFile = join(dir, 'signing.pem');
    writeFileSync(keyFile, generateKeyPairSync('ed25519').privateKey.export({ type: 'pkcs8', format: 'pem' }), {
      mode: 0o600,
    });
    const database = `sqlite:${join(dir, 'registry.db')}`;
    const keys = { admin: '', executor: '', harness: '' };
    const createKey = async (role: (typeof STACK_KEY_ROLES)[number]) => {
      const { line, child } = await runBin(children, 'registry', keyCreateArgs(database, role));
      keys[role] = line;
      if (child.exitCode === null) await once(child, 'exit');
    };
    // The relay starts while the keys are made; the first key makes the database, the others then go in
    // together (the store waits on SQLite's lock: busy_timeout). About 2 s a stack instead of 4 here.
    const [first, ...rest] = STACK_KEY_ROLES;
    const [relayLine] = await Promise.all([
      runBin(children, 'relay', [
        'serve',
        '--listen',
        '127.0.0.1:0',
        '--registry-key-file',
        keyFile,
        ...(options.relayVia ? ['--public-url', options.relayVia.url] : []),
        ...(options.relayArgs ?? []),
      ]),
      createKey(first).then(() => Promise.all(rest.map(createKey))),
    ]);
    const relayUrl = relayLine.line;
    options.relayVia?.setTarget(relayUrl);
    const relayPublicUrl = options.relayVia?.url ?? relayUrl;
    const registryUrl = (
      await runBin(children, 'registry', [
        'serve',
        '--listen',
        '127.0.0.1:0',
        '--database',
        database,
        '--signing-key-file',
        keyFile,
        '--relay-url',
        relayPublicUrl,
        ...(options.registryArgs ?? []),
      ])
    ).line;
    const relayMetrics = async () => (await fetch(`${relayUrl.replace('ws:', 'http:')}/metrics`)).text();
    return {
      registryUrl,
      relayUrl,
      relayPublicUrl,
      keys,
      relayMetrics,
      async createKey(role, glob) {
        const { line, child } = await runBin(children, 'registry', keyCreateArgs(database, role, glob));
        if (child.exitCode === null) await once(child, 'exit');
        return line;
      },
      async startExecutor(kind, environmentId, options = {}) {
        const peer = await startPeer({
          ...options,
          kind,
          transport: 'remote',
          args: [...registryArgs(kind, registryUrl, environmentId), ...(options.args ?? [])],
          env: { ...apiKeyEnv(kind, keys.executor), ...options.env },
        });
        executors.push(peer);
        served.set(peer, environmentId);
        // Every environment of this stack with an executor still running is on the relay once this one is
        // (one socket per environment: a second executor of one takes the first's place).
        const expected = new Set(executors.filter((p) => p.exitStatus() === undefined).map((p) => served.get(p))).size;
        await waitUntil(
          async () => {
            const line = (await relayMetrics())
              .split('\n')
              .find((l) => l.startsWith('relay_sockets{role="environment"}'));
            return Number(line?.split(' ')[1] ?? 0) >= expected;
          },
          `${environmentId} to join the relay`,
          20_000,
          50,
        );
        return peer;
      },
      close,
      [Symbol.asyncDispose]: close,
    };
  } catch (err) {
    await close();
    throw err;
  }
}
