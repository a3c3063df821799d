import type { ProcessInfo } from '@tether/client';
import { InvalidArgumentError } from 'commander';
import { describe, expect, it } from 'vitest';
import { DetachKeyMatcher, formatProcessTable, parseDetachKeys, parseSignal } from './processes.js';

describe('parseDetachKeys', () => {
  it('reads docker-style keys', () => {
    expect([...parseDetachKeys('ctrl-p,ctrl-q')]).toEqual([0x10, 0x11]);
    expect([...parseDetachKeys('ctrl-\\')]).toEqual([0x1c]);
    expect([...parseDetachKeys('~,.')]).toEqual([0x7e, 0x2e]);
    expect([...parseDetachKeys('ctrl-@,ctrl-_')]).toEqual([0x00, 0x1f]);
  });

  it('refuses what is not one key', () => {
    for (const bad of ['', 'ctrl-', 'ctrl-1', 'ab', 'alt-x', 'a,,b', '\u0007', 'a,b,c,d,e,f,g,h,i']) {
      expect(() => parseDetachKeys(bad), bad).toThrow(InvalidArgumentError);
    }
  });
});

describe('DetachKeyMatcher', () => {
  const keys = parseDetachKeys('ctrl-p,ctrl-q');
  it('detaches on the sequence, across chunks, and forwards nothing of it', () => {
    const matcher = new DetachKeyMatcher(keys);
    expect(matcher.feed(Buffer.from('ab\x10'))).toEqual({ forward: Buffer.from('ab'), detach: false });
    expect(matcher.feed(Buffer.from('\x11rest'))).toEqual({ forward: Buffer.from(''), detach: true });
  });

  it('passes held keys on when the next one is not the sequence', () => {
    const matcher = new DetachKeyMatcher(keys);
    expect(matcher.feed(Buffer.from('\x10x'))).toEqual({ forward: Buffer.from('\x10x'), detach: false });
    // Ctrl-P Ctrl-P Ctrl-Q: the first Ctrl-P goes out, the second starts the sequence again.
    expect(matcher.feed(Buffer.from('\x10\x10\x11'))).toEqual({ forward: Buffer.from('\x10'), detach: true });
  });

  it('a one-key sequence detaches at once', () => {
    const matcher = new DetachKeyMatcher(parseDetachKeys('ctrl-\\'));
    expect(matcher.feed(Buffer.from('a\x1cb'))).toEqual({ forward: Buffer.from('a'), detach: true });
    expect(new DetachKeyMatcher(parseDetachKeys('ctrl-\\')).feed(Buffer.from('\x1c'))).toEqual({
      forward: Buffer.from(''),
      detach: true,
    });
  });
});

describe('parseSignal', () => {
  it('takes usual names, SIG prefixes, lower case, protocol names and the portable numbers', () => {
    expect(parseSignal('TERM')).toBe('terminate');
    expect(parseSignal('sigkill')).toBe('kill');
    expect(parseSignal('9')).toBe('kill');
    expect(parseSignal('INT')).toBe('interrupt');
    expect(parseSignal('hup')).toBe('hangup');
    expect(parseSignal('USR2')).toBe('user2');
    expect(parseSignal('user1')).toBe('user1');
  });

  it('refuses others (USR1 by number differs between systems)', () => {
    for (const bad of ['10', 'STOP', 'SIGWINCH', '', '0'])
      expect(() => parseSignal(bad), bad).toThrow(InvalidArgumentError);
  });
});

describe('formatProcessTable', () => {
  const entry = (over: Partial<ProcessInfo>): ProcessInfo => ({
    processId: 'a1',
    state: 'running',
    pid: 42,
    argv: ['sleep', '60'],
    tty: false,
    exitCode: null,
    nextSeq: 1,
    startedAtMs: Date.UTC(2026, 11, 2, 7, 45, 5),
    detached: true,
    ...over,
  });

  it('aligns the columns, oldest first, and shows control characters as ?', () => {
    const text = formatProcessTable([
      entry({ processId: 'later', startedAtMs: Date.UTC(2026, 11, 2, 8, 0, 0), state: 'closed', exitCode: 3, pid: 7 }),
      entry({ argv: ['/bin/sh', '-c', 'echo "x\u001b[2Jy"; exit 1'] }),
      entry({ processId: 'new\u0007', state: 'starting', pid: null, startedAtMs: Date.UTC(2026, 11, 2, 9, 0, 0) }),
    ]);
    expect(text).toBe(
      [
        'ID     STATE      PID  STARTED               COMMAND',
        `a1     running    42   2026-12-02 07:45:05Z  /bin/sh -c 'echo "x?[2Jy"; exit 1'`,
        'later  exited(3)  7    2026-12-02 08:00:00Z  sleep 60',
        'new?   starting   -    2026-12-02 09:00:00Z  sleep 60',
        '',
      ].join('\n'),
    );
  });

  it('shows a SHARES column once a process is shared: id, access, sessions following, minutes left', () => {
    const now = Date.UTC(2026, 11, 2, 10, 0, 0);
    const shares = [
      { shareId: 'abc', access: 'view' as const, expiresAtMs: now + 90_000, attached: 2 },
      { shareId: 'def', access: 'control' as const, expiresAtMs: now + 3_600_000, attached: 0 },
    ];
    expect(formatProcessTable([entry({ shares }), entry({ processId: 'b2' })], now)).toBe(
      [
        'ID  STATE    PID  STARTED               SHARES                             COMMAND',
        'a1  running  42   2026-12-02 07:45:05Z  abc:view(2,2m),def:control(0,60m)  sleep 60',
        'b2  running  42   2026-12-02 07:45:05Z  -                                  sleep 60',
        '',
      ].join('\n'),
    );
  });

  it('is a header alone when there is nothing', () => {
    expect(formatProcessTable([])).toBe('ID  STATE  PID  STARTED  COMMAND\n');
  });
});
