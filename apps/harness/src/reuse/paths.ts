import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { sha256 } from '@noble/hashes/sha2.js';
import { TetherError } from '@tether/client';
import { ownershipProblem, runtimeDir, WARM_SOCKET_SUFFIX } from './runtime-dir.js';

/** What a master connects to; its socket is named after this (the API key only as a hash). */
export interface MasterKey {
  registryUrl: string;
  environmentId: string;
  apiKey: string;
}

/** Unix socket paths are at most 107 bytes on Linux (sun_path): longer runtime dirs are refused. */
const MAX_SOCKET_PATH_BYTES = 107;

/**
 * SHA-256 of UTF-8 text, in hex. @noble/hashes rather than node:crypto: a command served by a master needs no
 * other cryptography, and loading node:crypto cost it about 10 ms of its start (Node 24); hashing these few
 * bytes in JavaScript takes microseconds.
 */
function sha256Hex(text: string): string {
  return Buffer.from(sha256(Buffer.from(text, 'utf8'))).toString('hex');
}

/**
 * The socket (and log) name of the master for `key`: a hash of the registry URL, environment and the
 * API key's own hash, so neither the key nor a credential derived from it is ever part of a path.
 */
export function masterName(key: MasterKey): string {
  const keyHash = sha256Hex(key.apiKey);
  let registry = key.registryUrl;
  try {
    registry = new URL(key.registryUrl).href;
  } catch {
    // checked elsewhere; an unparsable URL never gets this far
  }
  return sha256Hex(JSON.stringify(['tether-master/1', registry, key.environmentId, keyHash])).slice(0, 24);
}

export interface MasterPaths {
  dir: string;
  socket: string;
  log: string;
  /** Where the master's warm process listens (src/warm.ts). */
  warm: string;
}

export function masterPaths(key: MasterKey, env: NodeJS.ProcessEnv): MasterPaths {
  const dir = runtimeDir(env);
  const name = masterName(key);
  const socket = join(dir, `${name}.sock`);
  const warm = join(dir, `${name}${WARM_SOCKET_SUFFIX}`);
  if (Buffer.byteLength(warm) > MAX_SOCKET_PATH_BYTES) {
    throw new TetherError(
      'invalid_argument',
      `the master socket path ${warm} is longer than ${MAX_SOCKET_PATH_BYTES} bytes; use a shorter XDG_RUNTIME_DIR`,
    );
  }
  return { dir, socket, log: join(dir, `${name}.log`), warm };
}

/** Absent → false; this user's private `kind` → true; else a TetherError naming the problem. */
function checkOwned(path: string, kind: 'directory' | 'socket'): boolean {
  let problem: string | null;
  try {
    problem = ownershipProblem(path, kind);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return false;
    throw err;
  }
  if (problem) throw new TetherError('invalid_argument', `not using the master ${kind}: ${problem}`);
  return true;
}

/**
 * Checks the runtime directory: absent → false; this user's with mode 0700 (no group/other bits) → true;
 * anything else (a symbolic link, another owner, open permissions) → a TetherError: a master there could be
 * someone else's, and nothing in it is trusted.
 */
export function checkPrivateDir(dir: string): boolean {
  return checkOwned(dir, 'directory');
}

/** Creates the runtime directory 0700 if it is absent, then checks it as `checkPrivateDir` does. */
export function ensurePrivateDir(dir: string): void {
  if (checkPrivateDir(dir)) return;
  try {
    mkdirSync(dir, { mode: 0o700 });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') {
      throw new TetherError('invalid_argument', `cannot create ${dir}: ${(err as Error).message}`);
    }
  }
  checkPrivateDir(dir);
}

/**
 * Checks a master socket: absent → false; this user's socket, mode 0600 or stricter → true; else a
 * TetherError (not trusted).
 */
export function checkSocket(path: string): boolean {
  return checkOwned(path, 'socket');
}
