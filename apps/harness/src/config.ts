/**
 * The harness's configuration file: named contexts (registry URL, environment, API key file, …) and the
 * one in use, as kubectl keeps clusters. TOML at `$TETHER_CONFIG`, else `$XDG_CONFIG_HOME/tether/config.toml`,
 * else `~/.config/tether/config.toml`:
 *
 *     current-context = "dev"
 *
 *     [contexts.dev]
 *     registry = "https://registry.example.com"
 *     environment = "dev-1"
 *     api-key-file = "/home/me/.config/tether/dev.key"
 *
 * The file holds paths, never keys. It is read strictly (an unknown key is an error naming it, so a typo
 * is not silently ignored) and written atomically (a temporary file in the same directory, mode 0600,
 * renamed over it).
 */
import { randomBytes } from 'node:crypto';
import {
  chmodSync,
  closeSync,
  fstatSync,
  fsyncSync,
  mkdirSync,
  openSync,
  readSync,
  renameSync,
  rmSync,
  writeSync,
} from 'node:fs';
import { homedir } from 'node:os';
import { dirname, isAbsolute, join, resolve } from 'node:path';
import { TetherError } from '@tether/client';
import { parse, stringify } from 'smol-toml';

/** Where the file is, from the environment: TETHER_CONFIG, else XDG_CONFIG_HOME, else ~/.config. */
export function configPath(env: NodeJS.ProcessEnv): string {
  if (env.TETHER_CONFIG) return resolve(env.TETHER_CONFIG);
  const base =
    env.XDG_CONFIG_HOME && isAbsolute(env.XDG_CONFIG_HOME) ? env.XDG_CONFIG_HOME : join(home(env), '.config');
  return join(base, 'tether', 'config.toml');
}

function home(env: NodeJS.ProcessEnv): string {
  return env.HOME || homedir();
}

/** One named way to reach an environment. Every field is optional; flags and variables override each. */
export interface Context {
  registry?: string;
  environment?: string;
  /** Absolute path of a file holding the harness API key (checked like ssh checks a private key). */
  apiKeyFile?: string;
  /** Absolute path of the executor public key to pin. */
  executorKey?: string;
  /** An executor's WebSocket, instead of registry + environment. */
  url?: string;
}

export interface Config {
  currentContext?: string;
  contexts: Record<string, Context>;
}

/** The file's key for each Context field (kebab-case, as the flags are spelled). */
const CONTEXT_KEYS = {
  registry: 'registry',
  environment: 'environment',
  apiKeyFile: 'api-key-file',
  executorKey: 'executor-key',
  url: 'url',
} as const satisfies Record<keyof Context, string>;
const FILE_KEYS = new Map<string, keyof Context>(
  Object.entries(CONTEXT_KEYS).map(([field, key]) => [key, field as keyof Context]),
);
/** Fields that name files: `~/` is expanded and relative paths are refused. */
const PATH_FIELDS: ReadonlySet<keyof Context> = new Set(['apiKeyFile', 'executorKey']);

/** A config larger than this is refused (it holds a few lines per context). */
export const MAX_CONFIG_BYTES = 1024 * 1024;
/** Most contexts one file may hold. */
export const MAX_CONTEXTS = 1000;
const MAX_VALUE_CHARS = 4096;
const CONTEXT_NAME = /^[A-Za-z0-9][A-Za-z0-9_.@:-]{0,127}$/;

export function checkContextName(name: string): string {
  if (!CONTEXT_NAME.test(name)) {
    throw new TetherError(
      'invalid_argument',
      `bad context name ${JSON.stringify(name)}: letters, digits and _ . @ : - (1-128 characters, starting with a letter or digit)`,
    );
  }
  return name;
}

const bad = (file: string, what: string) => new TetherError('invalid_argument', `${file}: ${what}`);

