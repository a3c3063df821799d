/**
 * The plugins installed in the Codex home's plugin cache (`plugins/cache/<marketplace>/<plugin>/<version>/`),
 * as Codex 0.171.0's `capabilities/discoverV2` lists them (CODEX-FINDINGS, capability discovery): for each
 * plugin its chosen version's manifest, MCP and apps configs and skills (named `<plugin>:<skill>`).
 */
import { readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { type ExecutorPlugin, pathToFileUri } from '@tether/exec-protocol';
import { Bundle } from './discover-roots.js';
import { discoverSkillRoot, type SkillRoot, type SkillsDiscovery, skillEntry } from './discover-skills.js';
import { manifestNamespace, readPluginManifest } from './plugin-manifest.js';
import { rustTrim } from './yaml-fields.js';

/**
 * What `capabilities/discoverV2` finds: the plugins installed in `pluginCache` (null: none) and the skills
 * under `roots`, root by root, each root's sorted by SKILL.md URI.
 */
export async function discoverInstalled(
  roots: readonly SkillRoot[],
  pluginCache: string | null,
): Promise<SkillsDiscovery> {
  const installed =
    pluginCache === null ? { plugins: [], incompleteSources: 0, truncated: false } : await discoverPlugins(pluginCache);
  const out: SkillsDiscovery = {
    plugins: installed.plugins,
    skills: [],
    incompleteSources: installed.incompleteSources,
    pluginCacheTruncated: installed.truncated,
  };
  for (const root of roots) {
    const found = await discoverSkillRoot(root);
    out.skills.push(...found.skills);
    if (found.incomplete) out.incompleteSources++;
  }
  return out;
}

/** Directory entries of the cache looked through at most (marketplaces, plugins and versions together). */
export const MAX_PLUGIN_CACHE_ENTRIES = 20_000;

export async function discoverPlugins(
  cache: string,
): Promise<{ plugins: ExecutorPlugin[]; incompleteSources: number; truncated: boolean }> {
  const plugins: ExecutorPlugin[] = [];
  let incompleteSources = 0;
  let budget = MAX_PLUGIN_CACHE_ENTRIES;
  /** The directories in `dir` (symlinks followed), hidden ones left out unless `hidden`. */
  const directories = async (dir: string, hidden: boolean): Promise<string[] | null> => {
    const names = await readdir(dir).catch(() => []);
    const found: string[] = [];
    for (const name of names.sort()) {
      if (--budget < 0) return null;
      if (!hidden && name.startsWith('.')) continue;
      if (
        await stat(join(dir, name)).then(
          (info) => info.isDirectory(),
          () => false,
        )
      )
        found.push(name);
    }
    return found;
  };
  const marketplaces = await directories(cache, false);
  if (marketplaces === null) return { plugins, incompleteSources, truncated: true };
  for (const marketplace of marketplaces) {
    const names = await directories(join(cache, marketplace), false);
    if (names === null) return { plugins, incompleteSources, truncated: true };
    for (const name of names) {
      const versions = await directories(join(cache, marketplace, name), true);
      if (versions === null) return { plugins, incompleteSources, truncated: true };
      if (versions.length === 0) continue;
      const version = chooseVersion(versions);
      const plugin = await readPlugin(`${name}@${marketplace}`, version, join(cache, marketplace, name, version));
      if (plugin.incomplete) incompleteSources++;
      if (plugin.plugin !== null) plugins.push(plugin.plugin);
    }
  }
  plugins.sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  return { plugins, incompleteSources, truncated: false };
}

async function readPlugin(
  id: string,
  version: string,
  root: string,
): Promise<{ plugin: ExecutorPlugin | null; incomplete: boolean }> {
  let incomplete = false;
  const manifest = await readPluginManifest(root, () => {
    incomplete = true;
  });
  const namespace = manifest === null ? null : manifestNamespace(manifest, root);
  const display = manifest === null ? undefined : displayName(manifest.text);
  if (manifest === null || namespace === null || display === undefined) return { plugin: null, incomplete: true };
  const warnings: string[] = [];
  const bundle = new Bundle(warnings);
  const file = { path: pathToFileUri(manifest.path), contents: manifest.text };
  const files = {
    manifest: file,
    mcpConfig: await bundle.declared(root, file, 'mcpServers', '.mcp.json'),
    appsConfig: await bundle.declared(root, file, 'apps', '.app.json'),
  };
  const found = await discoverSkillRoot({ id, path: root });
  return {
    plugin: {
      id,
      displayName: display ?? namespace,
      remotePluginId: null,
      version,
      root: pathToFileUri(root),
      files,
      skills: found.skills.map((skill) => skillEntry(skill, true)),
    },
    incomplete: incomplete || found.incomplete || warnings.length > 0,
  };
}

/**
 * The manifest's `interface.displayName`, trimmed; null when it has none; undefined when the manifest is
 * not one Codex reads as a plugin's (not a JSON object, or an `interface` or `displayName` of another type).
 */
function displayName(text: string): string | null | undefined {
  let manifest: unknown;
  try {
    manifest = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (typeof manifest !== 'object' || manifest === null || Array.isArray(manifest)) return undefined;
  const iface = (manifest as { interface?: unknown }).interface;
  if (iface === undefined || iface === null) return null;
  if (typeof iface !== 'object' || Array.isArray(iface)) return undefined;
  const value = (iface as { displayName?: unknown }).displayName;
  if (value === undefined || value === null) return null;
  if (typeof value !== 'string') return undefined;
  const trimmed = rustTrim(value);
  return trimmed === '' ? null : trimmed;
}

const SEMVER =
  /^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-((?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*)(?:\.(?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*))*))?(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?$/;

/**
 * The version Codex uses of several cached ones: the highest by semver when every name is a version, else the
 * greatest name (a `local` install, say, over numbered ones).
 */
export function chooseVersion(versions: readonly string[]): string {
  const parsed = versions.map((name) => ({ name, match: SEMVER.exec(name) }));
  if (parsed.some((v) => v.match === null)) return [...versions].sort().at(-1)!;
  return parsed.reduce((best, v) => (compareSemver(v.match!, best.match!) > 0 ? v : best)).name;
}

function compareSemver(a: RegExpExecArray, b: RegExpExecArray): number {
  for (let i = 1; i <= 3; i++) {
    const d = Number(a[i]) - Number(b[i]);
    if (d !== 0) return Math.sign(d);
  }
  const pa = a[4];
  const pb = b[4];
  if (pa === undefined || pb === undefined) return pa === pb ? 0 : pa === undefined ? 1 : -1;
  const xs = pa.split('.');
  const ys = pb.split('.');
  for (let i = 0; i < Math.max(xs.length, ys.length); i++) {
    const x = xs[i];
    const y = ys[i];
    if (x === undefined || y === undefined) return x === undefined ? -1 : 1;
    const nx = /^\d+$/.test(x);
    const ny = /^\d+$/.test(y);
    if (nx && ny && Number(x) !== Number(y)) return Math.sign(Number(x) - Number(y));
    if (nx !== ny) return nx ? -1 : 1;
    if (x !== y) return x < y ? -1 : 1;
  }
  return 0;
}
