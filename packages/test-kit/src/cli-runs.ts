import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/**
 * What tests of a CLI do alike: run it in-process with its outputs captured, start it as a child that prints
 * its URL as its first stdout line, and clean up the children and temp directories a test made.
 */

/** The io a service CLI (registry, relay) is built with, writing into strings. */
export interface CapturedIo {
  io: {
    stdout: { write(text: string): unknown };
    stderr: { write(text: string): unknown };
    env: NodeJS.ProcessEnv;
    /** Already resolved: a server started in-process stops at once. */
    stopSignal: Promise<unknown>;
  };
  stdout(): string;
  stderr(): string;
}

export function captureIo(env: NodeJS.ProcessEnv = {}): CapturedIo {
  let stdout = '';
  let stderr = '';
  return {
    io: {
      stdout: { write: (t: string) => (stdout += t) },
      stderr: { write: (t: string) => (stderr += t) },
      env,
      stopSignal: Promise.resolve(),
    },
    stdout: () => stdout,
    stderr: () => stderr,
  };
}

/** The part of a commander program runCli uses (test-kit does not depend on commander). */
export interface CliProgram {
  readonly commands: readonly CliProgram[];
  exitOverride(): unknown;
  parseAsync(argv: string[]): Promise<unknown>;
}

/**
 * Runs `NAME ARGS` in-process on a CLI built from (io, exit): the exit code the action gave, or commander's
 * for a usage error or --help (no command exits the test's process), and both outputs.
 */
export async function runCli(
  build: (io: CapturedIo['io'], exit: (code: number) => void) => CliProgram,
  name: string,
  args: string[],
  env: NodeJS.ProcessEnv = {},
): Promise<{ code: number; stdout: string; stderr: string }> {
  const captured = captureIo(env);
  let code = -1;
  const program = build(captured.io, (c) => {
    code = c;
  });
  const overrideExits = (command: CliProgram): void => {
    command.exitOverride();
    for (const sub of command.commands) overrideExits(sub);
  };
  overrideExits(program);
  try {
    await program.parseAsync(['node', name, ...args]);
  } catch (err) {
    code = (err as { exitCode?: number }).exitCode ?? 1;
  }
  return { code, stdout: captured.stdout(), stderr: captured.stderr() };
}

/** This process's environment without Tether's variables (`TETHER_*`), plus `extra`. */
export function withoutTetherEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env = Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.startsWith('TETHER_')));
  return { ...env, ...extra };
}

/** A child started by a Scratch, its output captured. */
export interface LineChild {
  child: ChildProcess;
  /** Its first stdout line (a server's URL); rejects, with its stderr, if it exits first. */
  line: Promise<string>;
  out(): string;
  err(): string;
}

/** Temp directories and children of a test; `cleanup()` (in afterEach) removes and ends what is left. */
export interface Scratch {
  /** A new temp directory, `PREFIX…` under the OS's. */
  dir(prefix: string): string;
  /** `command ARGS` as a child with stdin ignored; see LineChild. */
  spawn(command: string, args: string[], options?: { cwd?: string; env?: NodeJS.ProcessEnv }): LineChild;
  /** SIGKILLs each child still running and waits for it to exit, then removes the directories. */
  cleanup(): Promise<void>;
}

export function scratch(): Scratch {
  const dirs: string[] = [];
  const children: ChildProcess[] = [];
  return {
    dir(prefix) {
      const dir = mkdtempSync(join(tmpdir(), prefix));
      dirs.push(dir);
      return dir;
    },
    spawn(command, args, options = {}) {
      const child = spawn(command, args, { ...options, stdio: ['ignore', 'pipe', 'pipe'] });
      children.push(child);
      let stdout = '';
      let stderr = '';
      child.stderr.on('data', (d) => (stderr += d));
      const line = new Promise<string>((resolve, reject) => {
        child.stdout.on('data', (d) => {
          stdout += d;
          if (stdout.includes('\n')) resolve(stdout.split('\n')[0] as string);
        });
        child.once('exit', (code) => reject(new Error(`${[command, ...args].join(' ')} exited ${code}: ${stderr}`)));
      });
      line.catch(() => {}); // awaited only by tests that expect a line
      return { child, line, out: () => stdout, err: () => stderr };
    },
    async cleanup() {
      for (const child of children.splice(0)) {
        if (child.exitCode === null && child.signalCode === null) {
          child.kill('SIGKILL');
          await once(child, 'exit');
        }
      }
      for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
    },
  };
}
