/** The setting most end-to-end suites run in: the real registry and relay bins, one executor, a scratch directory. */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { AttachedProcess } from '@tether/client';
import {
  findProcesses,
  type PeerHandle,
  type PeerKind,
  peerMarkerEnv,
  repoRoot,
  type Stack,
  startStack,
  startTmux,
  type Tmux,
  type TmuxOptions,
} from '@tether/test-kit';
import { afterAll, afterEach, beforeAll, expect } from 'vitest';

/** The variables that point the harness bin at `stack`, with its harness key. */
export function harnessEnv(stack: Stack): NodeJS.ProcessEnv {
  return { TETHER_HARNESS_REGISTRY: stack.registryUrl, TETHER_HARNESS_API_KEY: stack.keys.harness };
}

/** What `useExecutorStack` starts; set once the suite's first `beforeAll` has run. */
export interface ExecutorStack {
  stack: Stack;
  /** The executor (of `kind`) serving the suite's environment. */
  executor: PeerHandle;
  /** `harnessEnv(stack)`. */
  env: NodeJS.ProcessEnv;
  /** The scratch directory (`dirPrefix` given), removed after the suite; else ''. */
  dir: string;
}

/**
 * Before the suite: a scratch directory (with `dirPrefix`), the stack, and an executor of `kind` (default ours)
 * for `environmentId`. After it (and after the suite's own afterAll hooks, which may still use them): the stack
 * closed and the directory removed.
 */
export function useExecutorStack(
  environmentId: string,
  { kind = 'tether', dirPrefix }: { kind?: PeerKind; dirPrefix?: string } = {},
): ExecutorStack {
  const suite = { dir: '' } as ExecutorStack;
  // A registry, a relay and an executor starting on a busy machine.
  beforeAll(async () => {
    if (dirPrefix) suite.dir = mkdtempSync(join(tmpdir(), dirPrefix));
    suite.stack = await startStack();
    suite.executor = await suite.stack.startExecutor(kind, environmentId);
    suite.env = harnessEnv(suite.stack);
  }, 120_000);
  afterAll(async () => {
    await suite.stack?.close();
    if (suite.dir) rmSync(suite.dir, { recursive: true, force: true });
  }, 120_000);
  return suite;
}

/**
 * A file's working directory, made now under the temp directory (`prefix`), where its harnesses and remote
 * commands run. After the file, and after its own afterAll hooks: the file's stack (`stack()`) closed, which
 * ends its executors and so their processes; then no process may be left with its cwd under the directory,
 * and it is removed.
 */
export function useWork(prefix: string, stack: () => Stack | undefined): string {
  const work = mkdtempSync(join(tmpdir(), prefix));
  afterAll(async () => {
    await stack()?.close();
    expect(findProcesses({ cwdUnder: work })).toEqual([]);
    rmSync(work, { recursive: true, force: true });
  });
  return work;
}

/** `startTmux` for the tests of a file or suite: each terminal is closed after the test that opened it. */
export function useTerminals(): (options: TmuxOptions) => Promise<Tmux> {
  const terminals: Tmux[] = [];
  afterEach(async () => {
    for (const tmux of terminals.splice(0)) await tmux.close();
  });
  return async (options) => {
    const tmux = await startTmux(options);
    terminals.push(tmux);
    return tmux;
  };
}

/** A shell word: `word` single-quoted. */
export const quote = (word: string) => `'${word.replace(/'/g, `'\\''`)}'`;

export interface ScriptOutcome {
  code: number | null;
  stdout: string;
  stderr: string;
  ms: number;
}

/**
 * Runs `script` in bash from `work` with `h` as the harness bin, pointed at `environment` on `stack` (its
 * variables, no config file of the user's, no connection master) and `$W` as `work`; stdin is /dev/null unless
 * the script redirects it. stdout is read as latin1 (bytes stay bytes).
 */
export function harnessScript(
  stack: Stack,
  environment: string,
  work: string,
  script: string,
  env: NodeJS.ProcessEnv = {},
): Promise<ScriptOutcome> {
  const started = Date.now();
  const child = spawn('bash', ['-c', `h() { "$NODE" "$BIN" "$@"; }\n${script}`], {
    cwd: work,
    env: {
      ...process.env,
      NODE: process.execPath,
      BIN: join(repoRoot(), 'apps', 'harness', 'dist', 'main.js'),
      W: work,
      TETHER_HARNESS_REGISTRY: stack.registryUrl,
      TETHER_HARNESS_ENVIRONMENT_ID: environment,
      TETHER_HARNESS_API_KEY: stack.keys.harness,
      // Never the user's config file, nor a connection master of theirs.
      TETHER_CONFIG: join(work, 'no-config.toml'),
      TETHER_REUSE: 'no',
      ...peerMarkerEnv(),
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => {
    stdout += d.toString('latin1');
  });
  child.stderr.on('data', (d: Buffer) => {
    stderr += d;
  });
  return new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('close', (code) => resolve({ code, stdout, stderr, ms: Date.now() - started }));
  });
}

/** Collects an attachment's terminal output; `until` resolves once `text` has shown. */
export function follow(attached: AttachedProcess) {
  let seen = '';
  const waiters: Array<{ text: string; resolve: () => void }> = [];
  const done = (async () => {
    for await (const event of attached) {
      if (event.kind !== 'output') continue;
      seen += event.chunk.toString();
      for (const waiter of waiters.splice(0)) {
        if (seen.includes(waiter.text)) waiter.resolve();
        else waiters.push(waiter);
      }
    }
  })();
  // Asserted where it matters; a failure before then is not an unhandled rejection.
  done.catch(() => undefined);
  return {
    get seen() {
      return seen;
    },
    done,
    until: (text: string) =>
      seen.includes(text) ? Promise.resolve() : new Promise<void>((resolve) => waiters.push({ text, resolve })),
  };
}
