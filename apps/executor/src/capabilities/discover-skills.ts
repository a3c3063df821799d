/**
 * The skills of this machine's skill roots, as Codex 0.171.0's `capabilities/discoverV2` finds them
 * (CODEX-FINDINGS, capability discovery). Runs in the executor, or in the fs sandbox helper when the request
 * carries a restricting sandbox (confined-ops.ts), so that what the policy hides is not read.
 */
import { stat } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { fileUriToPath, pathToFileUri } from '@tether/exec-protocol';
import { walk } from '../fs/walk.js';
import { readBounded, utf8 } from './bounded-read.js';
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
  skills: DiscoveredSkill[];
  /** Something was left out: a file that is not a skill, could not be read, or a walk cut short. */
  incomplete: boolean;
}

/** How Codex walks a skill root (its fs/walk options). */
export const SKILL_WALK = { maxDepth: 6, maxDirectories: 2000, maxEntries: 20_000, followDirectorySymlinks: true };
/** Bytes of SKILL.md and openai.yaml one root may read. */
export const ROOT_READ_BUDGET = 16 * 1024 * 1024;

const NOT_THERE = new Set(['ENOENT', 'ENOTDIR', 'ELOOP']);

/** The skills under `roots`, root by root, each root's sorted by SKILL.md URI. */
export async function discoverSkills(roots: readonly SkillRoot[]): Promise<SkillsDiscovery> {
  const out: SkillsDiscovery = { skills: [], incomplete: false };
  const markIncomplete = () => {
    out.incomplete = true;
  };
  for (const root of roots) await discoverRoot(root, out.skills, markIncomplete);
  return out;
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

export interface DiscoverV2Answer {
  plugins: unknown[];
  skills: DiscoveredSkill[];
  warnings: string[];
}

/**
 * The answer, kept within MAX_DISCOVERY_ANSWER_BYTES as Codex keeps it: a skill whose entry would pass the
 * budget is left out (later smaller ones still go in) and the size warning is added. Warnings are a sorted set.
 */
export function discoverV2Answer(found: SkillsDiscovery): DiscoverV2Answer {
  const plugins: unknown[] = [];
  let size = Buffer.byteLength(JSON.stringify({ plugins, skills: [], warnings: [] }));
  const skills: DiscoveredSkill[] = [];
  let limited = false;
  for (const skill of found.skills) {
    const entry = {
      name: skill.name,
      description: skill.description,
      shortDescription: skill.shortDescription,
      path: skill.path,
      discoveryRoot: skill.discoveryRoot,
      dependencies: skill.dependencies,
      policy: skill.policy,
    };
    const cost = Buffer.byteLength(JSON.stringify(entry)) + (skills.length > 0 ? 1 : 0);
    if (size + cost > MAX_DISCOVERY_ANSWER_BYTES) {
      limited = true;
      continue;
    }
    size += cost;
    skills.push(entry);
  }
  const warnings = [...(limited ? [SIZE_LIMIT_WARNING] : []), ...(found.incomplete ? [INCOMPLETE_WARNING] : [])];
  return { plugins, skills, warnings: warnings.sort() };
}
