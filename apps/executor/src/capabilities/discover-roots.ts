/**
 * `capabilityRoots/discoverV1` for one root, as Codex 0.171.0 answers it (CODEX-FINDINGS, capability
 * discovery): the files a client needs to know the root's plugin and skills, materialized unparsed. The root's
 * plugin manifest with its MCP and apps configs, every plugin manifest found below it (they namespace nested
 * skills), and every SKILL.md with its `agents/openai.yaml`; in that order against a 16 MiB budget (Bundle),
 * each file at most 1 MiB. Problems are the root's warnings; only a root that cannot be inspected is an `error`.
 * Runs in the executor, or in the fs sandbox helper under the root's restricting sandbox (confined-ops.ts).
 */
import { stat } from 'node:fs/promises';
import { basename, dirname, join, resolve } from 'node:path';
import {
  type CapabilityRootDiscovery,
  type CapabilityTextFile,
  fileUriToPath,
  pathToFileUri,
} from '@tether/exec-protocol';
import { osErrorText } from '../fs/os-error.js';
import { walk } from '../fs/walk.js';
import { MAX_CAPABILITY_FILE_BYTES, readBounded, SKILL_WALK } from './bounded-read.js';
import { PLUGIN_MANIFEST_DIRS, PLUGIN_MANIFEST_PATHS } from './plugin-manifest.js';

/** Bytes of text one root's answer may carry. */
export const ROOT_BUNDLE_BYTES = 16 * 1024 * 1024;

const NOT_THERE = new Set(['ENOENT', 'ENOTDIR', 'ELOOP']);
const osText = (err: unknown) => osErrorText(err) ?? String((err as Error).message);

/**
 * The root at native `path`, answered under the request's `id` and `uri` (echoed as given). `path` null: the
 * URI is not one this host can use (`problem` says why).
 */
export async function discoverCapabilityRoot(
  id: string,
  uri: string,
  nativePath: string | null,
  problem = '',
): Promise<CapabilityRootDiscovery> {
  const answer: CapabilityRootDiscovery = {
    id,
    path: uri,
    plugin: null,
    skills: [],
    namespaceManifests: [],
    warnings: [],
    error: null,
  };
  if (nativePath === null) return { ...answer, error: `failed to inspect capability root ${uri}: ${problem}` };
  const path = resolve(nativePath);
  try {
    if (!(await stat(path)).isDirectory()) return { ...answer, error: `capability root ${uri} is not a directory` };
  } catch (err) {
    return { ...answer, error: `failed to inspect capability root ${uri}: ${osText(err)}` };
  }
  const warnings = answer.warnings;
  const walked = await walk(path, SKILL_WALK).catch((err: unknown) => {
    warnings.push(`failed to scan capability path ${uri}: ${osText(err)}`);
    return null;
  });
  if (walked === null) return answer;
  for (const error of walked.errors) warnings.push(`failed to scan capability path ${error.path}: ${error.message}`);
  if (walked.truncated) warnings.push(`capability scan reached its traversal limit (root: ${uri})`);

  const skillFiles: string[] = [];
  const pluginDirs = new Set<string>([path]);
  for (const entry of walked.entries) {
    const entryPath = fileUriToPath(entry.path);
    if (entry.kind === 'file' && basename(entryPath) === 'SKILL.md') skillFiles.push(entry.path);
    if (entry.kind === 'directory' && PLUGIN_MANIFEST_DIRS.has(basename(entryPath))) {
      pluginDirs.add(dirname(entryPath));
    }
  }
  skillFiles.sort(byString);

  const bundle = new Bundle(warnings);
  const manifest = await bundle.manifest(path);
  if (manifest !== null) {
    answer.plugin = {
      manifest,
      mcpConfig: await bundle.declared(path, manifest, 'mcpServers', '.mcp.json'),
      appsConfig: await bundle.declared(path, manifest, 'apps', '.app.json'),
    };
  }
  const namespaceRoots = [...pluginDirs].sort((a, b) => byString(pathToFileUri(a), pathToFileUri(b)));
  for (const dir of namespaceRoots) {
    const found = await bundle.manifest(dir);
    if (found !== null) answer.namespaceManifests.push(found);
  }
  for (const skillUri of skillFiles) {
    const skillPath = fileUriToPath(skillUri);
    const instructions = await bundle.file(skillPath, { inspect: false, followLinks: false });
    if (instructions === null) continue;
    const metadata = await bundle.file(join(dirname(skillPath), 'agents', 'openai.yaml'), { inspect: true });
    answer.skills.push({ instructions, metadata });
  }
  return answer;
}

