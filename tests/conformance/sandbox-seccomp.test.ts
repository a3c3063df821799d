// The seccomp layer, differential: the same probe through Codex's exec-server (its codex-linux-sandbox helper on
// PATH, bubblewrap on the host) and ours (CODEX-FINDINGS.md §21): what a workspace-write command (network
// restricted) gets from the calls the filter rules on, next to what the same probe gets unconfined (the kernel's
// own answer).

import { spawn } from 'node:child_process';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { collectUntilClosed, waitUntil } from '@tether/test-kit';
import { describe, expect, it } from 'vitest';
import { useSandboxScratch, workspaceWriteAt } from './sandbox-support.ts';
import { KIND_CASES, useHarness } from './support.ts';

describe('sandbox: the calls the seccomp filter rules on, on both executors', { timeout: 120_000 }, () => {
  const h = useHarness();
  const { layout, startParams } = useSandboxScratch();

  const SYSCALL_PROBE = String.raw`
import ctypes, errno, os, platform, select, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
NR = {'x86_64': {'io_uring_setup': 425, 'ptrace': 101, 'process_vm_readv': 310, 'sendmmsg': 307, 'recvmmsg': 299},
      'aarch64': {'io_uring_setup': 425, 'ptrace': 117, 'process_vm_readv': 270, 'sendmmsg': 269, 'recvmmsg': 243}}[platform.machine()]
def name(e): return errno.errorcode.get(e, str(e))
def call(nr, *args):
    libc.syscall.restype = ctypes.c_long
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    return 'ok' if r >= 0 else name(ctypes.get_errno())
def attempt(f):
    try:
        f()
        return 'ok'
    except OSError as e:
        return name(e.errno)
dgram, stream = sys.argv[1], sys.argv[2]
unix_dgram = lambda: socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
pair = socket.socketpair()
results = {
    'socket AF_INET': attempt(lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM)),
    'socket AF_INET6': attempt(lambda: socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)),
    'socket AF_NETLINK': attempt(lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)),
    'socket AF_UNIX': attempt(unix_dgram),
    'socketpair AF_UNIX': attempt(socket.socketpair),
    'send on a socketpair': attempt(lambda: pair[0].send(b'x')),
    'getsockname': attempt(lambda: pair[0].getsockname()),
    'getpeername': attempt(lambda: pair[0].getpeername()),
    'bind AF_UNIX (abstract)': attempt(lambda: socket.socket(socket.AF_UNIX).bind('\0tether-probe-%d' % os.getpid())),
    'connect to a host UNIX socket': attempt(lambda: socket.socket(socket.AF_UNIX).connect(stream)),
    'sendto a host UNIX socket': attempt(lambda: unix_dgram().sendto(b'sendto', dgram)),
    'sendmsg to a host UNIX socket': attempt(lambda: unix_dgram().sendmsg([b'sendmsg'], [], 0, dgram)),
    'io_uring_setup': call(NR['io_uring_setup'], 1, 0),
    'ptrace(PTRACE_TRACEME)': call(NR['ptrace'], 0, 0, 0, 0),
    'process_vm_readv': call(NR['process_vm_readv'], os.getpid(), 0, 0, 0, 0, 0),
    'sendmmsg': call(NR['sendmmsg'], pair[0].fileno(), 0, 0, 0),
    'recvmmsg': call(NR['recvmmsg'], pair[1].fileno(), 0, 0, 0x40, 0),
    'shutdown': attempt(lambda: pair[1].shutdown(socket.SHUT_WR)),
    'setsockopt': attempt(lambda: pair[1].setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 65536)),
    'getsockopt': attempt(lambda: pair[1].getsockopt(socket.SOL_SOCKET, socket.SO_TYPE)),
}
for k, v in results.items():
    print('PROBE %s=%s' % (k, v))
`;
  /** A host process holding a datagram UNIX socket: what reached it, once stopped. */
  function hostDatagramSocket(path: string) {
    const child = spawn(
      'python3',
      [
        '-c',
        'import socket,sys,select\ns=socket.socket(socket.AF_UNIX,socket.SOCK_DGRAM)\ns.bind(sys.argv[1])\nprint("ready",flush=True)\nwhile True:\n  r,_,_=select.select([s,sys.stdin],[],[])\n  if s in r: print("GOT "+s.recv(100).decode(),flush=True)\n  if sys.stdin in r and not sys.stdin.readline(): break',
        path,
      ],
      { stdio: ['pipe', 'pipe', 'inherit'] },
    );
    let out = '';
    child.stdout.on('data', (d: Buffer) => {
      out += d;
    });
    const exited = new Promise((resolve) => child.once('exit', resolve));
    return {
      ready: () => waitUntil(() => out.includes('ready'), 'the datagram socket', 5_000),
      received: async () => {
        child.stdin.end();
        await exited;
        return out
          .split('\n')
          .filter((l) => l.startsWith('GOT '))
          .map((l) => l.slice(4));
      },
    };
  }
  const probeResults = new Map<string, Record<string, unknown>>();

  it.each(KIND_CASES)('%s: the calls the seccomp filter rules on, confined and not', async (_label, kind) => {
    const { client } = await h.session(kind, 'ws');
    const { base, root } = layout(kind);
    const stream = join(base, 'stream.sock');
    const streamServer = createServer((socket) => socket.end());
    await new Promise<void>((resolve) => streamServer.listen(stream, resolve));
    const outcome: Record<string, unknown> = {};
    try {
      for (const [mode, sandbox] of [
        ['unconfined', null],
        ['workspace-write', workspaceWriteAt(root)],
      ] as const) {
        const dgram = join(base, `${mode}.sock`);
        const host = hostDatagramSocket(dgram);
        await host.ready();
        const result = await client.request(
          'process/start',
          startParams(`probe-${mode}`, ['python3', '-c', SYSCALL_PROBE, dgram, stream], root, sandbox),
        );
        expect(result.error).toBeUndefined();
        const collected = await collectUntilClosed(client, `probe-${mode}`);
        for (const line of collected.output.split('\n')) {
          const match = /^PROBE (.*)=(.*)$/.exec(line);
          if (match) outcome[`${mode}: ${match[1]}`] = match[2];
        }
        outcome[`${mode}: datagrams the host socket got`] = await host.received();
      }
    } finally {
      await new Promise((resolve) => streamServer.close(resolve));
    }
    probeResults.set(kind, outcome);
  });

  it('seccomp: what the filter refuses gets EPERM through either executor; what it leaves, the kernel answers', () => {
    const unconfined = {
      'socket AF_INET': 'ok',
      'socket AF_INET6': 'ok',
      'socket AF_NETLINK': 'ok',
      'socket AF_UNIX': 'ok',
      'socketpair AF_UNIX': 'ok',
      'send on a socketpair': 'ok',
      getsockname: 'ok',
      getpeername: 'ok',
      'bind AF_UNIX (abstract)': 'ok',
      'connect to a host UNIX socket': 'ok',
      'sendto a host UNIX socket': 'ok',
      'sendmsg to a host UNIX socket': 'ok',
      // EFAULT (the NULL params) where io_uring is enabled: the kernel got the call.
      io_uring_setup: expect.stringMatching(/^E/),
      'ptrace(PTRACE_TRACEME)': 'ok',
      process_vm_readv: 'ok',
      sendmmsg: 'ok',
      recvmmsg: 'ok',
      shutdown: 'ok',
      setsockopt: 'ok',
      getsockopt: 'ok',
      'datagrams the host socket got': ['sendto', 'sendmsg'],
    };
    const ours = {
      ...unconfined,
      'socket AF_INET': 'EPERM',
      'socket AF_INET6': 'EPERM',
      'socket AF_NETLINK': 'EPERM',
      getpeername: 'EPERM',
      'bind AF_UNIX (abstract)': 'EPERM',
      'connect to a host UNIX socket': 'EPERM',
      // Refused since the filter reads sendto's destination (before, the datagram reached the host's socket).
      'sendto a host UNIX socket': 'EPERM',
      sendmmsg: 'EPERM',
      io_uring_setup: 'EPERM',
      'ptrace(PTRACE_TRACEME)': 'EPERM',
      process_vm_readv: 'EPERM',
      // sendmsg's address is behind a pointer no seccomp filter can read: it still reaches a host datagram
      // socket, on Codex's too (SECURITY.md, "What is not covered").
      'datagrams the host socket got': ['sendmsg'],
    };
    // Codex refuses more calls on sockets already made (send, getsockname, shutdown, the socket options,
    // recvmmsg); ours leaves them to a socketpair's users (Node's libuv asks getsockname of its stdio).
    const codex = {
      ...ours,
      'send on a socketpair': 'EPERM',
      getsockname: 'EPERM',
      recvmmsg: 'EPERM',
      shutdown: 'EPERM',
      setsockopt: 'EPERM',
      getsockopt: 'EPERM',
    };
    const prefixed = (mode: string, table: Record<string, unknown>) =>
      Object.fromEntries(Object.entries(table).map(([key, value]) => [`${mode}: ${key}`, value]));
    expect(probeResults.get('tether')).toEqual({
      ...prefixed('unconfined', unconfined),
      ...prefixed('workspace-write', ours),
    });
    expect(probeResults.get('codex')).toEqual({
      ...prefixed('unconfined', unconfined),
      ...prefixed('workspace-write', codex),
    });
  });
});