/** Reads the file; a missing file is an empty config. */
export function loadConfig(file: string): Config {
  const text = readBounded(file, MAX_CONFIG_BYTES, 'config file');
  if (text === null) return { contexts: {} };
  let data: Record<string, unknown>;
  try {
    data = parse(text) as Record<string, unknown>;
  } catch (err) {
    throw bad(file, `not valid TOML: ${(err as Error).message.split('\n')[0]}`);
  }
  return decodeConfig(file, data);
}

function decodeConfig(file: string, data: Record<string, unknown>): Config {
  const config: Config = { contexts: {} };
  for (const [key, value] of Object.entries(data)) {
    if (key === 'current-context') {
      if (typeof value !== 'string') throw bad(file, 'current-context must be a string');
      config.currentContext = value;
    } else if (key === 'contexts') {
      if (!isTable(value)) throw bad(file, '[contexts] must be a table of tables');
      const names = Object.keys(value);
      if (names.length > MAX_CONTEXTS) throw bad(file, `more than ${MAX_CONTEXTS} contexts`);
      for (const name of names) config.contexts[name] = decodeContext(file, name, value[name]);
    } else {
      throw bad(file, `unknown key ${JSON.stringify(key)} (expected current-context and [contexts.NAME])`);
    }
  }
  return config;
}

function decodeContext(file: string, name: string, value: unknown): Context {
  if (!CONTEXT_NAME.test(name)) throw bad(file, `bad context name ${JSON.stringify(name)}`);
  if (!isTable(value)) throw bad(file, `contexts.${name} must be a table`);
  const context: Context = {};
  for (const [key, item] of Object.entries(value)) {
    const field = FILE_KEYS.get(key);
    if (field === undefined) {
      throw bad(
        file,
        `unknown key ${JSON.stringify(key)} in contexts.${name} (known: ${Object.values(CONTEXT_KEYS).join(', ')})`,
      );
    }
    if (typeof item !== 'string' || item === '' || item.length > MAX_VALUE_CHARS) {
      throw bad(file, `contexts.${name}.${key} must be a non-empty string`);
    }
    context[field] = item;
  }
  return context;
}

function isTable(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value) && !(value instanceof Date);
}

/** The file's text for `config`: keys in a fixed order, empty fields left out. */
export function formatConfig(config: Config): string {
  const data: Record<string, unknown> = {};
  if (config.currentContext !== undefined) data['current-context'] = config.currentContext;
  const contexts: Record<string, Record<string, string>> = {};
  for (const [name, context] of Object.entries(config.contexts)) {
    const table: Record<string, string> = {};
    for (const [field, key] of Object.entries(CONTEXT_KEYS)) {
      const value = context[field as keyof Context];
      if (value !== undefined) table[key] = value;
    }
    contexts[name] = table;
  }
  data.contexts = contexts;
  return `${stringify(data)}\n`;
}

/**
 * Writes atomically: a new file (0600, in the same directory, so the rename stays on one filesystem) is
 * written and synced, then renamed over the old one; a reader sees the old file or the new, never part.
 * The directory is made 0700 when it does not exist.
 */
export function saveConfig(file: string, config: Config): void {
  mkdirSync(dirname(file), { recursive: true, mode: 0o700 });
  const temp = `${file}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`;
  const fd = openSync(temp, 'wx', 0o600);
  try {
    const bytes = Buffer.from(formatConfig(config));
    let offset = 0;
    while (offset < bytes.length) offset += writeSync(fd, bytes, offset);
    fsyncSync(fd);
    closeSync(fd);
    // The umask cannot widen 0600, but a file made by an older version might be wider: not this one.
    chmodSync(temp, 0o600);
    renameSync(temp, file);
  } catch (err) {
    try {
      closeSync(fd);
    } catch {
      // Closed already.
    }
    rmSync(temp, { force: true });
    throw err;
  }
}

