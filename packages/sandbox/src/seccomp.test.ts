import { existsSync, readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { AUDIT_ARCH, type Decision, runSeccomp } from './__tests__/cbpf.js';
import { type SeccompMode, seccompProgram } from './seccomp.js';

/**
 * The calls the filter rules on and a few it must leave alone, by each architecture's numbers, written out
 * here from the kernel's tables (arch/x86/entry/syscalls/syscall_64.tbl; include/uapi/asm-generic/unistd.h
 * for aarch64), not taken from seccomp.ts, and checked against this host's headers when they are installed.
 */
const NUMBERS = {
  x64: {
    read: 0,
    write: 1,
    clone: 56,
    execve: 59,
    openat: 257,
    mount: 165,
    socket: 41,
    connect: 42,
    accept: 43,
    sendto: 44,
    recvfrom: 45,
    sendmsg: 46,
    recvmsg: 47,
    shutdown: 48,
    bind: 49,
    listen: 50,
    getsockname: 51,
    getpeername: 52,
    socketpair: 53,
    setsockopt: 54,
    getsockopt: 55,
    ptrace: 101,
    accept4: 288,
    recvmmsg: 299,
    sendmmsg: 307,
    process_vm_readv: 310,
    process_vm_writev: 311,
    io_uring_setup: 425,
    io_uring_enter: 426,
    io_uring_register: 427,
  },
  arm64: {
    read: 63,
    write: 64,
    clone: 220,
    execve: 221,
    openat: 56,
    mount: 40,
    socket: 198,
    connect: 203,
    accept: 202,
    sendto: 206,
    recvfrom: 207,
    sendmsg: 211,
    recvmsg: 212,
    shutdown: 210,
    bind: 200,
    listen: 201,
    getsockname: 204,
    getpeername: 205,
    socketpair: 199,
    setsockopt: 208,
    getsockopt: 209,
    ptrace: 117,
    accept4: 242,
    recvmmsg: 243,
    sendmmsg: 269,
    process_vm_readv: 270,
    process_vm_writev: 271,
    io_uring_setup: 425,
    io_uring_enter: 426,
    io_uring_register: 427,
  },
} as const;
type Call = keyof (typeof NUMBERS)['x64'];

const MACHINES = [
  { machine: 'x64', arch: AUDIT_ARCH.x86_64, others: { i386: AUDIT_ARCH.i386, aarch64: AUDIT_ARCH.aarch64 } },
  { machine: 'arm64', arch: AUDIT_ARCH.aarch64, others: { arm: AUDIT_ARCH.arm, x86_64: AUDIT_ARCH.x86_64 } },
] as const;

const ALLOW: Decision = { action: 'allow' };
const EPERM: Decision = { action: 'errno', errno: 1 };
const ENOSYS: Decision = { action: 'errno', errno: 38 };

const ALWAYS_DENIED: Call[] = ['io_uring_setup', 'io_uring_enter', 'io_uring_register'];
/** Denied outright with the network restricted. */
const NETWORK_DENIED: Call[] = [
  ...ALWAYS_DENIED,
  'connect',
  'accept',
  'accept4',
  'bind',
  'listen',
  'getpeername',
  'ptrace',
  'process_vm_readv',
  'process_vm_writev',
  'sendmmsg',
];

const AF_UNIX = 1n;
const AF_INET = 2n;
const AF_INET6 = 10n;
const AF_NETLINK = 16n;
const AF_PACKET = 17n;

describe.each(MACHINES)('the seccomp filter on $machine, evaluated', ({ machine, arch, others }) => {
  const numbers = NUMBERS[machine];
  const calls = Object.keys(numbers) as Call[];
  const decide = (network: SeccompMode, nr: number, args: bigint[] = [], onArch: number = arch) =>
    runSeccomp(seccompProgram(network, machine), { nr, arch: onArch, args });

  it('the numbers here are this host’s, where its headers are installed', () => {
    const header =
      machine === 'x64' ? '/usr/include/x86_64-linux-gnu/asm/unistd_64.h' : '/usr/include/asm-generic/unistd.h';
    if (!existsSync(header)) return;
    const text = readFileSync(header, 'utf8');
    for (const call of calls) {
      const found = new RegExp(`#define __NR_${call}\\s+(\\d+)`).exec(text);
      // asm-generic spells a few through __NR3264_* or leaves them to the architecture (mount, clone: checked above).
      if (found) expect(Number(found[1]), call).toBe(numbers[call]);
    }
  });

  it('network enabled: io_uring is refused with EPERM, every other call allowed', () => {
    for (const call of calls) {
      expect(decide('enabled', numbers[call], [AF_INET]), call).toEqual(ALWAYS_DENIED.includes(call) ? EPERM : ALLOW);
    }
    for (let nr = 0; nr < 1024; nr++) {
      const denied = ALWAYS_DENIED.some((call) => numbers[call] === nr);
      expect(decide('enabled', nr), `nr ${nr}`).toEqual(denied ? EPERM : ALLOW);
    }
  });

  it('network restricted: each listed call refused with EPERM, the rest allowed', () => {
    const argumentChecked: Call[] = ['socket', 'socketpair', 'sendto'];
    for (const call of calls) {
      if (argumentChecked.includes(call)) continue;
      expect(decide('restricted', numbers[call]), call).toEqual(NETWORK_DENIED.includes(call) ? EPERM : ALLOW);
    }
    // Every number, not only the named ones: nothing else is refused by a stray comparison.
    for (let nr = 0; nr < 1024; nr++) {
      const named = calls.find((call) => numbers[call] === nr);
      if (named !== undefined && argumentChecked.includes(named)) continue;
      const denied = named !== undefined && NETWORK_DENIED.includes(named);
      expect(decide('restricted', nr), `nr ${nr} (${named ?? 'unnamed'})`).toEqual(denied ? EPERM : ALLOW);
    }
  });

  it('network restricted: socket and socketpair for AF_UNIX only, by the int the kernel reads', () => {
    for (const call of ['socket', 'socketpair'] as const) {
      expect(decide('restricted', numbers[call], [AF_UNIX, 1n, 0n]), call).toEqual(ALLOW);
      for (const family of [0n, AF_INET, AF_INET6, AF_NETLINK, AF_PACKET, 0xffffn]) {
        expect(decide('restricted', numbers[call], [family, 1n, 0n]), `${call} ${family}`).toEqual(EPERM);
      }
      // The domain is an int: the kernel ignores the register's upper half, and so does the filter.
      expect(decide('restricted', numbers[call], [(1n << 32n) | AF_UNIX]), call).toEqual(ALLOW);
      expect(decide('restricted', numbers[call], [(0xffffffffn << 32n) | AF_INET]), call).toEqual(EPERM);
    }
  });

  it('network restricted: sendto without a destination allowed, with one refused (either half of the pointer)', () => {
    const sendto = (dest: bigint) => decide('restricted', numbers.sendto, [3n, 0x1000n, 1n, 0n, dest, 16n]);
    expect(sendto(0n)).toEqual(ALLOW);
    expect(sendto(0x7ffd12345678n)).toEqual(EPERM);
    expect(sendto(0x12345678n)).toEqual(EPERM);
    expect(sendto(1n << 40n)).toEqual(EPERM);
    expect(decide('enabled', numbers.sendto, [3n, 0x1000n, 1n, 0n, 0x7ffd12345678n, 16n])).toEqual(ALLOW);
  });

  it('proxied (managed network enforced): socket for AF_INET and AF_INET6 only; ptrace, process_vm_* and io_uring refused', () => {
    const denied: Call[] = [...ALWAYS_DENIED, 'ptrace', 'process_vm_readv', 'process_vm_writev'];
    for (const call of calls) {
      if (call === 'socket') continue;
      // socketpair, connect, bind, sendto… stay allowed, as under Codex.
      expect(decide('proxied', numbers[call], [AF_UNIX, 1n, 0n]), call).toEqual(denied.includes(call) ? EPERM : ALLOW);
    }
    for (let nr = 0; nr < 1024; nr++) {
      const named = calls.find((call) => numbers[call] === nr);
      if (named === 'socket') continue;
      const isDenied = named !== undefined && denied.includes(named);
      expect(decide('proxied', nr), `nr ${nr} (${named ?? 'unnamed'})`).toEqual(isDenied ? EPERM : ALLOW);
    }
    for (const family of [AF_INET, AF_INET6])
      expect(decide('proxied', numbers.socket, [family, 1n, 0n])).toEqual(ALLOW);
    for (const family of [0n, AF_UNIX, AF_NETLINK, AF_PACKET, 0xffffn]) {
      expect(decide('proxied', numbers.socket, [family, 1n, 0n]), `socket ${family}`).toEqual(EPERM);
    }
    // The domain is an int: the upper half of the register does not matter.
    expect(decide('proxied', numbers.socket, [(1n << 32n) | AF_INET])).toEqual(ALLOW);
    expect(decide('proxied', numbers.socket, [(0xffffffffn << 32n) | AF_UNIX])).toEqual(EPERM);
  });

  it('another architecture’s ABI is refused with ENOSYS whatever the call, in every mode', () => {
    for (const network of ['restricted', 'enabled', 'proxied'] as const) {
      for (const [name, other] of Object.entries(others)) {
        for (const nr of [0, 1, 2, 41, 59, 101, 198, 221, 425, 1000]) {
          expect(decide(network, nr, [AF_UNIX], other), `${network} ${name} ${nr}`).toEqual(ENOSYS);
        }
      }
      // An arch value no kernel uses.
      expect(decide(network, numbers.read, [], 0)).toEqual(ENOSYS);
    }
  });

  it(machine === 'x64' ? 'x32 (the 0x40000000 bit) is refused with ENOSYS' : 'has no x32 ABI to refuse', () => {
    for (const network of ['restricted', 'enabled', 'proxied'] as const) {
      for (const call of ['read', 'socket', 'connect', 'io_uring_setup'] as const) {
        const x32 = 0x40000000 | numbers[call];
        // aarch64 has no such bit: a number that high is no call, and the kernel answers ENOSYS itself.
        expect(decide(network, x32, [AF_INET]), `${network} ${call}`).toEqual(machine === 'x64' ? ENOSYS : ALLOW);
      }
    }
  });
});

describe('the cBPF interpreter', () => {
  it('refuses what the kernel would not load', () => {
    const record = (code: number, jt: number, jf: number, k: number) => {
      const out = Buffer.alloc(8);
      out.writeUInt16LE(code, 0);
      out.writeUInt8(jt, 2);
      out.writeUInt8(jf, 3);
      out.writeUInt32LE(k, 4);
      return out;
    };
    const data = { nr: 0, arch: AUDIT_ARCH.x86_64 };
    expect(() => runSeccomp(Buffer.alloc(0), data)).toThrow(/whole number/);
    expect(() => runSeccomp(record(0x20, 0, 0, 64), data)).toThrow(/outside seccomp_data/);
    expect(() => runSeccomp(record(0x20, 0, 0, 2), data)).toThrow(/outside seccomp_data/);
    expect(() => runSeccomp(record(0x15, 3, 3, 0), data)).toThrow(/past the end/);
    expect(() => runSeccomp(record(0x04, 0, 0, 1), data)).toThrow(/opcode 0x4/);
    expect(() => runSeccomp(record(0x20, 0, 0, 0), data)).toThrow(/ran off the end/);
    expect(runSeccomp(Buffer.concat([record(0x20, 0, 0, 4), record(0x16, 0, 0, 0)]), data)).toEqual({
      action: 'kill_process',
    });
    expect(runSeccomp(record(0x06, 0, 0, 0), data)).toEqual({ action: 'kill_thread' });
  });
});
