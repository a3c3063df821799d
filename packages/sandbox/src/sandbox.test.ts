import { execFileSync, spawnSync } from 'node:child_process';
import {
  closeSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { decodeSandboxContext, pathToFileUri, type SandboxContext } from '@tether/exec-protocol';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bwrapArgs } from './bwrap.js';
import { likelySandboxDenied } from './denial.js';
import { expandGlob, GlobExpansionError, MAX_GLOB_MATCHES } from './glob.js';
import { findNestedProtected, resolvePolicy, SandboxPolicyError } from './policy.js';
import { type PreparedSandbox, Sandboxer, SandboxUnavailableError } from './sandboxer.js';
import { seccompProgram, seccompSupported } from './seccomp.js';

const special = (kind: string, extra: Record<string, unknown> = {}) => ({ type: 'special', value: { kind, ...extra } });

function context(entries: unknown[], roots: string[] = [], network = 'restricted'): SandboxContext {
  return decodeSandboxContext({
    permissions: { type: 'managed', file_system: { type: 'restricted', entries }, network },
    workspaceRoots: roots.map((root) => pathToFileUri(root)),
    windowsSandboxLevel: 'disabled',
  })!;
}

const work = mkdtempSync('/var/tmp/tether-sandbox-unit-');
afterAll(() => rmSync(work, { recursive: true, force: true }));

