import { type ChildProcess, spawn } from 'node:child_process';
import { closeSync, openSync } from 'node:fs';
import { basename } from 'node:path';
import { placeInheritedFds } from '@tether/local-process';

/**
 * Shell snapshots (capability `shellSnapshotV2`): `process/start {shellSnapshot: {scopeId, shell}}` asks that
 * a login shell's profile be evaluated once per scope and its functions, options, aliases and exported
 * variables reach every `[shell.path, "-lc", script, …]` command of that scope, without the profile running
 * again per command. As Codex's exec-server 0.171.0 does (tests/conformance/CODEX-FINDINGS.md §22):
 *
 * - Only argv `[shell.path, "-lc", script, ...args]` is rewritten (argv[0] exactly the snapshot's shell path;
 *   `bash -lc`, `-l -c` or `-c` run as given), for bash and POSIX sh (its environment only); other shells
 *   run as given.
 * - The capture runs `shell.path -lc` with the start's environment and cwd (bash also reads `~/.bashrc`
 *   unless BASH_ENV is set), for at most 10 s; a capture that fails, times out or prints too much leaves
 *   the command as given (its profile then runs as usual).
 * - The command then runs without `-l`, the snapshot restored first (bash in privileged mode until then, so
 *   neither BASH_ENV nor functions from the environment are read), with the captured environment less PWD and
 *   OLDPWD, under the start's own environment (the start's variables win).
 * - One capture per scope, shell and cwd (Codex recaptures when the cwd changes), failures included, shared
 *   by concurrent starts, and per principal: one key's profile state never reaches another's commands.
 * - A sandboxed start's capture runs in that start's sandbox (bubblewrap and seccomp), never outside it.
 *
 * The snapshot travels in an environment variable that the restoring shell unsets before the command runs
 * (Codex uses an inherited pipe for bash): it works alike through a PTY and pipes, and needs no file. A
 * variable holds at most MAX_SNAPSHOT_BYTES (Linux's limit for one is 128 KiB); a larger snapshot leaves the
 * command as given.
 */

export interface ShellSnapshotParams {
  scopeId: string;
  shell: { name: string; path: string };
}

/**
 * The sandbox a start runs in (its ProcessWrap's program, arguments and seccomp file): the capture runs its
 * profile inside the same sandbox, never outside it.
 */
export interface SnapshotConfinement {
  file: string;
  args: readonly string[];
  fd3File: string | null;
  unwrapped?: boolean;
  /** Descriptors for the wrapper, made for each run (the proxy relay's channel; @tether/local-process). */
  inheritFds?: (() => number[]) | undefined;
}

/** A start's program and environment, before and after the snapshot is applied. */
export interface SnapshotStart {
  argv: string[];
  cwd: string;
  env: Record<string, string>;
}

export type Dialect = 'bash' | 'posix';

export interface Snapshot {
  dialect: Dialect;
  script: string;
  env: Record<string, string>;
}

const SNAPSHOT_MARK = '\0tether-shell-snapshot\0';
const ENV_MARK = '\0tether-shell-env\0';
/** The variable the snapshot travels in to the restoring shell. */
const SNAPSHOT_VARIABLE = '__TETHER_SHELL_SNAPSHOT';
/** Linux's limit for one environment string is 128 KiB (MAX_ARG_STRLEN), name and `=` included. */
export const MAX_SNAPSHOT_BYTES = 120 * 1024;
/** What a capture may print in all (profile noise, functions, environment) before it is given up. */
const MAX_CAPTURE_BYTES = 1024 * 1024;
/** As Codex's: a profile slower than this runs per command instead. */
export const CAPTURE_TIMEOUT_MS = 10_000;
/** Snapshots kept (least recently used go first); each is at most MAX_CAPTURE_BYTES. */
const MAX_SNAPSHOTS = 64;
/** Captured variables that describe the capturing shell, not the profile. */
const SHELL_STATE_VARIABLES = new Set(['PWD', 'OLDPWD', SNAPSHOT_VARIABLE]);

/**
 * What each dialect prints after its profile: a mark, the state to restore, a second mark, `env -0`. Builtins
 * are called as such, so that a function the profile defined under their name does not answer instead.
 */
