import { closeSync, writeSync } from 'node:fs';
import { loadNativePipe, nativePipeUnavailableReason } from '@tether/native-pipe';
import { API_KEY_ENV_VARS } from './api-key.js';

/**
 * Moving an API key out of the executor's environment. The kernel keeps the environment a process was
 * exec'd with readable at `/proc/<pid>/environ` for its whole life, so the only way to drop a key from it
 * is to exec again without it: the executor re-executes itself (same pid, same argv) with every API key
 * variable removed, and the key travels on a pipe whose read end alone survives the exec
 * (`--api-key-fd N`); the new image reads it to EOF and closes it before anything else starts.
 */

/**
 * Set in the re-executed image's environment: the variable its key was in (for messages: a registry refusing
 * a key from the deprecated TETHER_API_KEY is likely refusing a harness key). A name, never the key.
 */
export const KEY_ORIGIN_ENV = 'TETHER_EXECUTOR_API_KEY_ORIGIN';

/** What the handover needs from the platform; each member is absent where it is unavailable. */
export interface ExecSupport {
  /** Replaces the process image (`process.execve` or the native addon's); throws on failure. */
  execve?: (file: string, argv: string[], env: Record<string, string>) => never;
  /** A pipe with both ends close-on-exec. */
  pipe?: () => [readFd: number, writeFd: number];
  /** Clears FD_CLOEXEC on one descriptor (so it alone survives the exec). */
  clearCloexec?: (fd: number) => void;
  /** prctl(PR_SET_DUMPABLE). */
  setDumpable?: (dumpable: boolean) => void;
  /** Sets FD_CLOEXEC on every open descriptor above `fd`; returns how many lacked it. */
  setCloexecAbove?: (fd: number) => number;
  /** Why the native addon is missing, for messages. */
  unavailableReason?: string | null;
}

/** The optional members of @tether/native-pipe's NativePipe, as far as this module uses them. */
type NativeProcessControls = Partial<
  Pick<ExecSupport, 'execve' | 'clearCloexec' | 'setDumpable' | 'setCloexecAbove'>
> & {
  pipe(): [number, number];
};

/** This process's support: `process.execve` where the runtime has it (Node ≥ 22.15), else the addon's. */
export function platformExecSupport(): ExecSupport {
  const native = loadNativePipe() as NativeProcessControls | null;
  const support: ExecSupport = { unavailableReason: native ? null : nativePipeUnavailableReason() };
  const runtimeExecve = (process as { execve?: (file: string, args: string[], env: Record<string, string>) => never })
    .execve;
  if (typeof runtimeExecve === 'function') support.execve = (file, argv, env) => runtimeExecve(file, argv, env);
  else if (typeof native?.execve === 'function') support.execve = native.execve.bind(native);
  if (native) support.pipe = () => native.pipe();
  if (typeof native?.clearCloexec === 'function') support.clearCloexec = native.clearCloexec.bind(native);
  if (typeof native?.setDumpable === 'function') support.setDumpable = native.setDumpable.bind(native);
  if (typeof native?.setCloexecAbove === 'function') support.setCloexecAbove = native.setCloexecAbove.bind(native);
  return support;
}

/** True when `handOverApiKey` can run here. */
export function canHandOver(support: ExecSupport): boolean {
  return support.execve !== undefined && support.pipe !== undefined && support.clearCloexec !== undefined;
}

/** What is missing for the handover, for the refusal message. */
export function handoverUnavailableReason(support: ExecSupport): string {
  const missing: string[] = [];
  if (!support.execve) missing.push('execve (Node < 22.15 and no native addon)');
  if (!support.pipe || !support.clearCloexec) missing.push('pipes that survive exec (the native addon)');
  const reason = support.unavailableReason ? `; @tether/native-pipe: ${support.unavailableReason}` : '';
  return `${missing.join(' and ')}${reason}`;
}

export interface Reexec {
  /** The program to exec: `process.execPath`. */
  execPath: string;
  /** The current argv without the program: `[...process.execArgv, process.argv[1], ...process.argv.slice(2)]`. */
  args: string[];
  env: NodeJS.ProcessEnv;
}

/** The current process's command line, to exec again. */
export function currentCommandLine(): Reexec {
  return { execPath: process.execPath, args: [...process.execArgv, ...process.argv.slice(1)], env: process.env };
}

/** What the executor needs from the platform to re-execute itself and guard its process (tests give stand-ins). */
export interface ExecutorPlatform {
  exec: ExecSupport;
  /** The command line to re-execute. */
  commandLine: () => Reexec;
}

/** This process's: the native addon or Node's execve, and its own command line. */
export function currentPlatform(): ExecutorPlatform {
  return { exec: platformExecSupport(), commandLine: currentCommandLine };
}

/** The environment without any API key variable (and without undefined values, which execve cannot take). */
export function environmentWithoutKeys(env: NodeJS.ProcessEnv): Record<string, string> {
  const clean: Record<string, string> = {};
  for (const [name, value] of Object.entries(env)) {
    if (value === undefined || (API_KEY_ENV_VARS as readonly string[]).includes(name)) continue;
    clean[name] = value;
  }
  return clean;
}

/**
 * Re-executes this process without the API key variables, handing `key` over on a pipe (`--api-key-fd`; the
 * variable it was in as `origin`);
 * with `key` null (it comes from a file or an inherited descriptor) the command line is kept as it is, and
 * `keepFd` (the user's `--api-key-fd`, not read yet) is kept open across the exec.
 * Does not return on success. The key is written whole before the exec (far below the pipe's capacity,
 * so the write cannot block) and the write end is closed, so the new image reads to EOF. Only the read
 * end loses close-on-exec: every other descriptor of ours (libuv opens all with O_CLOEXEC) is closed by
 * the kernel at the exec.
 */
export function handOverApiKey(
  key: string | null,
  command: Reexec,
  support: ExecSupport,
  keepFd?: number,
  origin?: string,
): never {
  if (!canHandOver(support)) throw new Error(`cannot re-execute: ${handoverUnavailableReason(support)}`);
  const env = environmentWithoutKeys(command.env);
  if (origin !== undefined) env[KEY_ORIGIN_ENV] = origin;
  if (key === null) {
    if (keepFd !== undefined) support.clearCloexec!(keepFd);
    return support.execve!(command.execPath, [command.execPath, ...command.args], env);
  }
  const [readFd, writeFd] = support.pipe!();
  try {
    const bytes = Buffer.from(key, 'utf8');
    let written = 0;
    while (written < bytes.length) written += writeSync(writeFd, bytes, written);
  } finally {
    closeSync(writeFd);
  }
  try {
    support.clearCloexec!(readFd);
    const argv = [command.execPath, ...command.args, '--api-key-fd', String(readFd)];
    return support.execve!(command.execPath, argv, env);
  } catch (err) {
    closeQuietly(readFd); // the exec failed: the key must not stay readable on an inherited descriptor
    throw err;
  }
}

function closeQuietly(fd: number): void {
  try {
    closeSync(fd);
  } catch {
    // Already closed.
  }
}