describe('resolvePolicy', () => {
  it('resolves the special paths as Codex does', async () => {
    const root = join(work, 'r1');
    mkdirSync(root, { recursive: true });
    const policy = await resolvePolicy(
      context(
        [
          { path: special('root'), access: 'read' },
          { path: special('project_roots'), access: 'write' },
          { path: special('project_roots', { subpath: '../escape' }), access: 'write' },
          { path: special('project_roots', { subpath: '/etc' }), access: 'write' },
          { path: special('tmpdir'), access: 'write' },
          { path: special('slash_tmp'), access: 'write' },
          { path: special('unknown', { path: '/x' }), access: 'write' },
          { path: special('project_roots', { subpath: 'secret' }), access: 'deny' },
        ],
        [root],
      ),
      { tmpdir: join(work, 'tmp') },
    );
    expect(policy.fullRead).toBe(true);
    expect(policy.writable.sort()).toEqual([root, join(work, 'tmp'), '/tmp'].sort());
    expect(policy.entries.find((e) => e.path === join(root, 'secret'))?.access).toBe('deny');
    expect(policy.protectedPaths).toContain(join(root, '.git'));
    expect(policy.protectedPaths).toContain(join(root, '.aws'));
  });

  it('project_roots without workspaceRoots means nothing; at one path deny beats write beats read', async () => {
    const policy = await resolvePolicy(
      context([
        { path: special('project_roots'), access: 'write' },
        { path: { type: 'path', path: pathToFileUri('/opt') }, access: 'read' },
        { path: { type: 'path', path: pathToFileUri('/opt') }, access: 'deny' },
        { path: { type: 'path', path: pathToFileUri('/opt') }, access: 'write' },
      ]),
    );
    expect(policy.writable).toEqual([]);
    expect(policy.fullRead).toBe(false);
    expect(policy.entries).toEqual([{ path: '/opt', access: 'deny', skipMissing: false }]);
  });

  it('expands deny globs into the files they match; refuses one without a static directory; ignores others', async () => {
    const root = join(work, 'globs');
    mkdirSync(join(root, 'a', 'b'), { recursive: true });
    for (const file of ['x.key', 'a/y.key', 'a/b/z.key', 'a/b/keep.txt', '.hidden.key'])
      writeFileSync(join(root, file), '');
    const deny = (pattern: string, access = 'deny') => ({ path: { type: 'glob_pattern', pattern }, access });
    const denied = async (pattern: string) =>
      (await resolvePolicy(context([{ path: special('root'), access: 'read' }, deny(pattern)]), { cwd: root })).entries
        .filter((e) => e.access === 'deny')
        .map((e) => e.path.slice(root.length + 1))
        .sort();
    expect(await denied(`${root}/**/*.key`)).toEqual(['.hidden.key', 'a/b/z.key', 'a/y.key', 'x.key']);
    expect(await denied(`${root}/*.key`)).toEqual(['.hidden.key', 'x.key']);
    expect(await denied(`${root}/a/{b/z,y}.key`)).toEqual(['a/b/z.key', 'a/y.key']);
    expect(await denied('a/**/[yz].key')).toEqual(['a/b/z.key', 'a/y.key']);
    await expect(resolvePolicy(context([deny('/**/*.key')]))).rejects.toThrow(SandboxPolicyError);
    const write = await resolvePolicy(context([deny(`${root}/*.key`, 'write')]));
    expect(write.entries).toEqual([]);
  });

  it('refuses a glob that matches more than MAX_GLOB_MATCHES files (as Codex refuses it), never cut short', () => {
    const many = join(work, 'many');
    mkdirSync(many, { recursive: true });
    for (let i = 0; i < MAX_GLOB_MATCHES; i++) writeFileSync(join(many, `f${i}.key`), '');
    expect(expandGlob(`${many}/*.key`)).toHaveLength(MAX_GLOB_MATCHES);
    writeFileSync(join(many, 'one-more.key'), '');
    expect(() => expandGlob(`${many}/*.key`)).toThrow(GlobExpansionError);
    expect(() => expandGlob(`${many}/*.key`)).toThrow(/more than 8192 files/);
    // A pattern whose braces expand past the bound is refused too, never cut short.
    expect(() => expandGlob(`${many}/${'{a,b}'.repeat(11)}`)).toThrow(/more than 1024 alternatives/);
  });

  it('matches as Codex matches (globset), and where Codex denies nothing, denies what the pattern names', () => {
    const root = join(work, 'glob-table');
    const tree = ['x/*.txt', 'x/a.txt', 'x/a', 'x/b', 'x/c', 'x/ab', 'x/]', 'x/[', 'x/?', 'x/[a', 'x/{a,b', 'x/a\\'];
    tree.push('x/sub/f', 'x/(a|b)', 'x/!a', 'k.key', 'd/k.key', 'd/e/f/k.key', '.hidden/k.key', '.env', 'd/b.env');
    for (const file of tree) {
      mkdirSync(join(root, file, '..'), { recursive: true });
      writeFileSync(join(root, file), '');
    }
    const matches = (glob: string, maxDepth: number | null = null) =>
      expandGlob(`${root}/${glob}`, maxDepth)
        .map((path) => path.slice(root.length + 1))
        .sort();
    const cases: Array<[string, string[]]> = [
      // What the hand-written translation turned into expressions that match nothing:
      ['x/\\*.txt', ['x/*.txt']],
      ['x/{a,{b,c}}', ['x/a', 'x/b', 'x/c']],
      ['x/[]a]', ['x/]', 'x/a']],
      ['x/[!]a]', ['x/?', 'x/[', 'x/b', 'x/c']],
      ['x/[^]a]', ['x/?', 'x/[', 'x/b', 'x/c']],
      ['x/\\?', ['x/?']],
      ['x/[[]', ['x/[']],
      // Literal, as globset reads them (`(`, `|`, a leading `!` are no syntax there), or as written when
      // the syntax is unclosed:
      ['x/(a|b)', ['x/(a|b)']],
      ['x/!a', ['x/!a']],
      ['x/[a', ['x/[a']],
      ['x/{a,b', ['x/{a,b']],
      ['x/a\\', ['x/a\\']],
      // `*` and `?` stay in one component and match a leading dot; `**` alone spans components, inside one it is `*`.
      [
        'x/*',
        [
          'x/!a',
          'x/(a|b)',
          'x/*.txt',
          'x/?',
          'x/[',
          'x/[a',
          'x/]',
          'x/a',
          'x/a.txt',
          'x/a\\',
          'x/ab',
          'x/b',
          'x/c',
          'x/{a,b',
        ],
      ],
      ['x/?', ['x/?', 'x/[', 'x/]', 'x/a', 'x/b', 'x/c']],
      ['*.env', ['.env']],
      ['**/k.key', ['.hidden/k.key', 'd/e/f/k.key', 'd/k.key', 'k.key']],
      ['d/**', ['d/b.env', 'd/e/f/k.key', 'd/k.key']],
      ['d/**k.key', ['d/k.key']],
      ['{x/a,d/b}*', ['d/b.env', 'x/a', 'x/a.txt', 'x/a\\', 'x/ab']],
    ];
    for (const [glob, expected] of cases) expect(matches(glob), glob).toEqual(expected);
    // glob_scan_max_depth: 1 is the static directory's own files.
    expect(matches('**/k.key', 1)).toEqual(['k.key']);
    expect(matches('**/k.key', 2)).toEqual(['.hidden/k.key', 'd/k.key', 'k.key']);
  });

  it('keeps nested .git, .codex and .agents read-only too, found by a bounded walk that fails closed', async () => {
    const root = join(work, 'nested');
    for (const dir of [
      'sub/.git/hooks',
      'a/b/c/.codex',
      'a/.agents',
      'denied/.git',
      'sub/.git/modules/x/.git',
      'plain',
    ])
      mkdirSync(join(root, dir), { recursive: true });
    const profile = context(
      [
        { path: special('root'), access: 'read' },
        { path: special('project_roots'), access: 'write' },
        { path: special('project_roots', { subpath: 'denied' }), access: 'deny' },
      ],
      [root],
    );
    const policy = await resolvePolicy(profile);
    const nested = policy.protectedPaths.filter((p) => p.startsWith(`${root}/`)).map((p) => p.slice(root.length + 1));
    // The top-level names (missing or not), every nested one that exists, not what is under a protected
    // directory (it is read-only whole) nor under a denied one.
    expect(nested.sort()).toEqual(['.agents', '.aws', '.codex', '.git', 'a/.agents', 'a/b/c/.codex', 'sub/.git']);
    expect(policy.nestedProtectedPaths.map((p) => p.slice(root.length + 1)).sort()).toEqual([
      'a/.agents',
      'a/b/c/.codex',
      'sub/.git',
    ]);
    // Bound read-only; one removed before bubblewrap starts (`-try`) fails nothing.
    const sources = { deniedDirectory: '/d', deniedFile: '/f', emptyReadOnlyDirectory: '/e' };
    const { args } = bwrapArgs(policy, sources, { cwd: root, seccompFd: null });
    const sub = join(root, 'sub', '.git');
    expect(args.join(' ')).toContain(`--ro-bind-try ${sub} ${sub}`);
    // The top-level one, missing here, is an empty read-only directory (strict: a failed mount fails the launch).
    expect(args.join(' ')).toContain(`--ro-bind /e ${join(root, '.git')}`);
    expect(bwrapArgs(policy, sources, { cwd: root, seccompFd: null }).syntheticTargets).toContain(join(root, '.git'));
    // One that exists but is empty (another sandbox's mount point, say, which may be gone when bubblewrap starts)
    // shows as the same always-there empty directory, and is not this sandbox's to remove; one with content is
    // itself, read-only.
    mkdirSync(join(root, '.codex'));
    mkdirSync(join(root, '.aws'));
    writeFileSync(join(root, '.aws', 'config'), '');
    const again = bwrapArgs(policy, sources, { cwd: root, seccompFd: null });
    expect(again.args.join(' ')).toContain(`--ro-bind /e ${join(root, '.codex')}`);
    expect(again.args.join(' ')).toContain(`--ro-bind ${join(root, '.aws')} ${join(root, '.aws')}`);
    expect(again.syntheticTargets).not.toContain(join(root, '.codex'));
    const byPath = new Map(policy.entries.map((e) => [e.path, e]));
    expect(() => findNestedProtected(root, byPath, { directories: 3, entries: 1000 })).toThrow(
      /more than 3 directories to search/,
    );
    expect(() => findNestedProtected(root, byPath, { directories: 1000, entries: 3 })).toThrow(/more than 3 entries/);
    expect(() => findNestedProtected(root, byPath, { directories: 3, entries: 1000 })).toThrow(SandboxPolicyError);
  });

  it('leaves a nested link named .git or .agents alone (a mount over it would fail every launch)', () => {
    const root = join(work, 'nested-links');
    mkdirSync(join(root, 'home', '.agents'), { recursive: true });
    mkdirSync(join(root, 'linked'), { recursive: true });
    symlinkSync(join(root, 'home', '.agents'), join(root, 'linked', '.agents'));
    const byPath = new Map([[root, { path: root, access: 'write' as const, skipMissing: false }]]);
    expect(findNestedProtected(root, byPath)).toEqual([join(root, 'home', '.agents')]);
  });

  it('keeps a tree nested past PATH_MAX read-only through its deepest ancestor that bubblewrap can name', () => {
    const root = join(work, 'deep');
    mkdirSync(root);
    // 25 levels of 200 bytes: past Linux's 4096 (made by relative steps, as an absolute path that long is refused).
    const level = 'd'.repeat(200);
    execFileSync('bash', [
      '-c',
      `cd '${root}' && for i in $(seq 25); do mkdir ${level} && cd ${level}; done && mkdir .git`,
    ]);
    const byPath = new Map([[root, { path: root, access: 'write' as const, skipMissing: false }]]);
    const found = findNestedProtected(root, byPath);
    expect(found).toHaveLength(1);
    expect(Buffer.byteLength(found[0]!)).toBeLessThan(4096);
    expect(found[0]!.startsWith(`${root}/${level}/`)).toBe(true);
  });

  it('a writable / that keeps a denial: only its top level is protected, and /dev and /proc go back over it', async () => {
    const secret = join(work, 'root-write-secret');
    writeFileSync(secret, 'x');
    const denied = { path: { type: 'glob_pattern', pattern: secret }, access: 'deny' };
    const policy = await resolvePolicy(context([{ path: special('root'), access: 'write' }, denied]));
    expect(policy.restrictsFileSystem).toBe(true);
    // No search of the whole disk (it would refuse the profile on any real machine).
    expect(policy.nestedProtectedPaths).toEqual([]);
    expect(policy.protectedPaths.sort()).toEqual(['/.agents', '/.aws', '/.codex', '/.git']);
    const sources = { deniedDirectory: '/d', deniedFile: '/f', emptyReadOnlyDirectory: '/e' };
    const args = bwrapArgs(policy, sources, { cwd: work, seccompFd: null }).args.join(' ');
    // The writable / is bound over the fresh /dev and /proc; they are mounted again after it, the denial kept.
    const rootBind = args.indexOf('--bind-try / /');
    expect(rootBind).toBeGreaterThan(-1);
    expect(args.indexOf('--dev /dev --proc /proc', rootBind)).toBeGreaterThan(rootBind);
    expect(args).toContain(`--ro-bind /f ${secret}`);
  });

  it('leaves unrestricted profiles unconfined', async () => {
    const disabled = decodeSandboxContext({ permissions: { type: 'disabled' }, windowsSandboxLevel: 'disabled' })!;
    expect(await resolvePolicy(disabled)).toMatchObject({ restrictsFileSystem: false, network: 'enabled' });
    const rootWrite = context([{ path: special('root'), access: 'write' }]);
    expect((await resolvePolicy(rootWrite)).restrictsFileSystem).toBe(false);
  });
});

