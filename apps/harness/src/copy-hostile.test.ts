/**
 * `cp -r` from an executor that lies: its listings name entries outside the destination, links, and trees
 * that never end. A stand-in executor connection (only the harness side is under test) serves a made-up
 * tree over `fs/*`; nothing may land outside the destination, and each refusal names the entry.
 */
import { createHash } from 'node:crypto';
import {
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import {
  type DirectoryEntry,
  decodeAnswer,
  type Environment,
  type EnvironmentFs,
  LocalFs,
  RemoteFs,
} from '@tether/client';
import { type HostileTree, hostileFsAnswers } from '@tether/test-kit';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { copy, type Endpoint, MAX_TREE_DEPTH, SHA256SUM_OUTPUT_BYTES, sha256Of } from './copy.js';

/** The SDK's RemoteFs over the stand-in (it checks listings itself). */
function remoteFs(tree: HostileTree, deep = false): RemoteFs {
  const answer = hostileFsAnswers(() => tree, { deep });
  return new RemoteFs({
    capabilities: () => new Set(),
    // Decoded at the edge, as the SDK's ExecServerClient decodes what a real executor answers.
    call: async (method, params) => {
      const result = answer(method, (params ?? {}) as Record<string, unknown>);
      if (result === null) throw new Error(`the stand-in does not answer ${method}`);
      return decodeAnswer(method, result);
    },
  });
}

/** How a lying executor bends its `fs/readFiles` answer (gets the honest one, the paths asked and the limits). */
type ReadFilesLie = (honest: { files: Array<Record<string, unknown>> }, params: Record<string, unknown>) => unknown;

/**
 * The SDK's RemoteFs over the stand-in, advertising `fileBatch` and `fileMetadata`: `fs/readFiles` answers
 * from the tree (through `lie`, when given), `fs/getMetadata {unix}` and `fs/setMetadata` as an executor would.
 */
function batchFs(tree: HostileTree, lie?: ReadFilesLie, deep = false): RemoteFs {
  const answer = hostileFsAnswers(() => tree, { deep });
  const pathOf = (uri: unknown) => decodeURIComponent(new URL(String(uri)).pathname);
  const fileAt = (path: string) => {
    const slash = path.lastIndexOf('/');
    return tree[path.slice(0, slash) || '/']?.find((entry) => entry.name === path.slice(slash + 1))?.file;
  };
  return new RemoteFs({
    capabilities: () => new Set(['fileBatch', 'fileMetadata']),
    call: async (method, params) => decodeAnswer(method, await batchAnswer(method, params)),
  });

  async function batchAnswer(method: string, params: unknown): Promise<unknown> {
    const p = (params ?? {}) as Record<string, unknown>;
    if (method === 'fs/readFiles') {
      const honest = {
        files: (p.paths as string[]).map((uri) => {
          const file = fileAt(pathOf(uri));
          if (file === undefined) return { error: { code: -32004, message: 'No such file or directory (os error 2)' } };
          return {
            dataBase64: Buffer.from(file).toString('base64'),
            sha256: createHash('sha256').update(file).digest('hex'),
            mode: 0o640,
            modifiedAtMs: 1_000_000_000_000,
            accessedAtMs: 1_000_000_000_000,
          };
        }),
      };
      return lie ? lie(honest, p) : honest;
    }
    if (method === 'fs/getMetadata' && p.unix === true) {
      return { ...(answer(method, p) as object), mode: 0o750, accessedAtMs: 0 };
    }
    const result = answer(method, p);
    if (result === null) throw new Error(`the stand-in does not answer ${method}`);
    return result;
  }
}

/** An EnvironmentFs that hands listings through unchecked: the copy's own checks must hold alone. */
function uncheckedFs(tree: HostileTree): EnvironmentFs {
  const fs = remoteFs(tree);
  const raw = Object.create(fs) as EnvironmentFs;
  raw.readDirectory = async (path: string) =>
    (tree[path] ?? []).map(
      (entry): DirectoryEntry => ({
        fileName: entry.name,
        isDirectory: entry.file === undefined,
        isFile: entry.file !== undefined,
      }),
    );
  return raw;
}

let box: string;
let destination: string;
beforeEach(() => {
  box = mkdtempSync(join(tmpdir(), 'tether-hostile-cp-'));
  destination = join(box, 'dst');
  mkdirSync(destination);
  writeFileSync(join(box, 'outside.txt'), 'untouched');
  mkdirSync(join(box, 'outside-dir'));
});
afterEach(() => rmSync(box, { recursive: true, force: true }));

/** Every path under the box but outside the destination, with its contents: what must not change. */
function outsideDestination(): Record<string, string> {
  const seen: Record<string, string> = {};
  const walk = (dir: string) => {
    for (const name of readdirSync(dir)) {
      const path = join(dir, name);
      if (path === destination) continue;
      const info = lstatSync(path);
      seen[relative(box, path)] = info.isDirectory()
        ? '<dir>'
        : info.isSymbolicLink()
          ? '<link>'
          : readFileSync(path, 'utf8');
      if (info.isDirectory()) walk(path);
    }
  };
  walk(box);
  return seen;
}

const source = (fs: EnvironmentFs, path = '/tree'): Endpoint => ({
  fs,
  env: {} as Environment, // remote: read through its fs, never hashed locally
  path,
  label: `hostile:${path}`,
});
const local = (path: string): Endpoint => ({ fs: new LocalFs(), env: null, path, label: path });

const BAD_NAMES: Array<[string, string]> = [
  ['../../x', 'contains "/"'],
  ['a/b', 'contains "/"'],
  ['..', 'is ".."'],
  ['', 'is empty'],
  ['x\u0000y', 'contains a NUL byte'],
];

describe('cp -r from a hostile executor', () => {
  for (const [name, why] of BAD_NAMES) {
    it(`refuses the entry ${JSON.stringify(name)} and writes nothing outside the destination`, async () => {
      const tree: HostileTree = {
        '/tree': [
          { name: 'ok', file: 'fine' },
          { name, file: 'pwned' },
        ],
        '/tree/a': [{ name: 'b', file: 'pwned' }],
      };
      const before = outsideDestination();
      // Through the SDK (RemoteFs checks the listing)…
      await expect(copy(source(remoteFs(tree)), local(destination), { recursive: true })).rejects.toThrow(
        `entry name ${JSON.stringify(name)} ${why}`,
      );
      // …and through a filesystem that does not: the copy's own check names the entry too.
      await expect(copy(source(uncheckedFs(tree)), local(destination), { recursive: true })).rejects.toThrow(
        `refusing entry ${JSON.stringify(name)} listed in /tree: the name ${why}`,
      );
      // The batched path (fileBatch) reads the same listings.
      await expect(copy(source(batchFs(tree)), local(destination), { recursive: true })).rejects.toThrow(
        `entry name ${JSON.stringify(name)} ${why}`,
      );
      expect(outsideDestination()).toEqual(before);
      expect(existsSync(join(box, 'x'))).toBe(false);
    });
  }

  it('a link in the remote tree is skipped and reported: never made, never taken for what it points to', async () => {
    const claimed = join(box, 'evil-target');
    const tree: HostileTree = {
      '/tree': [
        { name: 'evil', file: 'what the link points to', link: claimed },
        { name: 'plain', file: 'a file' },
      ],
    };
    const before = outsideDestination();
    const skipped: string[] = [];
    await expect(
      copy(source(remoteFs(tree)), local(destination), {
        recursive: true,
        onSkip: (path, kind) => skipped.push(`${kind} ${path}`),
      }),
    ).resolves.toMatchObject({ files: 1, skipped: 1 });
    expect(skipped).toEqual(['link /tree/evil']);
    expect(existsSync(join(destination, 'tree', 'evil'))).toBe(false);
    expect(readFileSync(join(destination, 'tree', 'plain'), 'utf8')).toBe('a file');
    expect(existsSync(claimed)).toBe(false);
    expect(outsideDestination()).toEqual(before);
  });

  it('never writes through a link already in the destination that points outside it', async () => {
    mkdirSync(join(destination, 'tree'));
    symlinkSync(join(box, 'outside.txt'), join(destination, 'tree', 'evil'));
    const before = outsideDestination();
    const error = await copy(source(remoteFs({ '/tree': [{ name: 'evil', file: 'pwned' }] })), local(destination), {
      recursive: true,
    }).catch((err: unknown) => err);
    expect((error as Error).message).toBe(
      `refusing to write through the symbolic link ${join(destination, 'tree', 'evil')} inside the destination; remove it or copy elsewhere`,
    );
    expect(readFileSync(join(box, 'outside.txt'), 'utf8')).toBe('untouched');
    expect(outsideDestination()).toEqual(before);
  });

  it('never descends into a directory link in the destination that points outside it', async () => {
    mkdirSync(join(destination, 'tree'));
    symlinkSync(join(box, 'outside-dir'), join(destination, 'tree', 'sub'));
    const tree: HostileTree = { '/tree': [{ name: 'sub' }], '/tree/sub': [{ name: 'planted', file: 'pwned' }] };
    await expect(copy(source(remoteFs(tree)), local(destination), { recursive: true })).rejects.toThrow(
      `refusing to write through the symbolic link ${join(destination, 'tree', 'sub')}`,
    );
    expect(readdirSync(join(box, 'outside-dir'))).toEqual([]);
  });

  it('follows a destination root that is itself a link: the user named it', async () => {
    symlinkSync(join(box, 'outside-dir'), join(box, 'chosen'));
    await copy(source(remoteFs({ '/tree': [{ name: 'f', file: 'ok' }] })), local(join(box, 'chosen')), {
      recursive: true,
    });
    expect(readFileSync(join(box, 'outside-dir', 'tree', 'f'), 'utf8')).toBe('ok');
    // With -p too (batched), through a link the user named: files and directories get the source's metadata.
    await copy(source(batchFs({ '/tree': [{ name: 'g', file: 'ok' }] })), local(join(box, 'chosen', 'as-root')), {
      recursive: true,
      preserve: true,
    });
    expect(readFileSync(join(box, 'outside-dir', 'as-root', 'g'), 'utf8')).toBe('ok');
    symlinkSync(join(box, 'outside-dir', 'as-root'), join(box, 'root-link'));
    await copy(source(batchFs({ '/tree': [{ name: 'h', file: 'ok' }] })), local(join(box, 'root-link')), {
      recursive: true,
      preserve: true,
    });
    expect(lstatSync(join(box, 'outside-dir', 'as-root', 'tree')).mode & 0o7777).toBe(0o750);
  });

  it(`stops a tree that never ends at ${MAX_TREE_DEPTH} levels`, async () => {
    await expect(copy(source(remoteFs({}, true)), local(destination), { recursive: true })).rejects.toThrow(
      `nests directories deeper than ${MAX_TREE_DEPTH} levels`,
    );
  });
});

describe('cp -r from a hostile executor with fileBatch (many small files per request)', () => {
  const tree: HostileTree = {
    '/tree': [{ name: 'a', file: 'alpha' }, { name: 'sub' }],
    '/tree/sub': [
      { name: 'b', file: 'beta' },
      { name: 'c', file: '' },
    ],
  };

  it('copies a tree whole in batches, with -p its modes and times', async () => {
    const stats = await copy(source(batchFs(tree)), local(destination), { recursive: true, preserve: true });
    expect(stats).toMatchObject({ files: 3, directories: 2, bytes: 9 });
    const root = join(destination, 'tree');
    expect(readFileSync(join(root, 'a'), 'utf8')).toBe('alpha');
    expect(readFileSync(join(root, 'sub', 'b'), 'utf8')).toBe('beta');
    expect(readFileSync(join(root, 'sub', 'c'), 'utf8')).toBe('');
    expect(lstatSync(join(root, 'sub', 'b')).mode & 0o7777).toBe(0o640);
    expect(Math.floor(lstatSync(join(root, 'sub', 'b')).mtimeMs)).toBe(1_000_000_000_000);
    expect(lstatSync(join(root, 'sub')).mode & 0o7777).toBe(0o750);
  });

  it('never writes through a link planted where a batched file goes', async () => {
    mkdirSync(join(destination, 'tree'));
    symlinkSync(join(box, 'outside.txt'), join(destination, 'tree', 'a'));
    const before = outsideDestination();
    await expect(copy(source(batchFs(tree)), local(destination), { recursive: true })).rejects.toThrow(
      `refusing to write through the symbolic link ${join(destination, 'tree', 'a')} inside the destination; remove it or copy elsewhere`,
    );
    expect(readFileSync(join(box, 'outside.txt'), 'utf8')).toBe('untouched');
    expect(outsideDestination()).toEqual(before);
  });

  const lies: Array<[string, ReadFilesLie, string]> = [
    [
      'answers more bytes than a file may have',
      (honest, params) => ({
        files: honest.files.map((entry) => ({
          ...entry,
          dataBase64: Buffer.alloc((params.maxFileBytes as number) + 1).toString('base64'),
        })),
      }),
      'more bytes than asked for',
    ],
    [
      'answers fewer entries than paths',
      (honest) => ({ files: honest.files.slice(1) }),
      "the executor's fs/readFiles answer is unusable: expected",
    ],
    [
      'defers the first file (forever)',
      (honest) => ({ files: honest.files.map(() => ({ deferred: true })) }),
      'the first file was deferred',
    ],
    [
      'sends a digest that is not of the bytes',
      (honest) => ({ files: honest.files.map((entry) => ({ ...entry, sha256: 'f'.repeat(64) })) }),
      'integrity check failed',
    ],
    [
      'sends a mode that is not permission bits',
      (honest) => ({ files: honest.files.map((entry) => ({ ...entry, mode: 0o170777 })) }),
      // Checked against the fs/readFiles result schema at the SDK's edge (modes are 0..0o7777).
      'the executor answered fs/readFiles with something that is not its result',
    ],
    [
      'answers without base64',
      (honest) => ({ files: honest.files.map((entry) => ({ ...entry, dataBase64: '@@' })) }),
      'is not base64',
    ],
  ];
  for (const [what, lie, message] of lies) {
    it(`refuses an executor that ${what}, and writes nothing outside the destination`, async () => {
      const before = outsideDestination();
      await expect(copy(source(batchFs(tree, lie)), local(destination), { recursive: true })).rejects.toThrow(message);
      expect(outsideDestination()).toEqual(before);
    });
  }

  it(`stops a tree that never ends at ${MAX_TREE_DEPTH} levels`, async () => {
    await expect(copy(source(batchFs({}, undefined, true)), local(destination), { recursive: true })).rejects.toThrow(
      `nests directories deeper than ${MAX_TREE_DEPTH} levels`,
    );
  });
});

describe('cp -p against an executor without fileMetadata (Codex)', () => {
  it('is refused before anything is copied, naming the side', async () => {
    await expect(
      copy(source(remoteFs({ '/tree': [{ name: 'a', file: 'x' }] })), local(destination), {
        recursive: true,
        preserve: true,
      }),
    ).rejects.toThrow(
      "-p needs file modes and times from both sides, and hostile:/tree is on an executor without Tether's fileMetadata",
    );
    expect(readdirSync(destination)).toEqual([]);
  });
});

describe('hashing at a hostile destination', () => {
  it(`keeps at most ${SHA256SUM_OUTPUT_BYTES} bytes of a sha256sum that never stops talking, then reads the file back`, async () => {
    const file = join(box, 'hashed.bin');
    writeFileSync(file, 'contents');
    let pulled = 0;
    let terminated = false;
    const block = Buffer.alloc(1024 * 1024, 0x61);
    const handle = {
      async *[Symbol.asyncIterator]() {
        for (let i = 0; i < 1024; i++) {
          pulled++;
          yield { kind: 'output', stream: 'stdout', seq: i + 1, chunk: block };
        }
      },
      completion: Promise.resolve({ exitCode: 0 }),
      terminate: async () => {
        terminated = true;
      },
      dispose: () => undefined,
    };
    const env = { spawn: async () => handle } as unknown as Environment;
    const digest = await sha256Of({ fs: new LocalFs(), env, path: file, label: file }, file);
    expect(digest).toBe(createHash('sha256').update('contents').digest('hex'));
    expect(terminated).toBe(true);
    expect(pulled).toBeLessThanOrEqual(2);
  });
});
