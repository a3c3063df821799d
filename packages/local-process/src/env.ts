/**
 * Child environment construction, spec §7.1 (Codex `child_env` + `shell_environment.rs`), Unix rules:
 * names are compared case-sensitively except where the spec says otherwise (core names, globs, the
 * always-removed names).
 */

/** `envPolicy` of `process/start`; every field is required when the object is present. */
export interface EnvPolicy {
  inherit: 'all' | 'core' | 'none';
  ignoreDefaultExcludes: boolean;
  exclude: string[];
  set: Record<string, string>;
  includeOnly: string[];
}

/** Unix core variables kept by `inherit: "core"` (matched case-insensitively). */
const CORE_VARS = new Set([
  'PATH',
  'SHELL',
  'TMPDIR',
  'TEMP',
  'TMP',
  'HOME',
  'LANG',
  'LC_ALL',
  'LC_CTYPE',
  'LOGNAME',
  'USER',
]);

/** Dropped unless `ignoreDefaultExcludes`. */
const DEFAULT_EXCLUDES = ['*KEY*', '*SECRET*', '*TOKEN*'];

/** Removed from every child environment, policy or not (case-insensitive). */
const ALWAYS_REMOVED = new Set([
  'CODEX_EXEC_SERVER_EXIT_ON_STDIN_CLOSE',
  'CODEX_EXEC_SERVER_NOISE_AUTH_TOKEN',
  'NODE_REPL_AUTH_TOKEN',
  'OPENAI_FEDERATION_RULE_ID',
  'OPENAI_IDENTITY_TOKEN_FILE',
  'OPENAI_WORKLOAD_IDENTITY_CONTEXT',
]);

/**
 * Computes the exact environment of a child. Without a policy it is exactly `env`; with one it starts
 * from `serverEnv` and applies inherit → default excludes → exclude → set → includeOnly, then overlays
 * `env`. The always-removed names are stripped in both cases.
 */
export function buildChildEnv(
  env: Record<string, string>,
  envPolicy: EnvPolicy | null | undefined,
  serverEnv: Readonly<Record<string, string | undefined>>,
): Record<string, string> {
  const result = new Map<string, string>();
  if (envPolicy) {
    for (const [name, value] of Object.entries(serverEnv)) {
      if (value === undefined) continue;
      if (envPolicy.inherit === 'all' || (envPolicy.inherit === 'core' && CORE_VARS.has(name.toUpperCase()))) {
        result.set(name, value);
      }
    }
    const excludes = compileGlobs(envPolicy.ignoreDefaultExcludes ? [] : DEFAULT_EXCLUDES);
    excludes.push(...compileGlobs(envPolicy.exclude));
    for (const name of [...result.keys()]) {
      if (matchesAny(excludes, name)) result.delete(name);
    }
    for (const [name, value] of Object.entries(envPolicy.set)) result.set(name, value);
    if (envPolicy.includeOnly.length > 0) {
      const includes = compileGlobs(envPolicy.includeOnly);
      for (const name of [...result.keys()]) {
        if (!matchesAny(includes, name)) result.delete(name);
      }
    }
  }
  for (const [name, value] of Object.entries(env)) result.set(name, value);

  const childEnv: Record<string, string> = {};
  for (const [name, value] of result) {
    if (!ALWAYS_REMOVED.has(name.toUpperCase())) childEnv[name] = value;
  }
  return childEnv;
}

/** Case-insensitive globs where `*` matches any run of characters and `?` exactly one. */
function compileGlobs(patterns: readonly string[]): RegExp[] {
  return patterns.map((pattern) => {
    let source = '';
    for (const char of pattern) {
      if (char === '*') source += '[\\s\\S]*';
      else if (char === '?') source += '[\\s\\S]';
      else source += char.replace(/[\\^$.|+()[\]{}]/g, '\\$&');
    }
    return new RegExp(`^${source}$`, 'iu');
  });
}

function matchesAny(globs: readonly RegExp[], name: string): boolean {
  return globs.some((glob) => glob.test(name));
}
