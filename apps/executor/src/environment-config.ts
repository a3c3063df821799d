import { existsSync, readFileSync, statSync } from 'node:fs';
import { homedir, hostname } from 'node:os';
import { dirname, join, relative, resolve, sep } from 'node:path';
import {
  type EnvironmentConfigLayer,
  type EnvironmentConfigReadParams,
  type EnvironmentConfigReadResult,
  FileUriError,
  fileUriToPath,
  pathToFileUri,
  RpcError,
} from '@tether/exec-protocol';
import { parse, stringify } from 'smol-toml';

/** Where Codex keeps machine-wide config and requirements. */
export const SYSTEM_CODEX_DIR = '/etc/codex';
/** Largest config file read (Codex's files are a few KiB). */
const MAX_CONFIG_BYTES = 1024 * 1024;

type Table = Record<string, unknown>;

export interface EnvironmentConfigOptions {
  env?: NodeJS.ProcessEnv;
  /** Test knob: the machine-wide directory (default /etc/codex). */
  systemDir?: string;
}

/**
 * `environmentConfig/read` as Codex 0.171.0 answers it (CODEX-FINDINGS.md §18): the Codex config layers
 * that apply to `cwd` on this machine, each cut down to the requested key paths. Layers, in order:
 * system (`/etc/codex/config.toml`), user (`$CODEX_HOME/config.toml`, default `~/.codex`), then project
 * (`.codex/config.toml` from the project root, the nearest directory above `cwd` with `.git`, down to
 * `cwd`) when the user config trusts the project (`[projects."<root>"] trust_level = "trusted"`).
 * Requirements: `/etc/codex/requirements.toml`. A layer that has none of the paths is left out.
 */
export function readEnvironmentConfig(
  params: EnvironmentConfigReadParams,
  options: EnvironmentConfigOptions = {},
): EnvironmentConfigReadResult {
  const env = options.env ?? process.env;
  const systemDir = options.systemDir ?? SYSTEM_CODEX_DIR;
  let cwd: string;
  try {
    cwd = fileUriToPath(params.cwd);
  } catch (err) {
    if (err instanceof FileUriError) throw RpcError.invalidParams(err.message);
    throw err;
  }
  if (params.configPaths.length === 0 && params.requirementsPaths.length === 0) {
    throw RpcError.invalidParams('at least one config or requirements path is required');
  }
  if ([...params.configPaths, ...params.requirementsPaths].some((path) => path.length === 0)) {
    throw RpcError.invalidParams('TOML paths must contain at least one key segment');
  }
  const codexHome = findCodexHome(env);

  const systemConfig = readLayer(join(systemDir, 'config.toml'));
  const userConfig = readLayer(join(codexHome, 'config.toml'));
  const configLayers: EnvironmentConfigLayer[] = [];
  const add = (
    layers: EnvironmentConfigLayer[],
    table: Table | null,
    source: string,
    baseDir: string,
    paths: string[][],
  ) => {
    if (table === null) return;
    const projected = project(table, paths);
    if (Object.keys(projected).length > 0) {
      layers.push({ source, baseDir: pathToFileUri(baseDir), toml: stringify(projected) });
    }
  };
  add(configLayers, systemConfig, `system (${join(systemDir, 'config.toml')})`, systemDir, params.configPaths);
  const systemCount = configLayers.length;
  add(configLayers, userConfig, `user (${join(codexHome, 'config.toml')})`, codexHome, params.configPaths);
  for (const dir of projectConfigDirs(cwd, userConfig)) {
    const file = join(dir, 'config.toml');
    add(configLayers, readLayer(file), `project (${file})`, dir, params.configPaths);
  }

  const requirementsLayers: EnvironmentConfigLayer[] = [];
  const requirementsFile = join(systemDir, 'requirements.toml');
  add(requirementsLayers, readLayer(requirementsFile), requirementsFile, systemDir, params.requirementsPaths);

  return {
    userHomeDir: pathToFileUri(homedir()),
    codexHomeDir: pathToFileUri(codexHome),
    hostname: hostname() || null,
    config: { layers: configLayers, cloudInsertionIndex: systemCount },
    requirements: { layers: requirementsLayers, cloudInsertionIndex: requirementsLayers.length },
  };
}

/**
 * `$CODEX_HOME` resolved against the cwd (null when unset or empty); -32603 when it does not exist, as Codex
 * answers (`prefix` leads the message where Codex's does).
 */
export function configuredCodexHome(env: NodeJS.ProcessEnv, prefix = ''): string | null {
  const configured = env.CODEX_HOME;
  if (!configured) return null;
  const path = resolve(configured);
  if (!existsSync(path)) {
    throw RpcError.internal(
      `${prefix}CODEX_HOME points to ${JSON.stringify(configured)}, but that path does not exist`,
    );
  }
  return path;
}

/** `$CODEX_HOME` (which must exist, as Codex requires), else `~/.codex`. */
function findCodexHome(env: NodeJS.ProcessEnv): string {
  return configuredCodexHome(env, 'failed to find Codex home: ') ?? join(homedir(), '.codex');
}

/** A TOML file as a table, or null when there is none; a file that does not parse is an error. */
function readLayer(file: string): Table | null {
  let text: string;
  try {
    if (statSync(file).size > MAX_CONFIG_BYTES)
      throw RpcError.internal(`${file} is larger than ${MAX_CONFIG_BYTES} bytes`);
    text = readFileSync(file, 'utf8');
  } catch (err) {
    if (RpcError.is(err)) throw err;
    return null;
  }
  try {
    return parse(text) as Table;
  } catch (err) {
    throw RpcError.internal(`failed to parse ${file}: ${(err as Error).message.split('\n')[0]}`);
  }
}

/**
 * The values at `paths` in `table`, at the same paths; absent ones are left out. The tables built have no
 * prototype, so a path such as `["__proto__", "x"]` names a key like any other.
 */
function project(table: Table, paths: string[][]): Table {
  const out: Table = Object.create(null);
  for (const path of paths) {
    let value: unknown = table;
    for (const key of path) {
      if (typeof value !== 'object' || value === null || Array.isArray(value) || !Object.hasOwn(value, key)) {
        value = undefined;
        break;
      }
      value = (value as Table)[key];
    }
    if (value === undefined) continue;
    let target = out;
    for (const key of path.slice(0, -1)) {
      const next = target[key];
      if (typeof next === 'object' && next !== null && !Array.isArray(next)) {
        target = next as Table;
      } else {
        const table: Table = Object.create(null);
        target[key] = table;
        target = table;
      }
    }
    target[path[path.length - 1] as string] = value;
  }
  return out;
}

/** The `.codex` directories of a trusted project, from its root down to `cwd`; none when not trusted. */
function projectConfigDirs(cwd: string, userConfig: Table | null): string[] {
  let root = cwd;
  for (let dir = cwd; ; dir = dirname(dir)) {
    if (existsSync(join(dir, '.git'))) {
      root = dir;
      break;
    }
    if (dirname(dir) === dir) break;
  }
  const projects = userConfig?.projects;
  const entry =
    typeof projects === 'object' && projects !== null ? ((projects as Table)[root] ?? (projects as Table)[cwd]) : null;
  if (typeof entry !== 'object' || entry === null || (entry as Table).trust_level !== 'trusted') return [];
  const dirs = [root];
  const below = relative(root, cwd);
  if (below !== '') {
    let dir = root;
    for (const part of below.split(sep)) {
      dir = join(dir, part);
      dirs.push(dir);
    }
  }
  return dirs.map((dir) => join(dir, '.codex')).filter((dir) => existsSync(join(dir, 'config.toml')));
}
