import { closeSync, constants, fstatSync, openSync, readSync } from 'node:fs';

/**
 * Where remote mode's registry API key comes from. Environment variables are the Codex way, but the
 * kernel keeps a process's initial environment readable at `/proc/<pid>/environ` for as long as it runs
 * (deleting it from `process.env` changes nothing there), and every same-user child can read it. A file
 * (`--api-key-file`, mode 0600) or an inherited descriptor (`--api-key-fd`) keeps it out of the
 * environment; a key given in the environment is handed over on a pipe by re-executing (key-handover.ts).
 */

/** The executor's key by value: the scheme's name (`TETHER_EXECUTOR_…`). */
export const API_KEY_ENV = 'TETHER_EXECUTOR_API_KEY';
/** Codex's name for the key, which `codex exec-server --remote` reads: accepted as it is. */
export const CODEX_API_KEY_ENV = 'CODEX_API_KEY';
/**
 * The older name, deprecated: the harness reads the same variable as *its* key, so a shell set up for the
 * harness would hand the executor a harness key. Still read, last, with a warning naming API_KEY_ENV.
 */
export const DEPRECATED_API_KEY_ENV = 'TETHER_API_KEY';
/** Environment variables holding the key, in order of preference. */
export const API_KEY_ENV_VARS = [API_KEY_ENV, CODEX_API_KEY_ENV, DEPRECATED_API_KEY_ENV] as const;
/**
 * The older environment form of `--api-key-file` (a path, not a secret), deprecated for the same reason (the
 * scheme's `TETHER_EXECUTOR_API_KEY_FILE` is read as the flag). Read after every current name.
 */
export const API_KEY_FILE_ENV = 'TETHER_API_KEY_FILE';
/** Larger than any API key; bounds what a wrong file or descriptor can make us read. */
export const MAX_API_KEY_BYTES = 16 * 1024;

export class ApiKeyError extends Error {
  override readonly name = 'ApiKeyError';
}

export type ApiKeySource =
  | { kind: 'file'; path: string; flag: '--api-key-file' | typeof API_KEY_FILE_ENV }
  | { kind: 'fd'; fd: number }
  | { kind: 'env'; variable: string };

export interface ApiKeyFlags {
  apiKeyFile?: string;
  apiKeyFd?: number;
}

/** The API key variables that are set (non-empty) in `env`. */
export function apiKeyVariablesIn(env: NodeJS.ProcessEnv): string[] {
  return API_KEY_ENV_VARS.filter((name) => (env[name] ?? '').trim() !== '');
}

/**
 * Which source the key comes from: `--api-key-fd`, `--api-key-file` (or its variable), TETHER_EXECUTOR_API_KEY,
 * CODEX_API_KEY, then the deprecated TETHER_API_KEY_FILE and TETHER_API_KEY. More than one flag is an error
 * (which one would win is not obvious).
 */
export function chooseApiKeySource(flags: ApiKeyFlags, env: NodeJS.ProcessEnv): ApiKeySource | null {
  if (flags.apiKeyFd !== undefined && flags.apiKeyFile !== undefined) {
    throw new ApiKeyError('give the API key one way: --api-key-file or --api-key-fd, not both');
  }
  if (flags.apiKeyFd !== undefined) return { kind: 'fd', fd: flags.apiKeyFd };
  if (flags.apiKeyFile !== undefined) return { kind: 'file', path: flags.apiKeyFile, flag: '--api-key-file' };
  const current = apiKeyVariablesIn(env).find((name) => name !== DEPRECATED_API_KEY_ENV);
  if (current) return { kind: 'env', variable: current };
  const fromEnv = (env[API_KEY_FILE_ENV] ?? '').trim();
  if (fromEnv !== '') return { kind: 'file', path: fromEnv, flag: API_KEY_FILE_ENV };
  return apiKeyVariablesIn(env).includes(DEPRECATED_API_KEY_ENV)
    ? { kind: 'env', variable: DEPRECATED_API_KEY_ENV }
    : null;
}

