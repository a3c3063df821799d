/**
 * What is checked before a child is started (cwd, argv[0], its executable format, a PTY size), and how a
 * failure reads: Codex's `io::Error` text for an errno.
 */
import {
  accessSync,
  closeSync,
  constants as fsConstants,
  openSync,
  readdirSync,
  readFileSync,
  readSync,
  statSync,
} from 'node:fs';
import { constants as osConstants } from 'node:os';
import path from 'node:path';
import { ProcessError } from './errors.js';
import type { PtySize, SpawnOptions } from './types.js';

/** Used when neither the child env nor the server has a PATH (what a login shell would start from). */
export const FALLBACK_PATH = '/usr/local/bin:/usr/bin:/bin';
const MAX_PTY_DIMENSION = 0xffff;

export function validate(options: SpawnOptions): void {
  if (options.argv.length === 0) throw new ProcessError('invalid_argument', 'argv must not be empty');
  const texts = [...options.argv, options.cwd, options.arg0 ?? ''];
  for (const [name, value] of Object.entries(options.env)) texts.push(name, value);
  if (texts.some((text) => text.includes('\0'))) {
    throw new ProcessError('invalid_argument', 'argv, cwd, arg0 and env must not contain NUL bytes');
  }
  if (Object.keys(options.env).some((name) => name === '' || name.includes('='))) {
    throw new ProcessError('invalid_argument', 'env names must be non-empty and must not contain `=`');
  }
  if (options.size) checkSize(options.size);
}

export function checkSize(size: PtySize): void {
  const ok = (n: number) => Number.isInteger(n) && n >= 1 && n <= MAX_PTY_DIMENSION;
  if (!ok(size.rows) || !ok(size.cols)) {
    throw new ProcessError('invalid_argument', `pty size must be 1..${MAX_PTY_DIMENSION} rows and cols`);
  }
}

/**
 * The cwd is checked before spawning. As with Codex (whose chdir fails in the child), a missing cwd or a
 * file is a spawn failure with the bare OS text; only a relative path, which the request contract rules
 * out, is an invalid argument.
 */
export function checkCwd(cwd: string): void {
  if (!path.isAbsolute(cwd)) throw new ProcessError('invalid_argument', `cwd \`${cwd}\` must be an absolute path`);
  let isDirectory: boolean;
  try {
    isDirectory = statSync(cwd).isDirectory();
  } catch (err) {
    throw spawnError(err);
  }
  if (!isDirectory) throw spawnFailed('ENOTDIR');
}

/**
 * execvp's lookup, done before spawning so a failure is reported clearly and the id released: a name
 * with a `/` is taken as a path (relative to the child's cwd); a bare name is searched in `searchPath`
 * (empty entries mean the cwd), skipping entries that exist but are not executable files.
 */
export function resolveProgram(program: string, searchPath: string, cwd: string): string {
  if (program === '') throw spawnFailed('ENOENT');
  if (program.includes('/')) {
    const file = path.resolve(cwd, program);
    const problem = executableProblem(file);
    if (problem !== null) throw spawnFailed(problem);
    return file;
  }
  let sawDenied = false;
  for (const dir of searchPath.split(':')) {
    const file = path.resolve(cwd, dir, program);
    const problem = executableProblem(file);
    if (problem === null) return file;
    if (problem === 'EACCES') sawDenied = true;
  }
  throw spawnFailed(sawDenied ? 'EACCES' : 'ENOENT');
}

/** null when `file` is an executable regular file, else the errno code execve would give. */
function executableProblem(file: string): string | null {
  try {
    if (!statSync(file).isFile()) return 'EACCES';
    accessSync(file, fsConstants.X_OK);
    return null;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EACCES' ? 'EACCES' : 'ENOENT';
  }
}

/** The first bytes of an ELF binary and of a script the kernel runs through its `#!` interpreter. */
const ELF_MAGIC = Buffer.from([0x7f, 0x45, 0x4c, 0x46]);
const SHEBANG = Buffer.from('#!');

/**
 * execve fails with ENOEXEC on a file the kernel cannot run, and glibc's execvp (which libuv and node-pty
 * call, and which perl's exec calls) then runs the file with /bin/sh instead: an executable data file or
 * binary of another machine would be read as shell commands. Codex (Rust's posix_spawnp, which has no such
 * fallback) fails with `Exec format error (os error 8)`; so do we, before spawning, from the file's first
 * bytes. A file this user may execute but not read cannot be checked (nor read by sh): the kernel decides.
 * When binfmt_misc has handlers registered (qemu, wine, …) other formats may run, so only an empty file is
 * refused then.
 */
export function checkExecFormat(file: string): void {
  // The formats below are Linux's (another system's native binaries, Mach-O for one, are not ELF).
  if (process.platform !== 'linux') return;
  const head = Buffer.alloc(ELF_MAGIC.length);
  let length: number;
  let fd: number | undefined;
  try {
    fd = openSync(file, fsConstants.O_RDONLY | fsConstants.O_NONBLOCK);
    length = readSync(fd, head, 0, head.length, 0);
  } catch {
    return;
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
  const start = head.subarray(0, length);
  if (start.equals(ELF_MAGIC) || start.subarray(0, SHEBANG.length).equals(SHEBANG)) return;
  if (length > 0 && binfmtMiscHandlers()) return;
  throw spawnFailed('ENOEXEC');
}

/** Whether binfmt_misc is enabled with at least one handler registered. */
function binfmtMiscHandlers(): boolean {
  const dir = '/proc/sys/fs/binfmt_misc';
  try {
    if (readFileSync(path.join(dir, 'status'), 'utf8').trim() !== 'enabled') return false;
    return readdirSync(dir).some((name) => name !== 'status' && name !== 'register');
  } catch {
    return false;
  }
}

/** Codex reports a failed spawn with Rust's `io::Error` text alone: `No such file or directory (os error 2)`. */
export function spawnFailed(osCode: string, cause?: unknown): ProcessError {
  return new ProcessError('spawn_failed', errnoText(osCode), { osCode, cause });
}

export function spawnError(err: unknown): ProcessError {
  const osCode = (err as NodeJS.ErrnoException | null)?.code;
  if (typeof osCode === 'string' && errnoText(osCode) !== osCode) return spawnFailed(osCode, err);
  return new ProcessError('spawn_failed', err instanceof Error ? err.message : String(err), { cause: err });
}

/** strerror texts libuv's error map lacks (it has no UV_ENOEXEC). */
const EXTRA_ERRNO_TEXT: Readonly<Record<string, string>> = { ENOEXEC: 'exec format error' };

/** Rust's `io::Error` display for an errno code: `No such file or directory (os error 2)`. */
function errnoText(code: string): string {
  const errno = (osConstants.errno as Record<string, number>)[code];
  const description = errno === undefined ? undefined : (systemErrorText(-errno) ?? EXTRA_ERRNO_TEXT[code]);
  if (errno === undefined || description === undefined) return code;
  return `${description.charAt(0).toUpperCase()}${description.slice(1)} (os error ${errno})`;
}

/**
 * The OS's text for an errno. node:util through process.getBuiltinModule, at use: the harness bundles this
 * module, and an import there would make every harness command load node:util's lazy exports at start.
 */
function systemErrorText(errno: number): string | undefined {
  return process.getBuiltinModule('node:util').getSystemErrorMap().get(errno)?.[1];
}
