// A sandbox whose whole disk is writable but which keeps the profile's denials (what Codex's agent runs after an
// approved escalation: `linuxApprovedRootWritePreservesRestrictions`), and whose devices still work
// (`linuxRootWritePreservesDevices`): the same commands on both executors (CODEX-FINDINGS.md §21).
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { collectUntilClosed } from '@tether/test-kit';
import { describe, expect, it } from 'vitest';
import { sandboxAt, useSandboxScratch } from './sandbox-support.ts';
import { KIND_CASES, useHarness } from './support.ts';

const special = (kind: string) => ({ type: 'special', value: { kind } });

describe.each(KIND_CASES)('a writable root that keeps its denials: %s', (kind) => {
  const h = useHarness();
  const scratch = useSandboxScratch();

  it('advertises both capabilities', async () => {
    const { initializeResult } = await h.session(kind, 'ws');
    const { capabilities } = initializeResult.environmentInfo as { capabilities: Record<string, boolean> };
    expect(capabilities).toMatchObject({
      linuxRootWritePreservesDevices: true,
      linuxApprovedRootWritePreservesRestrictions: true,
    });
  });

  it('writes anywhere but where denied; denied files stay unreadable; /dev/null and /dev/urandom work', async () => {
    const { client } = await h.session(kind, 'ws');
    const { root, outside, base } = scratch.layout(kind);
    const permissions = {
      type: 'managed',
      file_system: {
        type: 'restricted',
        entries: [
          { path: special('root'), access: 'write' },
          { path: { type: 'glob_pattern', pattern: `${outside}/**` }, access: 'deny' },
        ],
      },
      network: 'restricted',
    };
    const script = [
      'echo discarded > /dev/null && echo dev-null-works',
      'head -c 16 /dev/urandom | wc -c',
      `cat '${outside}/secret' || echo secret-unreadable`,
      `echo planted >> '${outside}/secret' || echo denied-file-unwritable`,
      // A glob denies what it matches at launch (both executors): a file made later is not covered.
      `echo made > '${outside}/made-later' && echo new-file-not-denied`,
      `echo landed > '${base}/elsewhere' && echo wrote-elsewhere`,
      'echo landed > written-in-workspace && echo wrote-workspace',
    ].join('; ');
    await client.call(
      'process/start',
      scratch.startParams('root-write', ['/bin/bash', '-c', script], root, sandboxAt(root, permissions)),
    );
    // stdout only: the shell's start-up files may complain on stderr in a sandbox.
    const result = await collectUntilClosed(client, 'root-write');
    expect(result).toMatchObject({
      exitCode: 0,
      stdout:
        'dev-null-works\n16\nsecret-unreadable\ndenied-file-unwritable\nnew-file-not-denied\nwrote-elsewhere\nwrote-workspace\n',
    });
    expect(readFileSync(join(base, 'elsewhere'), 'utf8')).toBe('landed\n');
    expect(readFileSync(join(outside, 'secret'), 'utf8')).toBe('top secret\n');
    expect(existsSync(join(outside, 'made-later'))).toBe(true);
  });
});
