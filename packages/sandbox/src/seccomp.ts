/**
 * The seccomp layer, as a classic BPF program that bubblewrap loads (`--seccomp FD`, after it has set
 * no_new_privs). What each rule stops that the namespaces do not:
 *
 * - `io_uring_*`: its rings run socket and file operations that no filter below would see.
 * - with the network restricted, `socket`/`socketpair` other than AF_UNIX, and `connect`, `bind`, `listen`
 *   and `accept` on any socket: the unshared network namespace already has only a loopback of its own, but
 *   no socket at all means no netlink, no raw packets, no connecting to a host's UNIX socket (a container
 *   runtime's, an agent's), and the same answer Codex gives (`Operation not permitted`), which its agent
 *   reads as a sandbox denial. `sendto` with a destination address and `sendmmsg` are refused too: an
 *   unconnected AF_UNIX datagram socket would otherwise send to a host's datagram socket by path (journald's,
 *   `/dev/log`). `sendmsg` cannot be: its address is behind a pointer the filter cannot read, and
 *   descriptor passing over a socketpair needs it (Codex allows it too; SECURITY.md says what it leaves).
 *   `getpeername` is refused as Codex refuses it (bash, which asks it of its stdin, then reads ~/.bashrc as
 *   under sshd, as it does under Codex); other calls on sockets already made (send, getsockname, …) stay
 *   allowed, where Codex refuses them: libuv asks getsockname of a stdio socket to learn what it is, and Node
 *   prints nothing when that fails;
 * - with the network restricted, `ptrace` and `process_vm_readv/writev`: reading or steering another
 *   process of the sandbox (Codex blocks them in the same mode).
 * - `proxied` (Codex's managed network enforced: the command's namespace reaches only the relay to the proxy,
 *   which gets its upstream connections over inherited descriptors): `socket` for AF_INET and AF_INET6 only
 *   (the namespace's loopback), so no AF_UNIX socket can reach a host's socket that the mounts show, and no
 *   netlink; `ptrace` and `process_vm_readv/writev` too. `socketpair` and every call on a socket already made
 *   stay allowed, as under Codex (probed: CODEX-FINDINGS §25).
 *
 * Everything else is allowed; a call of another architecture's ABI (x32, i386 through int 0x80) is refused
 * with ENOSYS, since its numbers would slip past the rules. Only x86_64 and aarch64 are known; on another
 * machine there is no filter (`seccompSupported`), and the executor says so.
 */
import { endianness } from 'node:os';
import { arch } from 'node:process';

const BPF_LD_W_ABS = 0x20;
const BPF_JEQ_K = 0x15;
const BPF_JSET_K = 0x45;
const BPF_RET_K = 0x06;

const SECCOMP_RET_ALLOW = 0x7fff0000;
const SECCOMP_RET_ERRNO = 0x00050000;
const EPERM = 1;
const ENOSYS = 38;
const AF_UNIX = 1;
const AF_INET = 2;
const AF_INET6 = 10;

/** Offsets in `struct seccomp_data`: nr, arch, then args[6] (u64, the low half first on little-endian). */
const NR = 0;
const ARCH = 4;
const ARG0_LOW = 16;
/** `sendto`'s destination address: args[4]. */
const ARG4_LOW = 16 + 4 * 8;
const ARG4_HIGH = ARG4_LOW + 4;

interface Table {
  audit: number;
  /** x86_64's x32 ABI sets this bit in the number. */
  x32Bit: number | null;
  calls: Record<string, number>;
}