describe('seccompProgram', () => {
  it('is a whole number of sock_filter records that ends in ALLOW, longer when the network is restricted', () => {
    if (!seccompSupported()) return;
    const restricted = seccompProgram('restricted');
    const enabled = seccompProgram('enabled');
    expect(restricted.length % 8).toBe(0);
    expect(restricted.length).toBeGreaterThan(enabled.length);
    // The last record: BPF_RET|BPF_K SECCOMP_RET_ALLOW.
    expect(restricted.readUInt16LE(restricted.length - 8)).toBe(0x06);
    expect(restricted.readUInt32LE(restricted.length - 4)).toBe(0x7fff0000);
    expect(() => seccompProgram('restricted', 'mips')).toThrow(/mips/);
  });
});

describe('likelySandboxDenied', () => {
  it('follows Codex: words of a denial, not for 0, 2, 126, 127; SIGSYS', () => {
    const out = (text: string) => [Buffer.from(text)];
    expect(likelySandboxDenied(1, out("touch: cannot touch 'x': Read-only file system"))).toBe(true);
    expect(likelySandboxDenied(0, out('Read-only file system'))).toBe(false);
    expect(likelySandboxDenied(2, out('Permission denied'))).toBe(true);
    expect(likelySandboxDenied(2, out(''))).toBe(false);
    expect(likelySandboxDenied(1, out(''))).toBe(false);
    expect(likelySandboxDenied(159, out(''))).toBe(true);
    // Across chunks.
    expect(likelySandboxDenied(1, [Buffer.from('Operation not per'), Buffer.from('mitted')])).toBe(true);
  });
});

