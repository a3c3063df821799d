/**
 * A separate process for index.test.ts, run as `node --import tsx process-calls.ts <mode>`: execve
 * replaces the process that calls it, and the subreaper and dumpable flags are the process's own, so
 * the test process must not be the one that changes them. Each mode prints one JSON line.
 *
 * The test starts it with fd 20 inherited (open, not close-on-exec, and never given to clearCloexec: a
 * leak, as an addon's fd could be).
 *
 * - `exec`: makes a pipe, clears close-on-exec on its write end only, and execs /bin/sh, which prints
 *   its pid, argv, env, open fds and signal masks.
 * - `refused`: execve calls that must throw (NUL in a string, a bad env name, a missing file), then the
 *   state after the failed one (the kept fd is still not close-on-exec, an unkept one still is not
 *   marked, SIGPIPE is still ignored as Node has it).
 * - `subreaper`: sets it, starts `sleep` in the background of a shell that exits, and reports the
 *   orphan's parent, then kills and reaps it.
 * - `dumpable`: clears the flag and reports the getter before and after.
 * - `grow-over-max`: growPipe past /proc/sys/fs/pipe-max-size, which only CAP_SYS_RESOURCE may (the test
 *   runs it without): the pipe keeps its capacity and still carries bytes.
 * - `cloexec`: the fds a child shell has before and after setCloexecAbove(2), what it returned (twice),
 *   and the close-on-exec flag of 0-2 and of fd 20 before and after.
 * - `send-pair`: with a socket as fd 3, sends over it one end of a pair made here (peerPid's other side).
 * - `exit-now`: prints a line, then exitNow(7) with an 'exit' listener that would print another.
 * - `original-destination`: as root of namespaces of its own (`unshare -rn`), where NAT-redirected connections
 *   were headed (originalDestination), IPv4 and IPv6, and a connection that was not redirected.
 */
import { spawnSync } from 'node:child_process';
import { closeSync, readFileSync, writeSync } from 'node:fs';
import { socketFd } from '@tether/user-read';
import { loadNativePipe } from '../index.js';

const native = loadNativePipe();
if (native === null) throw new Error('the addon is not built');
const mode = process.argv[2];
const LEAK = 20;
const O_CLOEXEC = 0o2000000;
const print = (value: unknown) => process.stdout.write(`${JSON.stringify(value)}\n`);

/** The fd flags line of /proc/self/fdinfo/<fd>, as a number (octal there). */
function fdFlags(fd: number): number {
  const line = readFileSync(`/proc/self/fdinfo/${fd}`, 'utf8')
    .split('\n')
    .find((l) => l.startsWith('flags:'));
  return Number.parseInt(line!.slice('flags:'.length).trim(), 8);
}

function ignoredSignals(): string {
  return readFileSync('/proc/self/status', 'utf8')
    .split('\n')
    .find((l) => l.startsWith('SigIgn:'))!
    .slice('SigIgn:'.length)
    .trim();
}

/** What a call threw, as plain data. */
function thrown(call: () => unknown): Record<string, unknown> {
  try {
    call();
    return { threw: false };
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    return { name: e.name, message: e.message, code: e.code, syscall: e.syscall };
  }
}

/**
 * What the exec'd shell reports. Its signal masks are read by the shell itself with builtins (while it
 * waits for a child, dash blocks every signal), and ls lists the shell's fds straight to stdout (in a
 * pipeline or $(…) the shell would hold a pipe of its own meanwhile).
 */
const REPORT = [
  'echo "pid $$"',
  'while IFS= read -r line; do case $line in Sig[IB]*) echo "$line" ;; esac; done </proc/$$/status',
  "tr '\\0' '\\n' </proc/$$/cmdline | sed 's/^/arg /'",
  'env | sort | sed "s/^/env /"',
  'ls -1 /proc/$$/fd',
].join('\n');

