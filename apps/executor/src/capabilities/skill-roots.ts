/**
 * This machine's skill roots, in Codex 0.171.0's order (CODEX-FINDINGS, capability discovery): the Codex
 * home's `skills` (CODEX_HOME canonicalized, else `~/.codex`), `~/.agents/skills`, then `/etc/codex/skills`.
 * A path named twice is searched once, under its first id. The request's cwd plays no part. Installed plugins
 * are in the Codex home's `plugins/cache`.
 */
import { realpathSync } from 'node:fs';
import { homedir } from 'node:os';
import { isAbsolute, join } from 'node:path';
import { configuredCodexHome, SYSTEM_CODEX_DIR } from '../environment-config.js';
import type { SkillRoot } from './discover-skills.js';

export interface SkillRootOptions {
  env?: NodeJS.ProcessEnv;
  /** Test knob: the machine-wide directory (default /etc/codex). */
  systemDir?: string;
}

/** The skill roots, and the Codex home's plugin cache. */
export function skillRoots(options: SkillRootOptions = {}): { roots: SkillRoot[]; pluginCache: string } {
  const env = options.env ?? process.env;
  const configured = configuredCodexHome(env);
  const codexHome = configured === null ? join(homedir(), '.codex') : realpathSync(configured);
  const home = env.HOME ? env.HOME : homedir();
  const candidates: SkillRoot[] = [
    { id: 'codex-home-skills', path: join(codexHome, 'skills') },
    ...(isAbsolute(home) ? [{ id: 'user-agent-skills', path: join(home, '.agents', 'skills') }] : []),
    { id: 'system-skills', path: join(options.systemDir ?? SYSTEM_CODEX_DIR, 'skills') },
  ];
  const seen = new Set<string>();
  const roots = candidates.filter((root) => !seen.has(root.path) && seen.add(root.path));
  return { roots, pluginCache: join(codexHome, 'plugins', 'cache') };
}