const CAPTURE: Record<Dialect, string> = {
  bash: [
    // Codex's capture reads ~/.bashrc as an interactive shell would, unless BASH_ENV names another file.
    // biome-ignore lint/suspicious/noTemplateCurlyInString: the shell's parameter expansion, for the script
    'if [ -z "${BASH_ENV-}" ] && [ -r "${HOME:-/nonexistent}/.bashrc" ]; then . "$HOME/.bashrc"; fi',
    "builtin printf '\\0tether-shell-snapshot\\0'",
    // The restoring shell starts from no aliases, so that one cannot shadow a function of the same name.
    "builtin printf 'unalias -a 2>/dev/null\\n'",
    'builtin shopt -p',
    'builtin shopt -po | while builtin read -r _set flag name; do [ "$flag" = -o ] && builtin printf \'set -o %s\\n\' "$name"; done',
    'builtin declare -f',
    'builtin alias -p',
    "builtin printf '\\0tether-shell-env\\0'",
    'command env -0',
  ].join('\n'),
  // As Codex's: a POSIX shell's snapshot is its environment (no aliases: `alias` output is not portable).
  posix: ["printf '\\0tether-shell-snapshot\\0'", "printf '\\0tether-shell-env\\0'", 'command env -0'].join('\n'),
};

/**
 * What the rewritten command runs before the start's script: the snapshot restored, its variable gone. Bash
 * starts privileged (`-p`: no BASH_ENV, no functions from the environment) and leaves that mode first.
 */
function restorePrelude(dialect: Dialect): string {
  const restored = [
    `__tether_snapshot=$${SNAPSHOT_VARIABLE}`,
    `unset ${SNAPSHOT_VARIABLE}`,
    `eval "$__tether_snapshot" >/dev/null || printf 'tether: the shell snapshot could not be restored\\n' >&2`,
    'unset __tether_snapshot',
  ];
  return `${[...(dialect === 'bash' ? ['set +o privileged'] : []), ...restored].join('\n')}\n`;
}

function dialectOf(shell: ShellSnapshotParams['shell']): Dialect | null {
  const name = basename(shell.name || shell.path);
  if (name === 'bash') return 'bash';
  if (name === 'sh' || name === 'dash') return 'posix';
  return null;
}

/** The snapshots one principal may use (a connection's view; the request context holds it). */
export interface ShellSnapshotScope {
  apply(
    params: ShellSnapshotParams,
    start: SnapshotStart,
    confinement?: SnapshotConfinement | null,
  ): Promise<SnapshotStart>;
}

export interface ShellSnapshotOptions {
  timeoutMs?: number;
  maxSnapshots?: number;
}

/**
 * The executor's shell snapshots, one per principal, scope, shell and cwd. Owned by the exec server: `close()`
 * kills captures in flight and forgets every snapshot.
 */
export class ShellSnapshots {
  readonly #timeoutMs: number;
  readonly #maxSnapshots: number;
  readonly #snapshots = new Map<string, Promise<Snapshot | null>>();
  readonly #capturing = new Set<ChildProcess>();
  #closed = false;

  constructor(options: ShellSnapshotOptions = {}) {
    this.#timeoutMs = options.timeoutMs ?? CAPTURE_TIMEOUT_MS;
    this.#maxSnapshots = options.maxSnapshots ?? MAX_SNAPSHOTS;
  }

