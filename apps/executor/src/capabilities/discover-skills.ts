/**
 * The skills of this machine's skill roots, as Codex 0.171.0's `capabilities/discoverV2` finds them
 * (CODEX-FINDINGS, capability discovery). Runs in the executor, or in the fs sandbox helper when the request
 * carries a restricting sandbox (confined-ops.ts), so that what the policy hides is not read.
 */
import { stat } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { type ExecutorPlugin, fileUriToPath, pathToFileUri } from '@tether/exec-protocol';
import { walk } from '../fs/walk.js';
import { readBounded, SKILL_WALK, utf8 } from './bounded-read.js';
import { manifestNamespace, PLUGIN_MANIFEST_DIRS, readPluginManifest } from './plugin-manifest.js';
import {
  MAX_QUALIFIED_NAME_CHARS,
  parseSkillFrontmatter,
  parseSkillMetadata,
  SkillFileError,
  type SkillMetadata,
} from './skill-file.js';
import { charCount } from './yaml-fields.js';

/** A skill root: Codex's id for it and its native path. */
export interface SkillRoot {
  id: string;
  path: string;
}

export interface DiscoveredSkill extends SkillMetadata {
  name: string;
  description: string;
  shortDescription: string | null;
  /** The SKILL.md's file URI. */
  path: string;
  discoveryRoot: { id: string; path: string };
}

export interface SkillsDiscovery {
  plugins: ExecutorPlugin[];
  skills: DiscoveredSkill[];
  /**
   * Roots and plugins that left something out (a file that is not a skill or could not be read, a walk cut
   * short): Codex warns once for each.
   */
  incompleteSources: number;
  /** More plugins were installed than Codex reads (MAX_PLUGINS). */
  unresolvedLocations: boolean;
  /** The plugin cache held more entries than we look through (MAX_PLUGIN_CACHE_ENTRIES). */
  pluginCacheTruncated: boolean;
}

/** Bytes of SKILL.md and openai.yaml one root may read. */
export const ROOT_READ_BUDGET = 16 * 1024 * 1024;

const NOT_THERE = new Set(['ENOENT', 'ENOTDIR', 'ELOOP']);

/** The skills of one root (or plugin), and whether it left something out. */
export async function discoverSkillRoot(root: SkillRoot): Promise<{ skills: DiscoveredSkill[]; incomplete: boolean }> {
  const skills: DiscoveredSkill[] = [];
  let missed = false;
  const incomplete = () => {
    missed = true;
  };
  await discoverRoot(root, skills, incomplete);
  return { skills, incomplete: missed };
}

async function discoverRoot(root: SkillRoot, skills: DiscoveredSkill[], incomplete: () => void): Promise<void> {
  try {
    if (!(await stat(root.path)).isDirectory()) return;
  } catch (err) {
    if (!NOT_THERE.has((err as NodeJS.ErrnoException).code ?? '')) incomplete();
    return;
  }
  let walked: Awaited<ReturnType<typeof walk>>;
  try {
    walked = await walk(root.path, SKILL_WALK);
  } catch {
    incomplete();
    return;
  }
  if (walked.truncated || walked.errors.length > 0) incomplete();

  const skillFiles: string[] = [];
  const pluginDirs = new Set<string>([root.path]);
  for (const entry of walked.entries) {
    const path = fileUriToPath(entry.path);
    if (entry.kind === 'file' && basename(path) === 'SKILL.md') skillFiles.push(entry.path);
    if (entry.kind === 'directory' && PLUGIN_MANIFEST_DIRS.has(basename(path))) pluginDirs.add(dirname(path));
  }
  skillFiles.sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));

  const namespaces = new Map<string, Promise<string | null>>();
  const namespaceOf = (dir: string) => {
    let found = namespaces.get(dir);
    if (!found) {
      found = readPluginManifest(dir, incomplete).then((m) => (m === null ? null : manifestNamespace(m, dir)));
      namespaces.set(dir, found);
    }
    return found;
  };
  const discoveryRoot = { id: root.id, path: pathToFileUri(root.path) };
  let budget = ROOT_READ_BUDGET;

  for (const uri of skillFiles) {
    const path = fileUriToPath(uri);
    const read = await readBounded(path, { budget, followLinks: false });
    if (read.kind !== 'ok') {
      incomplete();
      continue;
    }
    budget -= read.bytes.length;
    const text = utf8(read.bytes);
    if (text === null) {
      incomplete();
      continue;
    }
    const dir = dirname(path);
    let front: ReturnType<typeof parseSkillFrontmatter>;
    try {
      front = parseSkillFrontmatter(text, basename(dir));
    } catch (err) {
      if (!(err instanceof SkillFileError)) throw err;
      incomplete();
      continue;
    }
    let namespace: string | null = null;
    for (let at = dir; ; at = dirname(at)) {
      if (pluginDirs.has(at)) namespace = await namespaceOf(at);
      if (namespace !== null || at === root.path || dirname(at) === at) break;
    }
    if (namespace !== null && charCount(namespace) + charCount(front.name) > MAX_QUALIFIED_NAME_CHARS) {
      incomplete();
      continue;
    }
    let metadata: SkillMetadata = { dependencies: null, policy: null };
    const yaml = await readBounded(join(dir, 'agents', 'openai.yaml'), { budget, followLinks: true });
    if (yaml.kind === 'ok') {
      budget -= yaml.bytes.length;
      const yamlText = utf8(yaml.bytes);
      if (yamlText === null) incomplete();
      else metadata = parseSkillMetadata(yamlText);
    } else if (yaml.kind !== 'missing' && yaml.kind !== 'not-a-file') {
      incomplete();
    }
    skills.push({
      name: namespace === null ? front.name : `${namespace}:${front.name}`,
      description: front.description,
      shortDescription: front.shortDescription,
      path: uri,
      discoveryRoot,
      ...metadata,
    });
  }
}

