import { type ChildProcess, type StdioOptions, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { delimiter, dirname, join } from 'node:path';
import type { Readable, Writable } from 'node:stream';
import { fileURLToPath } from 'node:url';

export type PeerKind = 'codex' | 'tether';
export type Transport = 'ws' | 'stdio';
/** `remote`: no --listen; the caller passes `registryArgs(…)` (`--registry URL --environment-id ID`) in `args`. */
export type PeerTransport = Transport | 'remote';

export interface StartPeerOptions {
  kind: PeerKind;
  transport: PeerTransport;
  /** Extra CLI arguments appended after `--listen …`. */
  args?: string[];
  /** Extra environment variables for the peer (merged over the current environment). */
  env?: Record<string, string>;
  /** Files written into the fresh home directory (`CODEX_HOME` / `TETHER_HOME`) before launch. */
  homeFiles?: Record<string, string>;
  /** How long to wait for the `ws://` line (ws transport only). Default 20 s. */
  startupTimeoutMs?: number;
  /**
   * Descriptors the peer inherits beyond 0-2, as a launcher could leave them open: the peer's fd number
   * (above 2) to one of ours, e.g. `{ 100: openSync(file, 'a') }`. Numbers between are left unopened.
   */
  inheritFds?: Record<number, number>;
}

export interface PeerExit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface PeerHandle extends AsyncDisposable {
  readonly kind: PeerKind;
  readonly transport: PeerTransport;
  readonly pid: number;
  /** `ws://IP:PORT` printed by the peer (ws transport only). */
  readonly url: string | undefined;
  /** The peer's stdin (write JSON lines here in stdio mode). */
  readonly stdin: Writable;
  /** The peer's stdout (JSON lines in stdio mode; drained by the handle in ws mode). */
  readonly stdout: Readable;
  /** `CODEX_HOME` or `TETHER_HOME` of this peer (removed on close). */
  readonly home: string;
  /** Lines printed on stdout in ws mode (the `ws://` line included). */
  readonly stdoutLines: readonly string[];
  /** Resolves when the peer process has exited. */
  readonly exited: Promise<PeerExit>;
  /** Exit status once exited, else undefined. */
  exitStatus(): PeerExit | undefined;
  /** Everything the peer wrote to stderr so far (capped). */
  stderr(): string;
  /** Sends a signal to the peer process. */
  kill(signal?: NodeJS.Signals): void;
  /** Ends stdin, sends SIGTERM, escalates to SIGKILL after `graceMs`; waits for exit; removes the home dir. */
  close(graceMs?: number): Promise<PeerExit>;
}

const STDERR_CAP = 256 * 1024;
const RUN_MARKER_ENV = 'TETHER_TEST_KIT_PEER';

const livePeers = new Set<PeerHandle>();

/** Peers started by this module that have not exited yet. */
export function activePeers(): PeerHandle[] {
  return [...livePeers];
}

/** Repository root (`/work/main` in CI), derived from this file's location. */
export function repoRoot(): string {
  // src/peer.ts or dist/peer.js → packages/test-kit/{src,dist} → repo root is three levels up.
  return fileURLToPath(new URL('../../../', import.meta.url));
}

/** Absolute path of our executor's built CLI entry point. */
export function tetherMainPath(): string {
  return join(repoRoot(), 'apps', 'executor', 'dist', 'main.js');
}

const CODEX_TARGETS: Record<string, { pkg: string; triple: string }> = {
  'linux-x64': { pkg: '@openai/codex-linux-x64', triple: 'x86_64-unknown-linux-musl' },
  'linux-arm64': { pkg: '@openai/codex-linux-arm64', triple: 'aarch64-unknown-linux-musl' },
  'darwin-x64': { pkg: '@openai/codex-darwin-x64', triple: 'x86_64-apple-darwin' },
  'darwin-arm64': { pkg: '@openai/codex-darwin-arm64', triple: 'aarch64-apple-darwin' },
};

let cachedCodexBinary: string | undefined;

/**
 * Path of the native `codex` binary shipped by `@openai/codex` (the platform optional dependency),
 * resolved from the `tests` workspace package so that no Node wrapper sits between us and the peer.
 * `CODEX_BIN` overrides.
 */
export function codexBinaryPath(): string {
  if (process.env.CODEX_BIN) return process.env.CODEX_BIN;
  if (cachedCodexBinary) return cachedCodexBinary;
  const target = CODEX_TARGETS[`${process.platform}-${process.arch}`];
  if (!target) throw new Error(`no codex binary for ${process.platform}-${process.arch}`);
  const fromTests = createRequire(join(repoRoot(), 'tests', 'package.json'));
  const codexPackageJson = fromTests.resolve('@openai/codex/package.json');
  const fromCodex = createRequire(codexPackageJson);
  const platformPackageJson = fromCodex.resolve(`${target.pkg}/package.json`);
  const binary = join(dirname(platformPackageJson), 'vendor', target.triple, 'bin', 'codex');
  if (!existsSync(binary)) throw new Error(`codex binary not found at ${binary}`);
  cachedCodexBinary = binary;
  return binary;
}

/** Command line used to launch a peer (exported for CLI-level tests). */
export function peerCommand(
  kind: PeerKind,
  listen: string | undefined,
  args: string[] = [],
): { command: string; args: string[]; homeEnv: string } {
  const listenArgs = listen === undefined ? [] : ['--listen', listen];
  if (kind === 'codex') {
    return { command: codexBinaryPath(), args: ['exec-server', ...listenArgs, ...args], homeEnv: 'CODEX_HOME' };
  }
  return { command: process.execPath, args: [tetherMainPath(), ...listenArgs, ...args], homeEnv: 'TETHER_HOME' };
}

/**
 * A remote-mode peer's registry and environment: `--registry` for ours, `--remote` for codex (our executor
 * takes both; `--remote` is Codex's spelling).
 */
export function registryArgs(kind: PeerKind, registryUrl: string, environmentId: string): string[] {
  return [kind === 'codex' ? '--remote' : '--registry', registryUrl, '--environment-id', environmentId];
}

/** A remote-mode peer's API key in its environment: `TETHER_EXECUTOR_API_KEY` for ours, `CODEX_API_KEY` for codex. */
export function apiKeyEnv(kind: PeerKind, apiKey: string): Record<string, string> {
  return kind === 'codex' ? { CODEX_API_KEY: apiKey } : { TETHER_EXECUTOR_API_KEY: apiKey };
}

/**
 * PATH for a codex peer with its sandbox helper on it: Codex's installed CLI makes a `codex-linux-sandbox`
 * alias of its binary (arg0 dispatch) in a directory on PATH, and its exec-server runs sandboxed commands
 * through it. The alias goes in the peer's home.
 */
export function codexSandboxPath(home: string): string {
  const bin = join(home, 'bin');
  mkdirSync(bin, { recursive: true });
  const alias = join(bin, 'codex-linux-sandbox');
  if (!existsSync(alias)) symlinkSync(codexBinaryPath(), alias);
  return [bin, process.env.PATH ?? ''].filter(Boolean).join(delimiter);
}

/** Creates a fresh home dir for a peer, writing `files` into it. */
export function makePeerHome(kind: PeerKind, files: Record<string, string> = {}): string {
  // Codex makes its sandbox helper's alias in its home only when that is outside the temp directory (it
  // refuses to put helper binaries under /tmp), as an installed Codex's ~/.codex is.
  const parent = kind === 'codex' && existsSync('/var/tmp') ? '/var/tmp' : tmpdir();
  const home = mkdtempSync(join(parent, `test-kit-${kind}-home-`));
  for (const [name, content] of Object.entries(files)) writeFileSync(join(home, name), content);
  return home;
}

/** Environment variable naming the current test run; set it (e.g. in a vitest globalSetup) to share a marker. */
export const RUN_ID_ENV = 'TETHER_TEST_KIT_RUN';

/** The marker value given to peers: `$TETHER_TEST_KIT_RUN`, else this process's pid. */
export function peerMarker(): string {
  return process.env[RUN_ID_ENV] ?? String(process.pid);
}

/**
 * Names the test process (a vitest worker) that spawned a peer, beside the run's marker: test files run in
 * parallel, so a file's own leak check looks for its worker's peers (`workerMarkerEntry()`), and the run-wide
 * check after the last file for the run's.
 */
export const WORKER_MARKER_ENV = 'TETHER_TEST_KIT_WORKER';

/** The `NAME=value` environment entry that every peer this process spawns carries (for `environIncludes`). */
export function workerMarkerEntry(): string {
  return `${WORKER_MARKER_ENV}=${process.pid}`;
}

/** Marks processes spawned by the test-kit so leak checks can find them. */
export function peerMarkerEnv(): Record<string, string> {
  return { [RUN_MARKER_ENV]: peerMarker(), [WORKER_MARKER_ENV]: String(process.pid) };
}
export const PEER_MARKER_ENV = RUN_MARKER_ENV;

function waitForExit(child: ChildProcess): Promise<PeerExit> {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) {
      resolve({ code: child.exitCode, signal: child.signalCode });
      return;
    }
    child.once('exit', (code, signal) => resolve({ code, signal }));
  });
}

