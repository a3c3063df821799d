/**
 * No import circle anywhere in the tree: every relative import of every hand-written source file (TypeScript and
 * JavaScript, tests included; node_modules, dist and build output left out) is followed, and a module that reaches
 * itself again fails the test, naming the circle. Type-only imports count too: a circle of types is still two files
 * that each need the other to be read. Static text scan, no compiler: well under a second.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { repoRoot } from '@tether/test-kit';
import { describe, expect, it } from 'vitest';

const SKIP = new Set(['node_modules', 'dist', 'build', 'coverage', '.git', '.turbo', '.turbo-cache', 'results']);
const SOURCE = /\.(ts|tsx|mts|cts|js|mjs|cjs)$/;

function sourceFiles(dir: string, out: string[] = []): string[] {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    if (entry.name.startsWith('.') || SKIP.has(entry.name)) continue;
    const path = join(dir, entry.name);
    if (entry.isDirectory()) sourceFiles(path, out);
    else if (SOURCE.test(entry.name) && !entry.name.endsWith('.d.ts')) out.push(path);
  }
  return out;
}

/** `import … from './x.js'`, `export … from`, `import('./x.js')`, `import './x.js'`: relative specifiers only. */
const SPECIFIER = /(?:\bfrom\s*|\bimport\s*\(?\s*)['"](\.{1,2}\/[^'"]+)['"]/g;

/** The file a relative specifier names: as written, or the TypeScript source behind a `.js` specifier. */
function resolveImport(from: string, specifier: string): string | null {
  const target = resolve(dirname(from), specifier);
  const candidates = [target, target.replace(/\.(m|c)?js$/, '.$1ts'), target.replace(/\.js$/, '.tsx')];
  candidates.push(`${target}.ts`, join(target, 'index.ts'));
  return candidates.find((path) => SOURCE.test(path) && existsSync(path)) ?? null;
}

/** Every circle found by a depth-first walk, each as its files from the first repeated one back to it. */
function importCircles(files: readonly string[]): string[][] {
  const edges = new Map<string, string[]>();
  for (const file of files) {
    // Comments may quote import lines; drop them first (a rough cut: line and block comments).
    const text = readFileSync(file, 'utf8')
      .replace(/\/\*[\s\S]*?\*\//g, '')
      .replace(/^\s*\/\/.*$/gm, '');
    const targets = [...text.matchAll(SPECIFIER)].map((m) => resolveImport(file, m[1] as string));
    edges.set(file, [...new Set(targets.filter((t): t is string => t !== null))]);
  }
  const circles: string[][] = [];
  const state = new Map<string, 'open' | 'done'>();
  const stack: string[] = [];
  const visit = (file: string) => {
    state.set(file, 'open');
    stack.push(file);
    for (const next of edges.get(file) ?? []) {
      if (state.get(next) === 'open') circles.push([...stack.slice(stack.indexOf(next)), next]);
      else if (!state.has(next)) visit(next);
    }
    stack.pop();
    state.set(file, 'done');
  };
  for (const file of files) if (!state.has(file)) visit(file);
  return circles;
}

describe('imports', () => {
  it('form no circle in any workspace package, test, bench or script', () => {
    const root = repoRoot();
    const files = ['apps', 'packages', 'tests', 'bench', 'scripts']
      .map((dir) => join(root, dir))
      .filter((dir) => existsSync(dir))
      .flatMap((dir) => sourceFiles(dir));
    expect(files.length).toBeGreaterThan(100);
    const circles = importCircles(files).map((circle) => circle.map((f) => relative(root, f)).join(' → '));
    expect(circles).toEqual([]);
  });
});