  /**
   * The start as it should run: rewritten to restore the scope's snapshot where one applies (capturing it
   * first if this is the scope's first such start), else unchanged. `owner` separates principals.
   */
  async apply(
    owner: string,
    params: ShellSnapshotParams,
    start: SnapshotStart,
    confinement: SnapshotConfinement | null = null,
  ): Promise<SnapshotStart> {
    const dialect = dialectOf(params.shell);
    const [program, flag, script, ...args] = start.argv;
    if (dialect === null || program !== params.shell.path || flag !== '-lc' || script === undefined) return start;
    const key = JSON.stringify([owner, params.scopeId, params.shell.path, start.cwd]);
    let snapshot = this.#snapshots.get(key);
    if (snapshot === undefined) {
      snapshot = this.#capture(dialect, program, start, confinement);
      this.#remember(key, snapshot);
    } else {
      // Most recently used last: the map's order is the eviction order.
      this.#snapshots.delete(key);
      this.#snapshots.set(key, snapshot);
    }
    const taken = await snapshot;
    if (taken === null || this.#closed) return start;
    return {
      argv: [program, dialect === 'bash' ? '-pc' : '-c', `${restorePrelude(dialect)}${script}`, ...args],
      cwd: start.cwd,
      env: { ...taken.env, ...start.env, [SNAPSHOT_VARIABLE]: taken.script },
    };
  }

  /** The view of one principal (`owner` names it; principals never share a snapshot). */
  scope(owner: string): ShellSnapshotScope {
    return { apply: (params, start, confinement) => this.apply(owner, params, start, confinement) };
  }

  /** How many snapshots are kept (for tests and metrics). */
  get size(): number {
    return this.#snapshots.size;
  }

  close(): void {
    this.#closed = true;
    for (const child of this.#capturing) killGroup(child);
    this.#capturing.clear();
    this.#snapshots.clear();
  }

  #remember(key: string, snapshot: Promise<Snapshot | null>): void {
    this.#snapshots.set(key, snapshot);
    while (this.#snapshots.size > this.#maxSnapshots) {
      const oldest = this.#snapshots.keys().next().value as string;
      this.#snapshots.delete(oldest);
    }
  }

  #capture(
    dialect: Dialect,
    shell: string,
    start: SnapshotStart,
    confinement: SnapshotConfinement | null,
  ): Promise<Snapshot | null> {
    if (this.#closed) return Promise.resolve(null);
    const command = [shell, '-lc', CAPTURE[dialect]];
    const confined = confinement !== null && confinement.unwrapped !== true;
    return new Promise((resolve) => {
      let child: ChildProcess;
      let fd3: number | null = null;
      // The wrapper's own descriptors, as for the start itself (@tether/local-process): fds 4, 5, … here.
      const handed: number[] = [];
      try {
        if (confined) handed.push(...(confinement.inheritFds?.() ?? []));
        const [file, ...args] = confined
          ? [
              confinement.file,
              ...placeInheritedFds(
                confinement.args,
                handed.map((_, i) => 4 + i),
              ),
              ...command,
            ]
          : command;
        // The seccomp filter goes to bubblewrap as fd 3, as for the start itself.
        if (confined && confinement.fd3File !== null) fd3 = openSync(confinement.fd3File, 'r');
        const stdio: Array<'ignore' | 'pipe' | number> = ['ignore', 'pipe', 'ignore'];
        if (fd3 !== null || handed.length > 0) stdio.push(fd3 ?? 'ignore', ...handed);
        // Its own process group, so that a timeout takes whatever the profile started with it.
        child = spawn(file!, args, { cwd: start.cwd, env: start.env, stdio, detached: true });
      } catch {
        resolve(null);
        return;
      } finally {
        if (fd3 !== null) closeSync(fd3);
        for (const fd of handed) closeSync(fd);
      }
      this.#capturing.add(child);
      const chunks: Buffer[] = [];
      let bytes = 0;
      let failed = false;
      const fail = () => {
        failed = true;
        killGroup(child);
      };
      const timer = setTimeout(fail, this.#timeoutMs);
      child.stdout?.on('data', (chunk: Buffer) => {
        bytes += chunk.length;
        if (bytes > MAX_CAPTURE_BYTES) fail();
        else chunks.push(chunk);
      });
      child.once('error', fail);
      child.once('close', (code) => {
        clearTimeout(timer);
        this.#capturing.delete(child);
        resolve(failed || code !== 0 ? null : parseCapture(dialect, Buffer.concat(chunks).toString('utf8')));
      });
    });
  }
}

/** The snapshot in a capture's output, or null when the marks are missing or it is too large to pass on. */
export function parseCapture(dialect: Dialect, output: string): Snapshot | null {
  const start = output.indexOf(SNAPSHOT_MARK);
  const middle = output.indexOf(ENV_MARK, start + SNAPSHOT_MARK.length);
  if (start < 0 || middle < 0) return null;
  const script = output.slice(start + SNAPSHOT_MARK.length, middle);
  if (Buffer.byteLength(script) + SNAPSHOT_VARIABLE.length + 2 > MAX_SNAPSHOT_BYTES || script.includes('\0')) {
    return null;
  }
  const env: Record<string, string> = {};
  for (const entry of output.slice(middle + ENV_MARK.length).split('\0')) {
    const eq = entry.indexOf('=');
    if (eq <= 0) continue;
    const name = entry.slice(0, eq);
    if (!SHELL_STATE_VARIABLES.has(name)) env[name] = entry.slice(eq + 1);
  }
  return { dialect, script, env };
}

function killGroup(child: ChildProcess): void {
  if (child.pid === undefined) return;
  try {
    process.kill(-child.pid, 'SIGKILL');
  } catch {
    // gone already
  }
}