/** The peer's stdio array: three pipes, then `inheritFds` at their numbers and nothing in between. */
function peerStdio(inheritFds: Record<number, number>): StdioOptions {
  const stdio: StdioOptions = ['pipe', 'pipe', 'pipe'];
  for (const [at, fd] of Object.entries(inheritFds)) {
    const index = Number(at);
    if (!Number.isInteger(index) || index <= 2) throw new Error(`inheritFds: ${at} is not a descriptor above 2`);
    while (stdio.length < index) stdio.push('ignore');
    stdio[index] = fd;
  }
  return stdio;
}

/**
 * Launches a codex or tether exec-server peer on a fresh home directory.
 * ws: resolves once the peer printed its `ws://IP:PORT` line. stdio: resolves right after spawn.
 */
export async function startPeer(options: StartPeerOptions): Promise<PeerHandle> {
  const { kind, transport } = options;
  const listen = transport === 'ws' ? 'ws://127.0.0.1:0' : transport === 'stdio' ? 'stdio' : undefined;
  const cmd = peerCommand(kind, listen, options.args ?? []);
  const home = makePeerHome(kind, options.homeFiles);
  const child = spawn(cmd.command, cmd.args, {
    env: {
      ...process.env,
      [cmd.homeEnv]: home,
      RUST_LOG: 'error',
      ...(kind === 'codex' ? { PATH: codexSandboxPath(home) } : {}),
      ...peerMarkerEnv(),
      ...options.env,
    },
    stdio: peerStdio(options.inheritFds ?? {}),
  });
  const exited = waitForExit(child);
  let exitStatus: PeerExit | undefined;
  void exited.then((status) => {
    exitStatus = status;
  });
  let stderrText = '';
  child.stderr!.setEncoding('utf8');
  child.stderr!.on('data', (chunk: string) => {
    if (stderrText.length < STDERR_CAP) stderrText += chunk;
  });
  // Writes to a dead peer's stdin must not crash the test process.
  child.stdin!.on('error', () => {});
  const spawnError = new Promise<Error>((resolve) => child.once('error', resolve));

  const stdoutLines: string[] = [];
  let url: string | undefined;
  let handle: PeerHandle | undefined;

  const close = async (graceMs = 5_000): Promise<PeerExit> => {
    try {
      if (!exitStatus && child.exitCode === null && child.signalCode === null) {
        child.stdin!.end();
        child.kill('SIGTERM');
        const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
        try {
          return await exited;
        } finally {
          clearTimeout(timer);
        }
      }
      return await exited;
    } finally {
      if (handle) livePeers.delete(handle);
      rmSync(home, { recursive: true, force: true });
    }
  };

  handle = {
    kind,
    transport,
    get pid() {
      return child.pid ?? -1;
    },
    get url() {
      return url;
    },
    stdin: child.stdin!,
    stdout: child.stdout!,
    home,
    stdoutLines,
    exited,
    exitStatus: () => exitStatus,
    stderr: () => stderrText,
    kill: (signal: NodeJS.Signals = 'SIGTERM') => {
      child.kill(signal);
    },
    close,
    [Symbol.asyncDispose]: async () => {
      await close();
    },
  };
  livePeers.add(handle);
  void exited.then(() => {
    if (handle) livePeers.delete(handle);
  });

  if (transport !== 'ws') {
    const failed = await Promise.race([spawnError, new Promise<undefined>((r) => setImmediate(r, undefined))]);
    if (failed) {
      await close();
      throw new Error(`failed to spawn ${kind} peer: ${failed.message}`);
    }
    return handle;
  }

  // ws: read stdout lines until one starts with ws://, keep draining afterwards.
  child.stdout!.setEncoding('utf8');
  const timeoutMs = options.startupTimeoutMs ?? 20_000;
  const found = await new Promise<string | Error>((resolve) => {
    let buffer = '';
    const timer = setTimeout(
      () => resolve(new Error(`timed out after ${timeoutMs} ms waiting for ws:// line`)),
      timeoutMs,
    );
    child.stdout!.on('data', (chunk: string) => {
      buffer += chunk;
      let newline = buffer.indexOf('\n');
      while (newline >= 0) {
        const line = buffer.slice(0, newline).replace(/\r$/, '');
        buffer = buffer.slice(newline + 1);
        stdoutLines.push(line);
        if (line.startsWith('ws://')) {
          clearTimeout(timer);
          resolve(line.trim());
        }
        newline = buffer.indexOf('\n');
      }
    });
    void spawnError.then((error) => {
      clearTimeout(timer);
      resolve(error);
    });
    void exited.then((status) => {
      clearTimeout(timer);
      resolve(new Error(`peer exited (code ${status.code}, signal ${status.signal}) before printing a ws:// line`));
    });
  });
  if (found instanceof Error) {
    await close(1_000);
    throw new Error(`${kind} peer (${cmd.command} ${cmd.args.join(' ')}): ${found.message}\nstderr:\n${stderrText}`);
  }
  url = found;
  return handle;
}

