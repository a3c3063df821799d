// Sandboxed file streaming (`sandboxedFileStreaming`): `fs/open` under a `sandbox`, then `fs/readBlock`,
// `fs/writeBlock` and `fs/close`, differential: the same workspace, profile and calls on Codex's exec-server (its
// codex-linux-sandbox helper, bubblewrap on the host) and ours, each answer pinned to what Codex 0.171.0 answers.
// Both open the path inside the sandbox and hand the open file back, so a handle stays on the file it opened
// whatever becomes of the path (CODEX-FINDINGS.md §21).

import { existsSync, linkSync, mkdirSync, readFileSync, symlinkSync, unlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { b64, decodeB64, fileUri, type TestClient } from '@tether/test-kit';
import { describe, expect, it } from 'vitest';
import { NOT_FOUND } from './fs-support.ts';
import { sandboxAt, useSandboxScratch, workspaceWrite } from './sandbox-support.ts';
import { KIND_CASES, useHarness } from './support.ts';

const READ_ONLY_FS = { code: -32603, message: 'Read-only file system (os error 30)' };
const DENIED = { code: -32600, message: 'Permission denied (os error 13)' };

describe('sandboxed file streaming on both executors', { timeout: 120_000 }, () => {
  const h = useHarness();
  const { layout } = useSandboxScratch();

  /** The workspace of `layout` plus a read-only directory, a denied directory and file, and a deny glob. */
  function workspace(kind: string) {
    const paths = layout(kind);
    const { root, outside } = paths;
    for (const dir of ['ro', 'hidden']) mkdirSync(join(root, dir));
    for (const file of ['ro/f', 'hidden/f', 'denied', 'a']) writeFileSync(join(root, file), `${file}\n`);
    writeFileSync(join(outside, 'victim'), 'victim\n');
    const profile = workspaceWrite('restricted');
    const path = (p: string) => ({ type: 'path', path: fileUri(join(root, p)) });
    profile.file_system.entries.push(
      { path: path('ro'), access: 'read' } as never,
      { path: path('hidden'), access: 'deny' } as never,
      { path: path('denied'), access: 'deny' } as never,
      { path: { type: 'glob_pattern', pattern: `${root}/**/secret*` }, access: 'deny' } as never,
    );
    return { ...paths, sandbox: sandboxAt(root, profile) };
  }

  /** fs/open under `sandbox`, then one block read (`read`) or written (`write`) and the handle closed. */
  async function stream(client: TestClient, sandbox: unknown, path: string, mode: 'read' | 'replace') {
    const handleId = `h-${mode}`;
    const opened = await client.request('fs/open', { handleId, path: fileUri(path), mode, sandbox });
    if (opened.error) return { error: opened.error };
    const block =
      mode === 'read'
        ? await client.request('fs/readBlock', { handleId, offset: 0, len: 64 })
        : await client.request('fs/writeBlock', { handleId, offset: 0, chunk: b64('written') });
    await client.call('fs/close', { handleId });
    if (block.error) return { error: block.error };
    const { chunk } = block.result as { chunk?: string };
    return chunk === undefined ? { wrote: true } : { read: decodeB64(chunk).toString() };
  }

  it.each(KIND_CASES)('%s: inside and outside the writable roots, read-only and denied paths', async (_label, kind) => {
    const { client, initializeResult } = await h.session(kind, 'ws');
    const info = initializeResult.environmentInfo as { capabilities: Record<string, unknown> };
    expect(info.capabilities.sandboxedFileStreaming).toBe(true);
    const { root, outside, sandbox } = workspace(kind);
    const at = (p: string) => join(root, p);
    const table = {
      'read inside': await stream(client, sandbox, at('a'), 'read'),
      'read outside (readable everywhere)': await stream(client, sandbox, join(outside, 'secret'), 'read'),
      'read a read-only entry': await stream(client, sandbox, at('ro/f'), 'read'),
      'read a denied directory': await stream(client, sandbox, at('hidden/f'), 'read'),
      'read a denied file': await stream(client, sandbox, at('denied'), 'read'),
      'read a file a deny glob matches': await stream(client, sandbox, at('sub/secret-key'), 'read'),
      'read a directory': await stream(client, sandbox, at('sub'), 'read'),
      'read a missing file': await stream(client, sandbox, at('missing'), 'read'),
      'replace inside (new)': await stream(client, sandbox, at('new'), 'replace'),
      'replace outside (existing)': await stream(client, sandbox, join(outside, 'victim'), 'replace'),
      'replace outside (new)': await stream(client, sandbox, join(outside, 'new'), 'replace'),
      'replace through a symlink out of the workspace': await stream(client, sandbox, at('link-out/victim'), 'replace'),
      'replace in .git': await stream(client, sandbox, at('.git/x'), 'replace'),
      'replace in a missing .codex': await stream(client, sandbox, at('.codex/x'), 'replace'),
      'replace a read-only entry': await stream(client, sandbox, at('ro/f'), 'replace'),
      'replace in a read-only entry (new)': await stream(client, sandbox, at('ro/new'), 'replace'),
      'replace in a denied directory': await stream(client, sandbox, at('hidden/f'), 'replace'),
      'replace a denied file': await stream(client, sandbox, at('denied'), 'replace'),
      'replace a file a deny glob matches': await stream(client, sandbox, at('sub/secret-key'), 'replace'),
      'replace a directory': await stream(client, sandbox, at('sub'), 'replace'),
      'replace under a missing directory': await stream(client, sandbox, at('nope/x'), 'replace'),
    };
    expect(table).toEqual({
      'read inside': { read: 'a\n' },
      'read outside (readable everywhere)': { read: 'top secret\n' },
      'read a read-only entry': { read: 'ro/f\n' },
      'read a denied directory': { error: DENIED },
      'read a denied file': { error: DENIED },
      'read a file a deny glob matches': { error: DENIED },
      'read a directory': { error: { code: -32600, message: `path \`${at('sub')}\` is not a file` } },
      'read a missing file': { error: NOT_FOUND },
      'replace inside (new)': { wrote: true },
      'replace outside (existing)': { error: READ_ONLY_FS },
      'replace outside (new)': { error: READ_ONLY_FS },
      'replace through a symlink out of the workspace': { error: READ_ONLY_FS },
      'replace in .git': { error: READ_ONLY_FS },
      'replace in a missing .codex': { error: READ_ONLY_FS },
      'replace a read-only entry': { error: READ_ONLY_FS },
      'replace in a read-only entry (new)': { error: READ_ONLY_FS },
      'replace in a denied directory': { error: DENIED },
      'replace a denied file': { error: READ_ONLY_FS },
      'replace a file a deny glob matches': { error: READ_ONLY_FS },
      'replace a directory': { error: { code: -32603, message: 'Is a directory (os error 21)' } },
      'replace under a missing directory': { error: NOT_FOUND },
    });
    // What was refused was not truncated, created or written on the host.
    expect(readFileSync(at('new'), 'utf8')).toBe('written');
    expect(readFileSync(join(outside, 'victim'), 'utf8')).toBe('victim\n');
    expect(readFileSync(at('ro/f'), 'utf8')).toBe('ro/f\n');
    expect(readFileSync(at('denied'), 'utf8')).toBe('denied\n');
    expect(readFileSync(at('sub/secret-key'), 'utf8')).toBe('workspace secret\n');
    expect(
      ['outside/new', 'ro/new', '.git/x'].filter((p) => existsSync(join(root, '..', p)) || existsSync(at(p))),
    ).toEqual([]);
    // A profile that makes nothing visible: the helper sees no file at all.
    const nothing = {
      permissions: { type: 'managed', file_system: { type: 'restricted', entries: [] }, network: 'restricted' },
      windowsSandboxLevel: 'disabled',
    };
    expect(await stream(client, nothing, at('a'), 'read')).toEqual({ error: NOT_FOUND });
    expect(await stream(client, nothing, at('fresh'), 'replace')).toEqual({ error: NOT_FOUND });
    expect(existsSync(at('fresh'))).toBe(false);
    // The handle's checks come first: a duplicate id is refused before the sandbox opens (or creates) anything.
    await client.call('fs/open', { handleId: 'dup', path: fileUri(at('a')) });
    const duplicate = await client.request('fs/open', {
      handleId: 'dup',
      path: fileUri(at('created?')),
      mode: 'replace',
      sandbox,
    });
    expect(duplicate.error).toEqual({ code: -32600, message: 'file handle `dup` already exists' });
    expect(existsSync(at('created?'))).toBe(false);
  });

  it.each(KIND_CASES)(
    '%s: a handle stays on the file the sandbox opened, whatever the path names later',
    async (_label, kind) => {
      const { client } = await h.session(kind, 'ws');
      const { root, outside, sandbox } = workspace(kind);
      const at = (p: string) => join(root, p);
      // A read handle through a symlink to a file inside, then the link pointed at a file the deny glob hides.
      symlinkSync(at('a'), at('l'));
      await client.call('fs/open', { handleId: 'r', path: fileUri(at('l')), mode: 'read', sandbox });
      unlinkSync(at('l'));
      symlinkSync(at('sub/secret-key'), at('l'));
      const read = await client.call<{ chunk: string }>('fs/readBlock', { handleId: 'r', offset: 0, len: 64 });
      expect(decodeB64(read.chunk).toString()).toBe('a\n');
      // A sandboxed read handle cannot write.
      expect((await client.request('fs/writeBlock', { handleId: 'r', offset: 0, chunk: b64('x') })).error).toEqual({
        code: -32603,
        message: 'Bad file descriptor (os error 9)',
      });
      await client.call('fs/close', { handleId: 'r' });
      // A write handle through a symlink to a new file inside, then the link pointed at a file outside the roots.
      symlinkSync(at('target'), at('w'));
      await client.call('fs/open', { handleId: 'w', path: fileUri(at('w')), mode: 'replace', sandbox });
      expect(existsSync(at('target'))).toBe(true);
      unlinkSync(at('w'));
      symlinkSync(join(outside, 'victim'), at('w'));
      await client.call('fs/writeBlock', { handleId: 'w', offset: 0, chunk: b64('into the target') });
      await client.call('fs/close', { handleId: 'w' });
      expect(readFileSync(at('target'), 'utf8')).toBe('into the target');
      expect(readFileSync(join(outside, 'victim'), 'utf8')).toBe('victim\n');
      // The name may even go: the handle still reads the file.
      await client.call('fs/open', { handleId: 'u', path: fileUri(at('ro/f')), mode: 'read', sandbox });
      unlinkSync(at('ro/f'));
      const gone = await client.call<{ chunk: string }>('fs/readBlock', { handleId: 'u', offset: 0, len: 64 });
      expect(decodeB64(gone.chunk).toString()).toBe('ro/f\n');
      // A hard link is the file it links to: a writable root's link to a file outside is written through on both
      // (the mount is the boundary, not the inode), as a command in the sandbox could.
      linkSync(join(outside, 'victim'), at('hard'));
      expect(await stream(client, sandbox, at('hard'), 'replace')).toEqual({ wrote: true });
      expect(readFileSync(join(outside, 'victim'), 'utf8')).toBe('written');
    },
  );

  it('tether: its own modes are confined too (update, overwrite, digest)', async () => {
    const { client } = await h.session('tether', 'ws');
    const { root, outside, sandbox } = workspace('tether');
    for (const mode of ['update', 'overwrite']) {
      const response = await client.request('fs/open', {
        handleId: mode,
        path: fileUri(join(outside, 'victim')),
        mode,
        sandbox,
      });
      expect(response.error).toEqual(READ_ONLY_FS);
    }
    expect(readFileSync(join(outside, 'victim'), 'utf8')).toBe('victim\n');
    writeFileSync(join(root, 'long'), 'old contents, longer than the new');
    await client.call('fs/open', { handleId: 'o', path: fileUri(join(root, 'long')), mode: 'overwrite', sandbox });
    await client.call('fs/writeBlock', { handleId: 'o', offset: 0, chunk: b64('new') });
    await client.call('fs/close', { handleId: 'o' });
    expect(readFileSync(join(root, 'long'), 'utf8')).toBe('new');
    await client.call('fs/open', { handleId: 'd', path: fileUri(join(root, 'a')), digest: true, sandbox });
    await client.call('fs/readBlock', { handleId: 'd', offset: 0, len: 64 });
    expect(await client.call('fs/close', { handleId: 'd' })).toMatchObject({ bytes: 2 });
  });

  it('tether: without descriptor passing it refuses a sandboxed fs/open and does not advertise it', async () => {
    const { client, initializeResult } = await h.session('tether', 'ws', { env: { TETHER_NATIVE_PIPE: 'off' } });
    const info = initializeResult.environmentInfo as { capabilities: Record<string, unknown> };
    expect(info.capabilities).toMatchObject({ processSandbox: true, sandboxedFileStreaming: false });
    const { root, sandbox } = workspace('tether');
    const response = await client.request('fs/open', {
      handleId: 'h',
      path: fileUri(join(root, 'created?')),
      mode: 'replace',
      sandbox,
    });
    expect(response.error).toEqual({
      code: -32600,
      message:
        "fs/open cannot be confined on this executor: passing the sandbox's descriptor needs @tether/native-pipe (TETHER_NATIVE_PIPE=off)",
    });
    expect(existsSync(join(root, 'created?'))).toBe(false);
    // Unconfined it opens as ever, and the other fs calls stay confined.
    expect(await client.call('fs/open', { handleId: 'h', path: fileUri(join(root, 'a')) })).toEqual({ handleId: 'h' });
    expect((await client.request('fs/readFile', { path: fileUri(join(root, 'denied')), sandbox })).error).toEqual(
      DENIED,
    );
  });
});
