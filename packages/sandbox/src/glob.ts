/**
 * `glob_pattern` deny entries, expanded before launch into the files they match, as Codex expands them (it
 * walks the pattern's static directory and matches with Rust's `globset`; links not followed). `*` and `?` stay
 * within one path component and match a leading dot, `**` as a whole component spans any number of them (`**`
 * inside a component is `*`), `[…]` is a class (`[!…]`/`[^…]` negated, a `]` first is literal), `\` escapes, an
 * unclosed `[` is literal.
 *
 * The matcher is minimatch (pinned; the one Node's own `fs.glob` vendors), not a hand-written translation
 * (the one we had turned `\*`, nested braces and `[]a]` into expressions that matched nothing, so those entries
 * denied nothing). Not `path.matchesGlob`: it is still experimental on the Node 22.14 floor and takes no options
 * (a leading-dot name would escape `*`). Not picomatch: on `[!]a]`, an unclosed `{` or a trailing `\` it builds
 * an expression that matches nothing, and it reads `(a|b)` as an alternation. minimatch reads all of those as
 * written or literally. Options: `dot` (globset's `*` matches dotfiles), `nonegate`/`noext`/`nocomment`
 * (globset has no `!pat`, `+(…)` or `#`: literal characters), case-sensitive.
 *
 * Where Codex fails open we fail closed (tests/conformance/sandbox-globs.test.ts › "deny globs"): Codex 0.171.0 denies
 * nothing for any pattern with `{…}` (alternation, nested or not, or an unclosed `{`) or a trailing `\`; here an
 * alternation denies what each alternative matches, and an unclosed `{` or a trailing `\` the file so named. Bounds:
 * a pattern without a static directory (`/**\/*.key`) is refused (it would walk the whole disk), and so is one that
 * matches more than MAX_GLOB_MATCHES files, whose braces expand to more than MAX_GLOB_ALTERNATIVES patterns, or
 * whose walk looks at more than MAX_GLOB_VISITS directory entries (Codex also refuses more than 8192 matches,
 * failing the process it started; the hand-written walk kept the first 8192 and left the rest readable); a directory
 * under the walk that cannot be listed and may hold a match is denied whole.
 */
import { type Dirent, readdirSync } from 'node:fs';
import { join, sep } from 'node:path';
import { Minimatch } from 'minimatch';

export const MAX_GLOB_MATCHES = 8192;
/** Directory entries a walk may look at before it gives up (a bound on the time an expansion takes). */
export const MAX_GLOB_VISITS = 200_000;

/**
 * Alternatives a pattern's braces may expand to (minimatch's brace expansion stops at 100,000 and drops the
 * rest; each one is tried on every entry the walk looks at).
 */
export const MAX_GLOB_ALTERNATIVES = 1024;

/** A pattern component with any of these is matched, not taken as a literal directory name. */
const META = /[*?[{\\]/;

/** A glob that cannot be expanded within the bounds (the policy refuses it: the command does not run). */
export class GlobExpansionError extends Error {
  override readonly name = 'GlobExpansionError';
}

/** The matcher for a glob relative to its static directory (`/`-separated). */
export function globMatcher(glob: string): Minimatch {
  return new Minimatch(glob, {
    dot: true,
    nonegate: true,
    noext: true,
    nocomment: true,
    platform: 'linux',
    optimizationLevel: 0,
  });
}

/** The files `pattern` (absolute) names now; throws GlobExpansionError when it is unbounded. */
export function expandGlob(pattern: string, maxDepth: number | null = null): string[] {
  const parts = pattern.split(sep);
  const firstGlob = parts.findIndex((part) => META.test(part));
  if (firstGlob === -1) return [pattern];
  const base = parts.slice(0, firstGlob).join(sep) || sep;
  if (base === sep) throw new GlobExpansionError(`glob pattern ${pattern} has no static directory to start from`);
  const glob = parts.slice(firstGlob).join('/');
  const matcher = globMatcher(glob);
  if (matcher.set.length > MAX_GLOB_ALTERNATIVES) {
    throw new GlobExpansionError(`glob pattern ${pattern} expands to more than ${MAX_GLOB_ALTERNATIVES} alternatives`);
  }
  // Without `**` no match is deeper than the pattern has separators (an alternative has no more than the whole).
  const patternDepth = glob.includes('**') ? Number.POSITIVE_INFINITY : glob.split('/').length;
  const limit = Math.min(patternDepth, maxDepth ?? Number.POSITIVE_INFINITY);
  const matches: string[] = [];
  let visits = 0;
  const walk = (dir: string, relative: string, depth: number) => {
    let entries: Dirent[];
    try {
      entries = readdirSync(dir, { withFileTypes: true });
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      // Gone or not a directory: nothing under it to hide. Not listable (EACCES, …): hidden whole.
      if (code !== 'ENOENT' && code !== 'ENOTDIR') matches.push(dir);
      return;
    }
    for (const entry of entries) {
      if (++visits > MAX_GLOB_VISITS) {
        throw new GlobExpansionError(
          `glob pattern ${pattern} looks at more than ${MAX_GLOB_VISITS} directory entries; narrow its static directory`,
        );
      }
      const path = relative === '' ? entry.name : `${relative}/${entry.name}`;
      if (entry.isDirectory()) {
        if (depth < limit && matcher.match(path, true)) walk(join(dir, entry.name), path, depth + 1);
      } else if (entry.isFile() && matcher.match(path)) {
        if (matches.length >= MAX_GLOB_MATCHES) {
          throw new GlobExpansionError(
            `glob pattern ${pattern} matches more than ${MAX_GLOB_MATCHES} files; narrow it or deny their directory`,
          );
        }
        matches.push(join(base, path));
      }
    }
  };
  walk(base, '', 1);
  return matches;
}
