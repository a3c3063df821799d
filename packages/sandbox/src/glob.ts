/**
 * `glob_pattern` deny entries, expanded as Codex expands them before launch (ripgrep's `--files --hidden
 * --no-ignore --glob`): the files under the pattern's static directory whose path matches it, links not
 * followed, at most MAX_GLOB_MATCHES. `*` and `?` stay within one path component, `**` spans any number of
 * them, `[…]` is a class, `{a,b}` an alternation. A pattern without a static directory (`/**\/*.key`) would walk
 * the whole disk and is refused.
 */
import { readdirSync } from 'node:fs';
import { join, sep } from 'node:path';

export const MAX_GLOB_MATCHES = 8192;
/** Directory entries a walk may look at before it gives up (a bound on the time an expansion takes). */
const MAX_GLOB_VISITS = 200_000;

const META = /[*?[{]/;

/** The regular expression for a glob (a path relative to its static prefix). */
export function globRegExp(glob: string): RegExp {
  let out = '';
  for (let i = 0; i < glob.length; i++) {
    const c = glob[i]!;
    if (c === '*') {
      if (glob[i + 1] === '*') {
        const slash = glob[i + 2] === '/';
        out += slash ? '(?:[^/]*/)*' : '.*';
        i += slash ? 2 : 1;
      } else out += '[^/]*';
    } else if (c === '?') out += '[^/]';
    else if (c === '[') {
      const end = glob.indexOf(']', i + 2);
      if (end === -1) out += '\\[';
      else {
        const body = glob.slice(i + 1, end).replace(/\\/g, '\\\\');
        out += `[${body.startsWith('!') ? `^${body.slice(1)}` : body}]`;
        i = end;
      }
    } else if (c === '{') {
      const end = glob.indexOf('}', i);
      if (end === -1) out += '\\{';
      else {
        out += `(?:${glob
          .slice(i + 1, end)
          .split(',')
          .map((part) => globRegExp(part).source.slice(1, -1))
          .join('|')})`;
        i = end;
      }
    } else out += c.replace(/[.+^$()|\\/]/g, '\\$&');
  }
  return new RegExp(`^${out}$`);
}

/** The files `pattern` (absolute) names now; throws when it has no static directory to start from. */
export function expandGlob(pattern: string, maxDepth: number | null = null): string[] {
  const parts = pattern.split(sep);
  const firstGlob = parts.findIndex((part) => META.test(part));
  if (firstGlob === -1) return [pattern];
  const base = parts.slice(0, firstGlob).join(sep) || sep;
  if (base === sep) throw new Error(`glob pattern ${pattern} has no static directory to start from`);
  const matcher = globRegExp(parts.slice(firstGlob).join('/'));
  const matches: string[] = [];
  let visits = 0;
  const walk = (dir: string, relative: string, depth: number) => {
    if (matches.length >= MAX_GLOB_MATCHES || (maxDepth !== null && depth > maxDepth)) return;
    let entries: import('node:fs').Dirent[];
    try {
      entries = readdirSync(dir, { withFileTypes: true });
    } catch {
      return;
    }
    for (const entry of entries) {
      if (++visits > MAX_GLOB_VISITS || matches.length >= MAX_GLOB_MATCHES) return;
      const path = relative === '' ? entry.name : `${relative}/${entry.name}`;
      if (entry.isDirectory()) walk(join(dir, entry.name), path, depth + 1);
      else if (entry.isFile() && matcher.test(path)) matches.push(join(base, path));
    }
  };
  walk(base, '', 1);
  return matches;
}