/** The context named by `--context` (or its variable), else the current one; null when there is none. */
export function selectContext(
  config: Config,
  requested: string | undefined,
  file: string,
  env: NodeJS.ProcessEnv,
): { name: string; context: Context } | null {
  const name = requested ?? config.currentContext;
  if (name === undefined) return null;
  const context = config.contexts[name];
  if (context === undefined) {
    const known = Object.keys(config.contexts);
    throw new TetherError(
      'invalid_argument',
      `no context ${JSON.stringify(name)} in ${file}${known.length > 0 ? ` (known: ${known.slice(0, 20).join(', ')})` : ''}`,
    );
  }
  return { name, context: expandPaths(context, file, home(env)) };
}

/** `~/` in a path field means the home directory; any other relative path is refused. */
function expandPaths(context: Context, file: string, homeDir: string): Context {
  const expanded: Context = { ...context };
  for (const field of PATH_FIELDS) {
    const value = context[field];
    if (value === undefined) continue;
    const path = value.startsWith('~/') ? join(homeDir, value.slice(2)) : value;
    if (!isAbsolute(path))
      throw bad(file, `${CONTEXT_KEYS[field]} must be an absolute path (or ~/…), got ${JSON.stringify(value)}`);
    expanded[field] = path;
  }
  return expanded;
}

/** The largest API key file read (a key is a few dozen characters). */
const MAX_KEY_FILE_BYTES = 4096;

/**
 * The API key in `file`, refused like ssh refuses a private key others may read: the file must belong to
 * this user and have no group or world permission bits (chmod 600). The first line, trimmed, is the key.
 */
export function readApiKeyFile(file: string): string {
  let fd: number;
  try {
    fd = openSync(file, 'r');
  } catch (err) {
    throw new TetherError('invalid_argument', `cannot read the API key file ${file}: ${(err as Error).message}`);
  }
  try {
    const stat = fstatSync(fd);
    if (!stat.isFile()) throw new TetherError('invalid_argument', `the API key file ${file} is not a regular file`);
    const uid = process.getuid?.();
    if (uid !== undefined && stat.uid !== uid) {
      throw new TetherError('invalid_argument', `the API key file ${file} belongs to another user (uid ${stat.uid})`);
    }
    if ((stat.mode & 0o077) !== 0) {
      const mode = (stat.mode & 0o777).toString(8).padStart(4, '0');
      throw new TetherError(
        'invalid_argument',
        `permissions ${mode} for the API key file ${file} are too open: others must not be able to read it (chmod 600 ${file})`,
      );
    }
    const buffer = Buffer.alloc(MAX_KEY_FILE_BYTES + 1);
    let length = 0;
    for (;;) {
      const read = readSync(fd, buffer, length, buffer.length - length, null);
      if (read === 0) break;
      length += read;
      if (length > MAX_KEY_FILE_BYTES) {
        throw new TetherError('invalid_argument', `the API key file ${file} is over ${MAX_KEY_FILE_BYTES} bytes`);
      }
    }
    const key = buffer.subarray(0, length).toString('utf8').split('\n')[0]!.trim();
    if (key === '') throw new TetherError('invalid_argument', `the API key file ${file} is empty`);
    return key;
  } finally {
    closeSync(fd);
  }
}

/** A file's text up to `max` bytes, null when it does not exist; larger is an error. */
function readBounded(file: string, max: number, what: string): string | null {
  let fd: number;
  try {
    fd = openSync(file, 'r');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw new TetherError('invalid_argument', `cannot read the ${what} ${file}: ${(err as Error).message}`);
  }
  try {
    const size = fstatSync(fd).size;
    if (size > max) throw new TetherError('invalid_argument', `the ${what} ${file} is over ${max} bytes`);
    const buffer = Buffer.alloc(size);
    let length = 0;
    while (length < size) {
      const read = readSync(fd, buffer, length, size - length, null);
      if (read === 0) break;
      length += read;
    }
    return buffer.subarray(0, length).toString('utf8');
  } finally {
    closeSync(fd);
  }
}