if (mode === 'exec') {
  const [readFd, writeFd] = native.pipe();
  native.clearCloexec(writeFd);
  print({ pid: process.pid, kept: writeFd, closeOnExec: readFd, leakOpen: (fdFlags(LEAK) & O_CLOEXEC) === 0 });
  native.execve('/bin/sh', ['tether-sh', '-c', REPORT, 'one', 'two words'], { ONLY: 'this', EMPTY: '' });
} else if (mode === 'refused') {
  const [readFd, writeFd] = native.pipe();
  native.clearCloexec(writeFd);
  print({
    nulInArg: thrown(() => native.execve('/bin/sh', ['sh', '-c', 'echo ran\0 x'], {})),
    nulInFile: thrown(() => native.execve('/bin/sh\0x', ['sh'], {})),
    nulInValue: thrown(() => native.execve('/bin/sh', ['sh'], { A: 'b\0c' })),
    nameWithEquals: thrown(() => native.execve('/bin/sh', ['sh'], { 'A=B': 'c' })),
    noArgv: thrown(() => native.execve('/bin/sh', [], {})),
    notString: thrown(() => native.execve('/bin/sh', ['sh', 1 as unknown as string], {})),
    missing: thrown(() => native.execve('/no/such/program', ['x'], {})),
    keptStaysOpen: (fdFlags(writeFd) & O_CLOEXEC) === 0,
    leakNotMarked: (fdFlags(LEAK) & O_CLOEXEC) === 0,
    readStaysCloseOnExec: (fdFlags(readFd) & O_CLOEXEC) !== 0,
    ignoredSignals: ignoredSignals(),
    badFd: thrown(() => native.clearCloexec(100_000)),
  });
} else if (mode === 'subreaper') {
  const before = native.isChildSubreaper();
  const set = native.setChildSubreaper();
  const shell = spawnSync('/bin/sh', ['-c', 'sleep 1000 >/dev/null 2>&1 & echo $!'], { encoding: 'utf8' });
  const orphan = Number(shell.stdout.trim());
  const stat = readFileSync(`/proc/${orphan}/stat`, 'utf8');
  const parent = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
  const runningReaped = native.reapChild(orphan);
  process.kill(orphan, 'SIGKILL');
  while (!native.reapChild(orphan)) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 5);
  print({
    pid: process.pid,
    before,
    set,
    after: native.isChildSubreaper(),
    parent,
    runningReaped,
    goneAfterReap: thrown(() => readFileSync(`/proc/${orphan}/stat`)).code,
    notOurs: thrown(() => native.reapChild(1)).code,
    unset: native.setChildSubreaper(false),
    afterUnset: native.isChildSubreaper(),
  });
} else if (mode === 'dumpable') {
  const before = native.isDumpable();
  native.setDumpable(false);
  const cleared = native.isDumpable();
  native.setDumpable(true);
  print({ before, cleared, restored: native.isDumpable(), badArg: thrown(() => native.setDumpable(0 as never)) });
}
else if (mode === 'cloexec') {
  const childFds = () =>
    spawnSync('/bin/sh', ['-c', 'ls -1 /proc/$$/fd'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] })
      .stdout.split('\n')
      .filter((line) => line !== '')
      .map(Number)
      .sort((a, b) => a - b);
  const closeOnExec = (fd: number) => (fdFlags(fd) & O_CLOEXEC) !== 0;
  const before = { child: childFds(), leak: closeOnExec(LEAK), stdio: [0, 1, 2].map(closeOnExec) };
  const changed = native.setCloexecAbove(2);
  const again = native.setCloexecAbove(2);
  print({
    before,
    changed,
    again,
    after: { child: childFds(), leak: closeOnExec(LEAK), stdio: [0, 1, 2].map(closeOnExec) },
    badArg: thrown(() => native.setCloexecAbove(-1)),
  });
}
else if (mode === 'grow-over-max') {
  const max = Number(readFileSync('/proc/sys/fs/pipe-max-size', 'utf8'));
  const [readFd, writeFd] = native.pipe();
  const before = native.growPipe(writeFd, 0);
  const after = native.growPipe(writeFd, max * 2);
  print({ before, after, again: native.growPipe(readFd, 0), written: writeSync(writeFd, 'still a pipe') });
}
else if (mode === 'send-pair') {
  // Run with an end of the test's socket pair as fd 3: sends it one end of a pair made here, and its pid.
  const [mine, theirs] = native.socketPair();
  native.sendFd(3, theirs);
  print({ pid: process.pid, mine: native.peerPid(mine) });
}
else if (mode === 'exit-now') {
  process.on('exit', () => writeSync(1, 'exit listener ran\n'));
  writeSync(1, 'before\n');
  native!.exitNow(7);
} else if (mode === 'original-destination') {
  // Run as root of a user and network namespace of its own (unshare -rn): the loopback up, every address
  // local, an nftables NAT rule redirecting TCP not to the loopback to port 1080, where this listens (both
  // families); then where each connection accepted there was headed, one redirected per family and one not.
  const setup = [
    ['ip', ['-batch', '-'], 'link set lo up\nroute add local 0.0.0.0/0 dev lo\nroute add local ::/0 dev lo\n'],
    [
      'nft',
      ['-f', '-'],
      [
        'table inet t {',
        'chain out {',
        'type nat hook output priority -100; policy accept;',
        'ip daddr != 127.0.0.0/8 meta l4proto tcp redirect to :1080',
        'ip6 daddr != ::1 meta l4proto tcp redirect to :1080',
        '}',
        '}',
        '',
      ].join('\n'),
    ],
  ] as const;
  for (const [program, args, input] of setup) {
    const run = spawnSync(program, args, { input, encoding: 'utf8', stdio: ['pipe', 'inherit', 'pipe'] });
    if (run.status !== 0) throw new Error(`${program}: ${run.stderr}`);
  }
  const { createServer, connect } = await import('node:net');
  const seen: unknown[] = [];
  const accept = (socket: import('node:net').Socket) => {
    const fd = socketFd(socket);
    seen.push(fd === null ? null : native.originalDestination(fd));
    socket.destroy();
  };
  const listeners = await Promise.all(
    ['127.0.0.1', '::1'].map(
      (host) =>
        new Promise<import('node:net').Server>((resolve) => {
          const server = createServer(accept);
          server.listen(1080, host, () => resolve(server));
        }),
    ),
  );
  for (const [host, port] of [
    ['203.0.113.7', 80],
    ['2001:db8::7', 443],
    ['127.0.0.1', 1080],
  ] as const) {
    await new Promise<void>((resolve) => {
      const socket = connect({ host, port });
      socket.on('close', () => resolve()).on('error', () => undefined);
    });
  }
  for (const server of listeners) server.close();
  const [a, b] = native.socketPair();
  print({ seen, socketPair: thrown(() => native.originalDestination(a)) });
  closeSync(a);
  closeSync(b);
}