export interface RunPeerOptions {
  kind: PeerKind;
  /** Full argument list after the program (e.g. `['--listen', 'stdio', '--strict-config']`). */
  args: string[];
  env?: Record<string, string>;
  homeFiles?: Record<string, string>;
  /** Written to stdin, which is then closed. Default: nothing (immediate EOF). */
  stdin?: string;
  /** Kill with SIGKILL after this long. Default 20 s. */
  timeoutMs?: number;
}

export interface RunPeerResult extends PeerExit {
  stdout: string;
  stderr: string;
  timedOut: boolean;
  home: string;
}

/** Runs a peer command to completion (for CLI tests); the home dir is removed afterwards. */
export async function runPeer(options: RunPeerOptions): Promise<RunPeerResult> {
  const cmd = peerCommand(options.kind, undefined, options.args);
  const home = makePeerHome(options.kind, options.homeFiles);
  try {
    const child = spawn(cmd.command, cmd.args, {
      env: { ...process.env, [cmd.homeEnv]: home, RUST_LOG: 'error', ...peerMarkerEnv(), ...options.env },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
      stdout += chunk;
    });
    child.stderr!.setEncoding('utf8').on('data', (chunk: string) => {
      if (stderr.length < STDERR_CAP) stderr += chunk;
    });
    child.stdin!.on('error', () => {});
    child.stdin!.end(options.stdin ?? '');
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill('SIGKILL');
    }, options.timeoutMs ?? 20_000);
    const exit = await new Promise<PeerExit>((resolve, reject) => {
      child.once('error', reject);
      child.once('close', (code, signal) => resolve({ code, signal }));
    });
    clearTimeout(timer);
    return { ...exit, stdout, stderr, timedOut, home };
  } finally {
    rmSync(home, { recursive: true, force: true });
  }
}
