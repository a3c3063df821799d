import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { pathToFileUri } from '@tether/exec-protocol';
import { Sandboxer } from '@tether/sandbox';
import { afterAll, describe, expect, it } from 'vitest';
import { confinement, openConfined } from './confined.js';
import { FileHandleTable } from './file-handles.js';

// Outside /tmp, which the platform defaults leave alone: the policy below makes only `dir` writable.
const dir = mkdtempSync('/var/tmp/tether-confined-');
mkdirSync(join(dir, 'writable'));
const sandbox = Sandboxer.open();
afterAll(() => {
  sandbox.close();
  rmSync(dir, { recursive: true, force: true });
});

const context = confinement({
  permissions: {
    type: 'managed',
    file_system: {
      type: 'restricted',
      entries: [
        { path: { type: 'special', value: { kind: 'root' } }, access: 'read' },
        { path: { type: 'path', path: pathToFileUri(join(dir, 'writable')) }, access: 'write' },
      ],
    },
    network: 'restricted',
  },
  windowsSandboxLevel: 'disabled',
})!;

const openFds = () => readdirSync('/proc/self/fd').length;

describe('openConfined', () => {
  it('hands back the file the sandbox opened: the path is not opened again, whatever it names afterwards', async () => {
    if (!sandbox.status.available) return expect.fail(`the sandbox is unavailable here: ${sandbox.status.reason}`);
    const ctx = { sandbox, adopter: null };
    const writable = join(dir, 'writable');
    const [path, swapped] = [join(writable, 'f'), join(writable, 'g')];
    writeFileSync(path, 'opened in the sandbox');
    writeFileSync(swapped, 'put in its place after');
    const files = new FileHandleTable();
    try {
      const read = await openConfined(ctx, context, path, 'read');
      renameSync(swapped, path);
      await files.open('r', path, 'read', false, read);
      expect((await files.readBlock('r', 0, 64)).chunk.toString()).toBe('opened in the sandbox');
      // replace: created (and truncated) inside the sandbox; the writes go to that file, wherever it is now.
      const created = join(writable, 'new');
      const write = await openConfined(ctx, context, created, 'replace');
      expect(statSync(created).size).toBe(0);
      renameSync(created, join(writable, 'moved'));
      await files.open('w', created, 'replace', false, write);
      await files.writeBlock('w', 0, Buffer.from('through the sandbox'));
      await files.close('w');
      expect(readFileSync(join(writable, 'moved'), 'utf8')).toBe('through the sandbox');
      expect(existsSync(created)).toBe(false);
    } finally {
      await files.closeAll();
    }
    // Refused by the sandbox (outside the writable root): its error, nothing created, no descriptor left open.
    const before = openFds();
    await expect(openConfined(ctx, context, join(dir, 'outside'), 'replace')).rejects.toMatchObject({
      code: -32603,
      message: 'Read-only file system (os error 30)',
    });
    await expect(openConfined(ctx, context, writable, 'read')).rejects.toMatchObject({
      code: -32600,
      message: `path \`${writable}\` is not a file`,
    });
    expect(existsSync(join(dir, 'outside'))).toBe(false);
    expect(openFds()).toBe(before);
  });
});
