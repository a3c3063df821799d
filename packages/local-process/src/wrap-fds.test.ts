import { fstatSync, readdirSync, readlinkSync, writeFileSync } from 'node:fs';
import { Socket } from 'node:net';
import path from 'node:path';
import { loadNativePipe } from '@tether/native-pipe';
import { describe, expect, it } from 'vitest';
import { useFreshTable } from './__tests__/fresh-table.js';
import { collectUntilClosed, readUntil, request } from './__tests__/helpers.js';
import type { ProcessWrap } from './types.js';
import { inheritedFdArg } from './wrap-fds.js';

const { fresh, tempDir } = useFreshTable();

/** What this process's descriptors point at (`socket:[inode]`, paths…). */
function ownDescriptors(): string[] {
  const out: string[] = [];
  for (const fd of readdirSync('/proc/self/fd')) {
    try {
      out.push(readlinkSync(`/proc/self/fd/${fd}`));
    } catch {
      // the directory's own fd, closed meanwhile
    }
  }
  return out;
}

async function descriptors0(table: ReturnType<typeof fresh>, tty: boolean): Promise<string> {
  await table.start(request('before', ['/bin/ls', '-l', '/proc/self/fd'], { tty }));
  return (await collectUntilClosed(table, 'before')).output;
}

describe("a wrap's inherited descriptors (the managed proxy's relay channel)", () => {
  it.each([false, true])(
    'tty %s: the wrapper gets them where its argv says, beside fd 3; the executor keeps no copy; a command started meanwhile has none',
    async (tty) => {
      const native = loadNativePipe();
      expect(native).not.toBeNull();
      const table = fresh();
      const before = await descriptors0(table, tty);
      const fd3File = path.join(tempDir(), 'fd3');
      writeFileSync(fd3File, 'fd3 says hi\n');
      const [mine, theirs] = native!.socketPair();
      const inode = fstatSync(theirs).ino;
      let made = 0;
      const wrap: ProcessWrap = {
        file: '/bin/bash',
        // The wrapper: what fd 3 holds and a word to the descriptor it was told (our socket), then the command
        // (keeping it, its number in $CHANNEL).
        args: [
          '-c',
          'cat <&3 >&"$1" && echo wrapper >&"$1" && exec 3<&- && export CHANNEL=$1 && shift && exec "$@"',
          'wrapper',
          inheritedFdArg(0),
        ],
        fd3File,
        classifyExit: () => false,
        released: () => undefined,
        inheritFds: () => {
          made++;
          return [theirs];
        },
      };
      const ours = new Socket({ fd: mine, readable: true, writable: true });
      let received = '';
      ours.on('data', (chunk: Buffer) => {
        received += chunk.toString();
      });
      const ended = new Promise<void>((resolve) => ours.once('end', () => resolve()));
      await table.start(
        request('wrapped', ['/bin/bash', '-c', 'echo "ready $CHANNEL"; read -r line <&"$CHANNEL"; echo "got $line"'], {
          tty,
          wrap,
        }),
      );
      expect(made).toBe(1);
      // Handed over: this process holds no copy of the child's end any more.
      expect(ownDescriptors()).not.toContain(`socket:[${inode}]`);
      // A pipe child has it as fd 4; on a PTY at the number it had here.
      expect(await readUntil(table, 'wrapped', '\n')).toMatch(tty ? /^ready (\d+)\r?\n$/ : /^ready 4\r?\n$/);
      const descriptors = async (id: string) => {
        await table.start(request(id, ['/bin/ls', '-l', '/proc/self/fd'], { tty }));
        return (await collectUntilClosed(table, id)).output;
      };
      // Another command, started while the wrapped one runs, holds no socket (ours least of all). (Not its
      // whole list: on a PTY it also gets the first one's master, node-pty's /dev/ptmx without close-on-exec.)
      expect(before).not.toContain('socket:[');
      expect(await descriptors('meanwhile')).not.toContain('socket:[');
      ours.write('go\n');
      const wrapped = await collectUntilClosed(table, 'wrapped');
      expect(wrapped.output).toContain('got go');
      // Every copy of the child's end is gone with the child: our end reads EOF.
      await ended;
      expect(received).toBe('fd3 says hi\nwrapper\n');
      ours.destroy();
    },
  );
});

describe("a PTY child's terminal", () => {
  it.each([false, true])(
    'tty %s: a command started while another runs on a PTY does not inherit that terminal’s master',
    async (tty) => {
      const table = fresh();
      await table.start(request('on-a-pty', ['/bin/sleep', '30'], { tty: true }));
      await table.start(
        request('later', ['/bin/bash', '-c', 'for f in /proc/$$/fd/*; do readlink "$f"; done'], { tty }),
      );
      const seen = (await collectUntilClosed(table, 'later')).output;
      expect(seen).toMatch(tty ? /\/dev\/pts\// : /pipe:/);
      expect(seen).not.toContain('/dev/ptmx');
      table.terminate('on-a-pty');
    },
  );
});