function byString(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/**
 * The files of one root's answer, against its budget: a file that would pass it is left out (with one
 * warning for the root) and smaller later ones still go in; a file read twice (the root's manifest, as its
 * plugin's and as a namespace manifest) is read once. Warnings for what cannot be read.
 */
export class Bundle {
  private left = ROOT_BUNDLE_BYTES;
  private full = false;
  private readonly read = new Map<string, CapabilityTextFile>();

  constructor(private readonly warnings: string[]) {}

  /**
   * The text of the regular file at `path` (followed if a symlink), or null: absent, not a file, or (with a
   * warning) too large, unreadable or not UTF-8. `inspect`: a stat that fails other than for absence warns.
   * `followLinks: false`: a symlink reads as absent.
   */
  async file(path: string, options: { inspect: boolean; followLinks?: boolean }): Promise<CapabilityTextFile | null> {
    const uri = pathToFileUri(path);
    if (options.inspect) {
      try {
        if (!(await stat(path)).isFile()) return null;
      } catch (err) {
        if (!NOT_THERE.has((err as NodeJS.ErrnoException).code ?? '')) {
          this.warnings.push(`failed to inspect capability file ${uri}: ${osText(err)}`);
        }
        return null;
      }
    }
    const cached = this.read.get(path);
    if (cached) return cached;
    const read = await readBounded(path, { budget: this.left, followLinks: options.followLinks ?? true });
    switch (read.kind) {
      case 'missing':
      case 'not-a-file':
        return null;
      case 'too-large':
        this.warnings.push(`capability file ${uri} exceeds the ${MAX_CAPABILITY_FILE_BYTES}-byte limit`);
        return null;
      case 'over-budget':
        if (!this.full) this.warnings.push(`capability root bundle exceeds the ${ROOT_BUNDLE_BYTES}-byte limit`);
        this.full = true;
        return null;
      case 'failed':
        this.warnings.push(`failed to read capability file ${uri}: ${osText(read.error)}`);
        return null;
      case 'ok': {
        const problem = utf8Problem(read.bytes);
        if (problem !== null) {
          this.warnings.push(`capability file ${uri} is not UTF-8: ${problem}`);
          return null;
        }
        this.left -= read.bytes.length;
        const file = { path: uri, contents: read.bytes.toString('utf8') };
        this.read.set(path, file);
        return file;
      }
    }
  }

  /** Which manifest path of a plugin directory is a file (null: none), inspected once per directory. */
  private readonly manifestPaths = new Map<string, string | null>();

  /** The first plugin manifest of `dir` that is a file (read each time, inspected once). */
  async manifest(dir: string): Promise<CapabilityTextFile | null> {
    if (!this.manifestPaths.has(dir)) this.manifestPaths.set(dir, await this.inspectManifests(dir));
    const path = this.manifestPaths.get(dir);
    return path ? this.file(path, { inspect: false }) : null;
  }

  private async inspectManifests(dir: string): Promise<string | null> {
    for (const relative of PLUGIN_MANIFEST_PATHS) {
      const path = join(dir, relative);
      try {
        if ((await stat(path)).isFile()) return path;
      } catch (err) {
        if (!NOT_THERE.has((err as NodeJS.ErrnoException).code ?? '')) {
          this.warnings.push(`failed to inspect capability file ${pathToFileUri(path)}: ${osText(err)}`);
        }
      }
    }
    return null;
  }

  /**
   * The config a manifest declares in `field`: a `./` path below the plugin root (inline MCP servers: none);
   * when the field is absent, not usable, or refused (with a warning), the conventional `fallback`.
   */
  async declared(
    root: string,
    manifest: CapabilityTextFile,
    field: 'mcpServers' | 'apps',
    fallback: string,
  ): Promise<CapabilityTextFile | null> {
    let value: unknown;
    try {
      value = (JSON.parse(manifest.contents) as Record<string, unknown> | null)?.[field];
    } catch {
      value = undefined;
    }
    // Inline MCP servers live in the manifest itself (an inline `apps` is not read: the fallback applies).
    if (field === 'mcpServers' && typeof value === 'object' && value !== null && !Array.isArray(value)) return null;
    if (typeof value === 'string') {
      const refuse = (why: string) => this.warnings.push(`ignoring ${field} in ${manifest.path}: ${why}`);
      const parts = value
        .slice(2)
        .split('/')
        .filter((part) => part !== '' && part !== '.');
      if (!value.startsWith('./')) refuse('path must start with `./`');
      else if (parts.length === 0 || parts.includes('..')) refuse('path must remain below the capability root');
      else return this.file(join(root, ...parts), { inspect: true });
    }
    return this.file(join(root, fallback), { inspect: true });
  }
}

/** Why `bytes` are not UTF-8, worded as Rust's `Utf8Error`; null when they are. */
export function utf8Problem(bytes: Uint8Array): string | null {
  let i = 0;
  while (i < bytes.length) {
    const first = bytes[i]!;
    if (first < 0x80) {
      i++;
      continue;
    }
    const width =
      first >= 0xc2 && first <= 0xdf ? 2 : first >= 0xe0 && first <= 0xef ? 3 : first >= 0xf0 && first <= 0xf4 ? 4 : 0;
    if (width === 0) return `invalid utf-8 sequence of 1 bytes from index ${i}`;
    // The second byte's range depends on the first (no overlongs, surrogates or code points past U+10FFFF).
    const [low, high] =
      first === 0xe0
        ? [0xa0, 0xbf]
        : first === 0xed
          ? [0x80, 0x9f]
          : first === 0xf0
            ? [0x90, 0xbf]
            : first === 0xf4
              ? [0x80, 0x8f]
              : [0x80, 0xbf];
    for (let k = 1; k < width; k++) {
      const next = bytes[i + k];
      if (next === undefined) return `incomplete utf-8 byte sequence from index ${i}`;
      const ok = k === 1 ? next >= low && next <= high : next >= 0x80 && next <= 0xbf;
      if (!ok) return `invalid utf-8 sequence of ${k} bytes from index ${i}`;
    }
    i += width;
  }
  return null;
}
