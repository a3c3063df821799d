// A descriptor the executor inherited reaches no command (security review, issue 33 item 2): started by a
// launcher that left fd 100 open on a host file, the executor makes it close-on-exec at start, so neither
// a plain command (pipes or a PTY) nor a `-s read-only` one (bubblewrap) can write to the file through it.
// Ours only: Codex's exec-server passes such a descriptor on (not a behaviour to match).
import { closeSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { collectUntilClosed, fileUri } from '@tether/test-kit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useHarness } from './support.ts';

const LEAKED = 100;

/**
 * Lists the shell's own fds by a glob the shell expands itself (a `$(ls …)` raced: bash closes its copy of
 * the substitution pipe's write end only after the fork, so `ls` sometimes saw it as fd 4), then tries to
 * write through the leaked one.
 */
const SCRIPT = `fds=(/proc/$$/fd/*); echo "fds \${fds[*]##*/}"; if { echo through-${LEAKED} >&${LEAKED}; } 2>/dev/null; then echo wrote; else echo refused; fi`;

const READ_ONLY = {
  type: 'managed',
  file_system: {
    type: 'restricted',
    entries: [{ path: { type: 'special', value: { kind: 'root' } }, access: 'read' }],
  },
  network: 'restricted',
};

describe('descriptors the executor inherited', () => {
  const h = useHarness();
  let scratch: string;
  let hostFile: string;
  let leakedFd: number;

  beforeAll(() => {
    scratch = mkdtempSync(join(tmpdir(), 'inherited-fds-'));
    hostFile = join(scratch, 'host-file');
    writeFileSync(hostFile, 'host\n');
    leakedFd = openSync(hostFile, 'a');
  });
  afterAll(() => {
    closeSync(leakedFd);
    rmSync(scratch, { recursive: true, force: true });
  });

  it('reach no command, sandboxed or not, and the host file stays as it was', async () => {
    const { client, peer } = await h.session('tether', 'ws', { inheritFds: { [LEAKED]: leakedFd } });
    // The executor itself holds it (else this would prove nothing).
    expect(readFileSync(`/proc/${peer.pid}/fdinfo/${LEAKED}`, 'utf8')).toMatch(/^flags:/m);
    const root = join(scratch, 'workspace');
    mkdirSync(root, { recursive: true });
    const outcomes: Record<string, string> = {};
    const cases: [string, Record<string, unknown>][] = [
      ['pipes', {}],
      ['pty', { tty: true }],
      [
        'read-only sandbox',
        {
          sandbox: {
            permissions: READ_ONLY,
            cwd: fileUri(root),
            workspaceRoots: [fileUri(root)],
            windowsSandboxLevel: 'disabled',
            useLegacyLandlock: false,
          },
        },
      ],
    ];
    for (const [name, extra] of cases) {
      const id = `fd-${name.replaceAll(' ', '-')}`;
      const started = (await client.call('process/start', {
        processId: id,
        argv: ['/bin/bash', '-c', SCRIPT],
        cwd: fileUri(root),
        env: { PATH: '/usr/bin:/bin' },
        tty: false,
        pipeStdin: false,
        arg0: null,
        ...extra,
      })) as { sandboxType?: string };
      expect(started.sandboxType, name).toBe('sandbox' in extra ? 'linuxSeccomp' : 'none');
      const collected = await collectUntilClosed(client, id);
      expect(collected.exitCode, `${name}: ${collected.output}`).toBe(0);
      outcomes[name] = collected.output.replaceAll('\r', '').trim();
    }
    for (const [name, output] of Object.entries(outcomes)) {
      const fds = /^fds (.*)$/m
        .exec(output)?.[1]
        ?.trim()
        .split(' ')
        .map(Number)
        .sort((a, b) => a - b);
      // Its stdio, and the directory the glob reads (3); before, also 100 (and whatever else leaked).
      expect(fds, `${name}: ${output}`).toEqual([0, 1, 2, 3]);
      expect(output, name).toMatch(/^refused$/m);
    }
    expect(readFileSync(hostFile, 'utf8')).toBe('host\n');
  });

  it('without the native addon the executor still starts, and warns that they reach every command', async () => {
    const { client, peer } = await h.session('tether', 'ws', {
      inheritFds: { [LEAKED]: leakedFd },
      env: { TETHER_NATIVE_PIPE: 'off' },
    });
    expect(
      await client.call('process/start', {
        processId: 'p',
        argv: ['/bin/true'],
        cwd: fileUri(scratch),
        env: {},
        tty: false,
        pipeStdin: false,
        arg0: null,
      }),
    ).toMatchObject({ processId: 'p' });
    expect(peer.stderr()).toContain('cannot make inherited descriptors close-on-exec');
    expect(peer.stderr()).toContain('TETHER_NATIVE_PIPE=off');
  });
});