describe('Sandboxer', () => {
  let sandbox: Sandboxer;
  beforeAll(() => {
    sandbox = Sandboxer.open();
  });
  afterAll(() => sandbox.close());

  const run = (prepared: PreparedSandbox, script: string) => {
    const fd = prepared.seccompFile === null ? null : openSync(prepared.seccompFile, 'r');
    try {
      const result = spawnSync(prepared.prefix!.file, [...prepared.prefix!.args, '/bin/bash', '-c', script], {
        stdio: ['ignore', 'pipe', 'pipe', fd ?? 'ignore'],
      });
      return { status: result.status, output: `${result.stdout}${result.stderr}` };
    } finally {
      if (fd !== null) closeSync(fd);
    }
  };

  it('closed while its walks run, refuses the start as unavailable (a state of the executor, not a fault of the request)', async () => {
    const own = Sandboxer.open();
    const root = join(work, 'closing');
    for (let i = 0; i < 500; i++) mkdirSync(join(root, `d${i}`, 'sub'), { recursive: true });
    const preparing = own.prepare(context([{ path: special('project_roots'), access: 'write' }], [root]), {
      cwd: root,
    });
    own.close();
    await expect(preparing).rejects.toBeInstanceOf(SandboxUnavailableError);
    await expect(preparing).rejects.toThrow(/the sandbox is closed/);
  });

  it('says whether it can enforce, and refuses a restricting profile when it cannot', async () => {
    const none = Sandboxer.none('no bubblewrap in this test');
    expect(none.status.available).toBe(false);
    await expect(none.prepare(context([]), { cwd: '/' })).rejects.toThrow(/no bubblewrap in this test/);
    // A profile that restricts nothing needs no sandbox, available or not.
    const open = decodeSandboxContext({
      permissions: { type: 'external', network: 'enabled' },
      windowsSandboxLevel: 'disabled',
    })!;
    expect((await none.prepare(open, { cwd: '/' })).prefix).toBeNull();
  });

  it('a mount point one sandbox made stays while another that found it is running, and goes with the last', async () => {
    if (!sandbox.status.available) return expect.fail(`the sandbox is unavailable here: ${sandbox.status.reason}`);
    const root = join(work, 'shared-mount-point');
    mkdirSync(root, { recursive: true });
    const profile = context(
      [
        { path: special('root'), access: 'read' },
        { path: special('project_roots'), access: 'write' },
      ],
      [root],
    );
    const first = await sandbox.prepare(profile, { cwd: root });
    // bubblewrap makes the missing .codex as a mount point on the host, where a second sandbox finds it empty.
    expect(run(first, 'mkdir .codex/x 2>&1; true').status).toBe(0);
    expect(readdirSync(root)).toContain('.codex');
    const second = await sandbox.prepare(profile, { cwd: root });
    first.release();
    // Still there while the second may be running (removed, its mount there would be detached), and still guarded.
    expect(readdirSync(root)).toContain('.codex');
    expect(run(second, 'mkdir .codex/y').output).toMatch(
      /mkdir: cannot create directory .\.codex\/y.: Read-only file system/,
    );
    second.release();
    expect(readdirSync(root)).not.toContain('.codex');
  });

  it('confines writes to the roots, keeps .git read-only, hides denied paths, and cleans up what it made', async () => {
    if (!sandbox.status.available) return expect.fail(`the sandbox is unavailable here: ${sandbox.status.reason}`);
    const root = join(work, 'r2');
    const outside = join(work, 'outside2');
    mkdirSync(join(root, '.git'), { recursive: true });
    mkdirSync(join(root, 'sub', '.git', 'hooks'), { recursive: true });
    writeFileSync(join(root, 'sub', '.git', 'hooks', 'pre-commit'), '#!/bin/sh\n');
    mkdirSync(outside, { recursive: true });
    writeFileSync(join(root, 'secret'), 'x');
    const prepared = await sandbox.prepare(
      context(
        [
          { path: special('root'), access: 'read' },
          { path: special('project_roots'), access: 'write' },
          { path: special('project_roots', { subpath: 'secret' }), access: 'deny' },
        ],
        [root],
      ),
      { cwd: root },
    );
    const result = run(
      prepared,
      `touch in && echo in-ok; touch ${outside}/x; touch .git/x; cat secret; mkdir .codex/y; ls -a; ` +
        'echo evil >> sub/.git/hooks/pre-commit; touch sub/in && echo sub-in-ok; ' +
        `(setsid sleep 1234 &); python3 -c 'import socket; socket.socket(socket.AF_INET)' 2>&1 | tail -1`,
    );
    prepared.release();
    expect(result.output).toContain('in-ok');
    expect(result.output).toContain(`touch: cannot touch '${outside}/x': Read-only file system`);
    expect(result.output).toContain("touch: cannot touch '.git/x': Read-only file system");
    expect(result.output).toContain('sub/.git/hooks/pre-commit: Read-only file system');
    expect(result.output).toContain('sub-in-ok');
    expect(readFileSync(join(root, 'sub', '.git', 'hooks', 'pre-commit'), 'utf8')).toBe('#!/bin/sh\n');
    expect(result.output).toContain('cat: secret: Permission denied');
    expect(result.output).toMatch(/mkdir: cannot create directory .\.codex\/y.: Read-only file system/);
    expect(result.output).toContain('PermissionError: [Errno 1] Operation not permitted');
    // The double-forked sleep died with the sandbox.
    expect(spawnSync('pgrep', ['-f', 'sleep 1234']).status).toBe(1);
    expect(readdirSync(outside)).toEqual([]);
    // The empty read-only directories made for the missing protected names are gone again.
    expect(readdirSync(root).sort()).toEqual(['.git', 'in', 'secret', 'sub']);
    expect(existsSync(join(root, '.codex'))).toBe(false);
  });
});