/** What `capabilities/discoverV2` answers at most, serialized (Codex's 4 MiB). */
export const MAX_DISCOVERY_ANSWER_BYTES = 4 * 1024 * 1024;
export const SIZE_LIMIT_WARNING = 'capability discovery size limit reached';
export const INCOMPLETE_WARNING = 'some capability metadata could not be loaded; discovery may be incomplete';
export const PLUGIN_CACHE_LIMIT_WARNING = 'plugin cache traversal limit reached';
export const UNRESOLVED_WARNING = 'some capability locations could not be resolved; discovery may be incomplete';

export interface DiscoverV2Answer {
  plugins: ExecutorPlugin[];
  skills: ReturnType<typeof skillEntry>[];
  warnings: string[];
}

/** A skill's entry in the answer, in Codex's key order (plugin skills have no `discoveryRoot`). */
export function skillEntry(skill: DiscoveredSkill, inPlugin = false) {
  return {
    name: skill.name,
    description: skill.description,
    shortDescription: skill.shortDescription,
    path: skill.path,
    ...(inPlugin ? {} : { discoveryRoot: skill.discoveryRoot }),
    dependencies: skill.dependencies,
    policy: skill.policy,
  };
}

/**
 * The answer, kept within MAX_DISCOVERY_ANSWER_BYTES as Codex keeps it: a plugin or skill whose entry would
 * pass the budget is left out (later smaller ones still go in) and the size warning is added. Warnings: one
 * per incomplete root or plugin, sorted.
 */
export function discoverV2Answer(found: SkillsDiscovery): DiscoverV2Answer {
  let size = Buffer.byteLength(JSON.stringify({ plugins: [], skills: [], warnings: [] }));
  let limited = false;
  const fit = <T>(entries: T[]): T[] => {
    const kept: T[] = [];
    for (const entry of entries) {
      const cost = Buffer.byteLength(JSON.stringify(entry)) + (kept.length > 0 ? 1 : 0);
      if (size + cost > MAX_DISCOVERY_ANSWER_BYTES) {
        limited = true;
        continue;
      }
      size += cost;
      kept.push(entry);
    }
    return kept;
  };
  const plugins = fit(found.plugins);
  const skills = fit(found.skills.map((skill) => skillEntry(skill)));
  const warnings = [
    ...(limited ? [SIZE_LIMIT_WARNING] : []),
    ...(found.pluginCacheTruncated ? [PLUGIN_CACHE_LIMIT_WARNING] : []),
    ...(found.unresolvedLocations ? [UNRESOLVED_WARNING] : []),
    ...Array.from({ length: found.incompleteSources }, () => INCOMPLETE_WARNING),
  ];
  return { plugins, skills, warnings: warnings.sort() };
}