/** Reads the key from its source; throws ApiKeyError with what to fix. */
export function readApiKey(source: ApiKeySource, env: NodeJS.ProcessEnv): string {
  switch (source.kind) {
    case 'env':
      return checkKey((env[source.variable] ?? '').trim(), source.variable);
    case 'file':
      return readApiKeyFile(source.path, source.flag);
    case 'fd':
      return readApiKeyFd(source.fd);
  }
}

/**
 * A key file must be a regular file that neither group nor others can read or write (0600, 0400): a key
 * that other users can read is already leaked, and saying so beats using it. One trailing newline (what
 * `echo` and editors leave) is dropped. The mode is checked on the opened descriptor, so a file swapped
 * after the check is not the one read.
 */
export function readApiKeyFile(path: string, flag = '--api-key-file'): string {
  let fd: number;
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK);
  } catch (err) {
    throw new ApiKeyError(`${flag} ${path}: cannot open it: ${(err as Error).message}`);
  }
  try {
    const stat = fstatSync(fd);
    if (!stat.isFile()) throw new ApiKeyError(`${flag} ${path}: not a regular file`);
    if ((stat.mode & 0o077) !== 0) {
      const mode = (stat.mode & 0o777).toString(8).padStart(4, '0');
      throw new ApiKeyError(
        `${flag} ${path}: mode ${mode} lets group or others read it; run \`chmod 600 ${path}\` (and consider the key leaked if others could read it)`,
      );
    }
    return checkKey(stripNewline(readToEnd(fd, `${flag} ${path}`)), `${flag} ${path}`);
  } finally {
    closeSync(fd);
  }
}

/** Reads the key from an inherited descriptor to EOF, then closes it (no child inherits it). */
export function readApiKeyFd(fd: number): string {
  const what = `--api-key-fd ${fd}`;
  if (fd <= 2) throw new ApiKeyError(`${what}: descriptors 0-2 are stdio; pass the key on another one`);
  try {
    return checkKey(stripNewline(readToEnd(fd, what)), what);
  } finally {
    try {
      closeSync(fd);
    } catch {
      // Not open at all: readToEnd already said so.
    }
  }
}

function readToEnd(fd: number, what: string): string {
  const buffer = Buffer.alloc(MAX_API_KEY_BYTES + 1);
  let filled = 0;
  for (;;) {
    let read: number;
    try {
      read = readSync(fd, buffer, filled, buffer.length - filled, null);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'EAGAIN') throw new ApiKeyError(`${what}: no data to read (nothing has written the key yet)`);
      if (code === 'EBADF') throw new ApiKeyError(`${what}: not an open file descriptor`);
      throw new ApiKeyError(`${what}: cannot read it: ${(err as Error).message}`);
    }
    if (read === 0) break;
    filled += read;
    if (filled > MAX_API_KEY_BYTES) throw new ApiKeyError(`${what}: longer than ${MAX_API_KEY_BYTES} bytes`);
  }
  return buffer.subarray(0, filled).toString('utf8');
}

function stripNewline(text: string): string {
  return text.replace(/\r?\n$/, '');
}

/** A bearer token is one line of printable characters; anything else is a wrong file, not a key. */
function checkKey(key: string, where: string): string {
  if (key === '') throw new ApiKeyError(`${where}: the API key is empty`);
  // Every source is held to the same bound: a key from the environment is handed over on a pipe that no one
  // reads until the re-exec, so one over the pipe's capacity would block the handover for ever.
  if (Buffer.byteLength(key) > MAX_API_KEY_BYTES) {
    throw new ApiKeyError(`${where}: the API key is longer than ${MAX_API_KEY_BYTES} bytes`);
  }
  if (/[\s\u0000-\u001f\u007f]/.test(key)) {
    throw new ApiKeyError(`${where}: the API key contains whitespace or control characters (one line expected)`);
  }
  return key;
}
