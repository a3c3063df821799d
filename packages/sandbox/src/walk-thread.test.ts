import { once } from 'node:events';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { expandGlob, GlobExpansionError } from './glob.js';
import { findNestedProtected, type ResolvedEntry, SandboxPolicyError, WalkUnavailableError } from './policy.js';
import { WalkThread } from './walk-thread.js';

let work: string;
const threads: WalkThread[] = [];
beforeAll(() => {
  work = mkdtempSync(join(tmpdir(), 'tether-walk-thread-'));
});
afterEach(() => {
  for (const thread of threads.splice(0)) thread.close();
});
afterAll(() => rmSync(work, { recursive: true, force: true }));

function thread(script?: string): WalkThread {
  const made = new WalkThread(script);
  threads.push(made);
  return made;
}

/** A writable root of `directories` directories (at least 8), a nested `.git` and a key file among them. */
function tree(name: string, directories: number): { root: string; byPath: Map<string, ResolvedEntry> } {
  const root = join(work, name);
  for (let i = 0; i < Math.max(directories, 8); i++) mkdirSync(join(root, `d${i}`, 'sub'), { recursive: true });
  mkdirSync(join(root, 'd3', '.git'));
  writeFileSync(join(root, 'd7', 'sub', 'x.key'), '');
  return { root, byPath: new Map([[root, { path: root, access: 'write', skipMissing: false }]]) };
}

/** Turns of this thread's event loop while `walk` runs (a walk listed on this thread leaves none). */
async function turnsDuring<T>(walk: () => Promise<T>): Promise<{ turns: number; result: T }> {
  let turns = 0;
  let counting = true;
  const count = () => {
    if (!counting) return;
    turns++;
    setImmediate(count);
  };
  setImmediate(count);
  const result = await walk();
  counting = false;
  return { turns, result };
}

describe('WalkThread', () => {
  it('answers as the walks on this thread do, while this thread goes on turning', async () => {
    const { root, byPath } = tree('wide', 2000);
    const walker = thread();
    const nested = await turnsDuring(() => walker.nested(root, byPath));
    expect(nested.result).toEqual(findNestedProtected(root, byPath));
    expect(nested.result).toEqual([join(root, 'd3', '.git')]);
    // 4000 directories listed on the other thread: this one turned meanwhile.
    expect(nested.turns).toBeGreaterThan(0);
    const glob = await turnsDuring(() => walker.glob(`${root}/**/*.key`, null));
    expect(glob.result).toEqual(expandGlob(`${root}/**/*.key`));
    expect(glob.turns).toBeGreaterThan(0);
    // Several at once, each answered with its own.
    const [a, b] = await Promise.all([walker.glob(`${root}/d7/*/*.key`, null), walker.nested(root, byPath)]);
    expect(a).toEqual([join(root, 'd7', 'sub', 'x.key')]);
    expect(b).toEqual([join(root, 'd3', '.git')]);
  });

  it('rejects with the error class the walk threw: a policy past its bound, a glob past its own', async () => {
    const { root, byPath } = tree('bounded', 3);
    const walker = thread();
    const many = join(work, 'many');
    mkdirSync(many);
    await expect(walker.glob('/**/*.key', null)).rejects.toBeInstanceOf(GlobExpansionError);
    await expect(walker.glob(`${many}/${'{a,b}'.repeat(11)}`, null)).rejects.toThrow(/more than 1024 alternatives/);
    const past = walker.nested(root, byPath, { directories: 2, entries: 1000 });
    await expect(past).rejects.toBeInstanceOf(SandboxPolicyError);
    await expect(past).rejects.toThrow(/more than 2 directories to search/);
    // The thread goes on answering.
    expect(await walker.nested(root, byPath)).toEqual([join(root, 'd3', '.git')]);
  });

  it('a thread that fails fails what it was asked as unavailable, and later walks run on the calling thread', async () => {
    const { root, byPath } = tree('fallback', 3);
    const broken = join(work, 'broken-walk-worker.mjs');
    writeFileSync(broken, "throw new Error('no walks here');\n");
    const walker = thread(broken);
    const failed = walker.nested(root, byPath);
    await expect(failed).rejects.toBeInstanceOf(WalkUnavailableError);
    await expect(failed).rejects.toThrow(/walk thread failed: no walks here/);
    const after = await turnsDuring(() => walker.nested(root, byPath));
    expect(after.result).toEqual([join(root, 'd3', '.git')]);
    expect(after.turns).toBe(0);
  });

  it('without its built script, walks on the calling thread from the first walk', async () => {
    const { root, byPath } = tree('unbuilt', 3);
    const walker = thread(join(work, 'no-such-walk-worker.js'));
    const first = await turnsDuring(() => walker.nested(root, byPath));
    expect(first.result).toEqual([join(root, 'd3', '.git')]);
    expect(first.turns).toBe(0);
  });

  it('closed with a walk going, rejects it as unavailable, ends its thread, and walks on the calling thread', async () => {
    const { root, byPath } = tree('closed', 2000);
    let exited: Promise<unknown> | null = null;
    const walker = new WalkThread(undefined, (worker) => {
      exited = once(worker, 'exit');
    });
    threads.push(walker);
    expect(await walker.nested(root, byPath)).toEqual([join(root, 'd3', '.git')]);
    expect(exited).not.toBeNull();
    const going = walker.nested(root, byPath);
    walker.close();
    await expect(going).rejects.toBeInstanceOf(WalkUnavailableError);
    await expect(going).rejects.toThrow(/the sandbox is closed/);
    await exited; // the thread ended
    const after = await turnsDuring(() => walker.nested(root, byPath));
    expect(after.result).toEqual([join(root, 'd3', '.git')]);
    expect(after.turns).toBe(0);
  });
});
