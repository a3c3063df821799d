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
    pluginCache === null
      ? { plugins: [], incompleteSources: 0, unresolved: false, truncated: false }
      : await discoverPlugins(pluginCache);
  const out: SkillsDiscovery = {
    plugins: installed.plugins,
    skills: [],
    incompleteSources: installed.incompleteSources,
    unresolvedLocations: installed.unresolved,
    pluginCacheTruncated: installed.truncated,
  };
  for (const root of roots) {
    const found = await discoverSkillRoot(root);
    out.skills.push(...found.skills);
    if (found.incomplete) out.incompleteSources++;
  }
  return out;
}

/** Plugins Codex reads of the cache, the first by id; more are left out with a warning. */
export const MAX_PLUGINS = 512;
/** Directory entries of the cache looked through at most (marketplaces, plugins and versions together). */
export const MAX_PLUGIN_CACHE_ENTRIES = 100_000;

const byBytes = (a: string, b: string) => Buffer.compare(Buffer.from(a), Buffer.from(b));

export async function discoverPlugins(cache: string): Promise<{
  plugins: ExecutorPlugin[];
  incompleteSources: number;
  /** More plugins than MAX_PLUGINS. */
  unresolved: boolean;
  /** More entries than MAX_PLUGIN_CACHE_ENTRIES. */
  truncated: boolean;
}> {
  let budget = MAX_PLUGIN_CACHE_ENTRIES;
  /** The directories in `dir` (symlinks followed), hidden ones left out unless `hidden`; null: over budget. */
  const directories = async (dir: string, hidden: boolean): Promise<string[] | null> => {
    const names = await readdir(dir).catch(() => []);
    budget -= names.length;
    if (budget < 0) return null;
    const found: string[] = [];
    for (const name of names.sort(byBytes)) {
      if (!hidden && name.startsWith('.')) continue;
      const isDirectory = await stat(join(dir, name)).then(
        (info) => info.isDirectory(),
        () => false,
      );
      if (isDirectory) found.push(name);
    }
    return found;
  };
  const candidates: { id: string; dir: string }[] = [];
  let truncated = false;
  for (const marketplace of (await directories(cache, false)) ?? []) {
    const names = await directories(join(cache, marketplace), false);
    if (names === null) {
      truncated = true;
      break;
    }
    for (const name of names) candidates.push({ id: `${name}@${marketplace}`, dir: join(cache, marketplace, name) });
  }
  if (budget < 0) truncated = true;
  candidates.sort((a, b) => byBytes(a.id, b.id));
  const unresolved = candidates.length > MAX_PLUGINS;
  const plugins: ExecutorPlugin[] = [];
  let incompleteSources = 0;
  for (const { id, dir } of candidates.slice(0, MAX_PLUGINS)) {
    const versions = await directories(dir, true);
    if (versions === null) {
      truncated = true;
      break;
    }
    if (versions.length === 0) continue;
    const version = chooseVersion(versions);
    const plugin = await readPlugin(id, version, join(dir, version));
    if (plugin.incomplete) incompleteSources++;
    if (plugin.plugin !== null) plugins.push(plugin.plugin);
  }
  return { plugins, incompleteSources, unresolved, truncated };
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
