/**
 * Plugin manifests inside a skill root, which namespace the skills below them (`<plugin>:<skill>`), read as
 * Codex 0.171.0 reads them for that (CODEX-FINDINGS, capability discovery).
 */
import { basename, join } from 'node:path';
import { readBounded, utf8 } from './bounded-read.js';

/** Where a plugin directory keeps its manifest, in Codex's order of preference. */
export const PLUGIN_MANIFEST_PATHS = [
  '.codex-plugin/plugin.json',
  '.claude-plugin/plugin.json',
  '.cursor-plugin/plugin.json',
] as const;
/** The directories holding them, which mark a plugin root in a walk. */
export const PLUGIN_MANIFEST_DIRS: ReadonlySet<string> = new Set(PLUGIN_MANIFEST_PATHS.map((p) => p.split('/')[0]!));

export interface ManifestFile {
  path: string;
  text: string;
}

/**
 * The first manifest of `dir` that is a readable regular file (followed if a symlink), or null. `incomplete`
 * is called for one that exists but cannot be read (over 1 MiB, not UTF-8, an I/O error).
 */
export async function readPluginManifest(dir: string, incomplete: () => void): Promise<ManifestFile | null> {
  for (const relative of PLUGIN_MANIFEST_PATHS) {
    const path = join(dir, relative);
    const read = await readBounded(path, { followLinks: true });
    if (read.kind === 'missing' || read.kind === 'not-a-file') continue;
    if (read.kind !== 'ok') {
      incomplete();
      return null;
    }
    const text = utf8(read.bytes);
    if (text === null) {
      incomplete();
      return null;
    }
    return { path, text };
  }
  return null;
}

/**
 * The namespace a manifest gives: its `name` as written; the plugin directory's name when the name is
 * absent or blank; none when the manifest is not JSON, names twice, or names with a non-string.
 */
export function manifestNamespace(manifest: ManifestFile, pluginDir: string): string | null {
  let value: unknown;
  try {
    value = JSON.parse(manifest.text);
  } catch {
    return null;
  }
  let name: unknown;
  if (Array.isArray(value)) {
    // serde reads a struct from a sequence field by field; `name` is the first.
    name = value.length === 0 ? undefined : value[0];
  } else if (typeof value === 'object' && value !== null) {
    if (topLevelKeyCount(manifest.text, 'name') > 1) return null;
    name = (value as Record<string, unknown>).name;
  } else {
    return null;
  }
  if (name === undefined) return basename(pluginDir);
  if (typeof name !== 'string') return null;
  return name.trim() === '' ? basename(pluginDir) : name;
}

/** How often `key` is a key of the top-level object of the (valid) JSON `text`. */
function topLevelKeyCount(text: string, key: string): number {
  let depth = 0;
  let count = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === '{' || c === '[') depth++;
    else if (c === '}' || c === ']') depth--;
    else if (c === '"') {
      let end = i + 1;
      while (text[end] !== '"') end += text[end] === '\\' ? 2 : 1;
      let next = end + 1;
      while (next < text.length && ' \t\n\r'.includes(text[next]!)) next++;
      if (depth === 1 && text[next] === ':' && JSON.parse(text.slice(i, end + 1)) === key) count++;
      i = end;
    }
  }
  return count;
}