const TABLES: Record<string, Table> = {
  x64: {
    audit: 0xc000003e,
    x32Bit: 0x40000000,
    calls: {
      socket: 41,
      connect: 42,
      accept: 43,
      sendto: 44,
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
  },
  arm64: {
    audit: 0xc00000b7,
    x32Bit: null,
    calls: {
      socket: 198,
      socketpair: 199,
      bind: 200,
      listen: 201,
      accept: 202,
      connect: 203,
      getsockname: 204,
      getpeername: 205,
      sendto: 206,
      setsockopt: 208,
      getsockopt: 209,
      shutdown: 210,
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
  },
};

const ALWAYS = ['io_uring_setup', 'io_uring_enter', 'io_uring_register'];
const NETWORK_RESTRICTED = [
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
/** Allowed for AF_UNIX only (first argument). */
const UNIX_ONLY = ['socket', 'socketpair'];
const PROXIED = ['ptrace', 'process_vm_readv', 'process_vm_writev'];

/** What the filter is for: the profile's network, or Codex's managed network enforced (`proxied`). */
export type SeccompMode = 'restricted' | 'enabled' | 'proxied';

/** Whether this machine's architecture has a filter. */
export function seccompSupported(machine: string = arch): boolean {
  return machine in TABLES;
}

type Instruction = [code: number, jt: number, jf: number, k: number];

/**
 * The filter for `network`, as bubblewrap reads it: `struct sock_filter` records in host byte order.
 * Throws on an architecture without a table.
 */
export function seccompProgram(network: SeccompMode, machine: string = arch): Buffer {
  const table = TABLES[machine];
  if (table === undefined) throw new Error(`no seccomp filter for the ${machine} architecture`);
  const program: Instruction[] = [];
  const deny = SECCOMP_RET_ERRNO | EPERM;
  // Another ABI's numbers mean other calls: refused outright.
  program.push([BPF_LD_W_ABS, 0, 0, ARCH]);
  program.push([BPF_JEQ_K, 1, 0, table.audit]);
  program.push([BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | ENOSYS]);
  program.push([BPF_LD_W_ABS, 0, 0, NR]);
  if (table.x32Bit !== null) {
    program.push([BPF_JSET_K, 0, 1, table.x32Bit]);
    program.push([BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | ENOSYS]);
  }
  const denied =
    network === 'restricted'
      ? [...ALWAYS, ...NETWORK_RESTRICTED]
      : network === 'proxied'
        ? [...ALWAYS, ...PROXIED]
        : ALWAYS;
  for (const name of denied) {
    program.push([BPF_JEQ_K, 0, 1, table.calls[name]!]);
    program.push([BPF_RET_K, 0, 0, deny]);
  }
  if (network === 'restricted') {
    for (const name of UNIX_ONLY) {
      // nr == call: load the domain; AF_UNIX is allowed, anything else denied (A still holds nr otherwise).
      program.push([BPF_JEQ_K, 0, 4, table.calls[name]!]);
      program.push([BPF_LD_W_ABS, 0, 0, ARG0_LOW]);
      program.push([BPF_JEQ_K, 0, 1, AF_UNIX]);
      program.push([BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW]);
      program.push([BPF_RET_K, 0, 0, deny]);
    }
    // sendto: allowed without a destination address (send on a connected socket or a socketpair), else denied.
    program.push([BPF_JEQ_K, 0, 5, table.calls.sendto!]);
    program.push([BPF_LD_W_ABS, 0, 0, ARG4_LOW]);
    program.push([BPF_JEQ_K, 0, 2, 0]);
    program.push([BPF_LD_W_ABS, 0, 0, ARG4_HIGH]);
    program.push([BPF_JEQ_K, 1, 0, 0]);
    program.push([BPF_RET_K, 0, 0, deny]);
  }
  if (network === 'proxied') {
    // socket: AF_INET and AF_INET6 allowed, any other domain denied (A still holds nr otherwise).
    program.push([BPF_JEQ_K, 0, 5, table.calls.socket!]);
    program.push([BPF_LD_W_ABS, 0, 0, ARG0_LOW]);
    program.push([BPF_JEQ_K, 2, 0, AF_INET]);
    program.push([BPF_JEQ_K, 1, 0, AF_INET6]);
    program.push([BPF_RET_K, 0, 0, deny]);
    program.push([BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW]);
  }
  program.push([BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW]);
  const out = Buffer.alloc(program.length * 8);
  const little = endianness() === 'LE';
  program.forEach(([code, jt, jf, k], i) => {
    const at = i * 8;
    if (little) {
      out.writeUInt16LE(code, at);
      out.writeUInt32LE(k >>> 0, at + 4);
    } else {
      out.writeUInt16BE(code, at);
      out.writeUInt32BE(k >>> 0, at + 4);
    }
    out.writeUInt8(jt, at + 2);
    out.writeUInt8(jf, at + 3);
  });
  return out;
}
