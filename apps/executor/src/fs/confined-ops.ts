/**
 * The `fs/*` operations a restricted sandbox runs inside bubblewrap (sandbox-helper.ts), by name, on plain
 * JSON arguments: the same functions the executor runs directly, so a confined call answers exactly as an
 * unconfined one would where the policy allows it. `open` opens a path as `fs/open` would and hands the open
 * file to the executor over the socket at `PASS_FD` (confined.ts), so the executor never opens the path.
 */
import { constants as fsConstants } from 'node:fs';
import { open } from 'node:fs/promises';
import { type FsOpenMode, type FsWalkOptions, RpcError } from '@tether/exec-protocol';
import { loadNativePipe, nativePipeUnavailableReason } from '@tether/native-pipe';
import { discoverInstalled } from '../capabilities/discover-plugins.js';
import { discoverCapabilityRoot } from '../capabilities/discover-roots.js';
import type { SkillRoot } from '../capabilities/discover-skills.js';
import { setMetadata, unixMetadata } from './batch.js';
import { isFifo, notAFile } from './file-kind.js';
import {
  canonicalize,
  copy,
  createDirectory,
  metadata,
  readDirectory,
  readWholeFile,
  remove,
  writeWholeFile,
} from './operations.js';
import { osCall } from './os-error.js';
import { walk } from './walk.js';

export interface ConfinedOps {
  readFile: { path: string; limit: number };
  writeFile: { path: string; dataBase64: string };
  createDirectory: { path: string; recursive: boolean };
  getMetadata: { path: string; unix: boolean };
  canonicalize: { path: string };
  readDirectory: { path: string };
  remove: { path: string; recursive: boolean; force: boolean };
  copy: { source: string; destination: string; recursive: boolean };
  walk: { path: string; options: FsWalkOptions };
  setMetadata: { path: string; change: Parameters<typeof setMetadata>[1] };
  open: { path: string; mode: FsOpenMode };
  discoverSkills: { roots: SkillRoot[]; pluginCache: string | null };
  discoverRoot: { id: string; uri: string; path: string | null; problem: string };
}
export type ConfinedOp = keyof ConfinedOps;

const OPS: { [K in ConfinedOp]: (args: ConfinedOps[K]) => Promise<unknown> } = {
  readFile: async ({ path, limit }) => ({ dataBase64: (await readWholeFile(path, limit)).toString('base64') }),
  writeFile: async ({ path, dataBase64 }) => {
    await writeWholeFile(path, Buffer.from(dataBase64, 'base64'));
    return {};
  },
  createDirectory: async ({ path, recursive }) => {
    await createDirectory(path, recursive);
    return {};
  },
  getMetadata: async ({ path, unix }) => {
    const answer = await metadata(path);
    if (!unix) return answer;
    const { mode, accessedAtMs } = await unixMetadata(path);
    return { ...answer, mode, accessedAtMs };
  },
  canonicalize: async ({ path }) => ({ path: await canonicalize(path) }),
  readDirectory: async ({ path }) => ({ entries: await readDirectory(path) }),
  remove: async ({ path, recursive, force }) => {
    await remove(path, recursive, force);
    return {};
  },
  copy: async ({ source, destination, recursive }) => {
    await copy(source, destination, recursive);
    return {};
  },
  walk: ({ path, options }) => walk(path, options),
  setMetadata: async ({ path, change }) => {
    await setMetadata(path, change);
    return {};
  },
  open: ({ path, mode }) => openAndPass(path, mode),
  discoverSkills: ({ roots, pluginCache }) => discoverInstalled(roots, pluginCache),
  discoverRoot: ({ id, uri, path, problem }) => discoverCapabilityRoot(id, uri, path, problem),
};

export function runConfinedOp<K extends ConfinedOp>(op: K, args: ConfinedOps[K]): Promise<unknown> {
  const run = Object.hasOwn(OPS, op) ? (OPS[op] as (args: ConfinedOps[K]) => Promise<unknown>) : undefined;
  if (typeof run !== 'function')
    return Promise.reject(RpcError.invalidRequest(`unknown confined operation ${String(op)}`));
  return run(args);
}

/** The helper's descriptor of the socket `open` hands its file back through (confined.ts puts it there). */
export const PASS_FD = 4;

/**
 * Opens `path` as `fs/open` would in `mode` (a `replace` truncates and creates it here, inside the sandbox) and
 * sends the open file over `PASS_FD`. Non-blocking, so a FIFO put in the path's place cannot hold the helper;
 * only a regular file is sent.
 */
async function openAndPass(path: string, mode: FsOpenMode): Promise<Record<string, never>> {
  const native = loadNativePipe();
  if (native === null) {
    throw RpcError.internal(`the fs sandbox helper cannot pass a descriptor: ${nativePipeUnavailableReason()}`);
  }
  if (mode !== 'read' && (await isFifo(path))) throw notAFile(path);
  const access =
    mode === 'read'
      ? fsConstants.O_RDONLY
      : mode === 'replace'
        ? fsConstants.O_WRONLY | fsConstants.O_CREAT | fsConstants.O_TRUNC
        : fsConstants.O_WRONLY | fsConstants.O_CREAT;
  const file = await osCall(() => open(path, access | fsConstants.O_NONBLOCK, 0o666));
  try {
    if (!(await osCall(() => file.stat())).isFile()) throw notAFile(path);
    native.sendFd(PASS_FD, file.fd);
    return {};
  } finally {
    await file.close();
  }
}
