/**
 * A classic-BPF interpreter for seccomp programs, for tests: runs a program (as seccompProgram returns it, host
 * byte order) over one `struct seccomp_data` and answers what the kernel would do. It accepts only what the
 * kernel's seccomp checker accepts (seccomp_check_filter: 32-bit absolute loads of seccomp_data, aligned, in
 * bounds) plus the jumps and returns, and throws on anything else, so a program it cannot read is a failing
 * test, never a guess. No npm package runs cBPF over seccomp_data (the BPF ones there assemble eBPF or parse
 * packet filters), hence this one.
 */
import { endianness } from 'node:os';

export const AUDIT_ARCH = {
  x86_64: 0xc000003e,
  i386: 0x40000003,
  aarch64: 0xc00000b7,
  arm: 0x40000028,
} as const;

export interface SeccompData {
  nr: number;
  arch: number;
  instructionPointer?: bigint;
  /** Up to six arguments, as the 64-bit registers hold them. */
  args?: bigint[];
}

export type Decision =
  | { action: 'allow' }
  | { action: 'errno'; errno: number }
  | { action: 'kill_process' }
  | { action: 'kill_thread' }
  | { action: 'trap'; data: number }
  | { action: 'trace'; data: number }
  | { action: 'log' }
  | { action: 'user_notif' };

const BPF_MAXINSNS = 4096;
const SECCOMP_DATA_SIZE = 64;

/** `struct seccomp_data` in host byte order. */
export function seccompData(data: SeccompData): Buffer {
  const out = Buffer.alloc(SECCOMP_DATA_SIZE);
  const le = endianness() === 'LE';
  const u32 = (value: number, at: number) =>
    le ? out.writeUInt32LE(value >>> 0, at) : out.writeUInt32BE(value >>> 0, at);
  const u64 = (value: bigint, at: number) =>
    le ? out.writeBigUInt64LE(BigInt.asUintN(64, value), at) : out.writeBigUInt64BE(BigInt.asUintN(64, value), at);
  u32(data.nr, 0);
  u32(data.arch, 4);
  u64(data.instructionPointer ?? 0n, 8);
  (data.args ?? []).forEach((arg, i) => {
    if (i >= 6) throw new Error('seccomp_data has six arguments');
    u64(arg, 16 + i * 8);
  });
  return out;
}

function decision(ret: number): Decision {
  const value = ret >>> 0;
  const data = value & 0xffff;
  switch ((value & 0xffff0000) >>> 0) {
    case 0x80000000:
      return { action: 'kill_process' };
    case 0x00000000:
      return { action: 'kill_thread' };
    case 0x00030000:
      return { action: 'trap', data };
    case 0x00050000:
      // The kernel caps the errno at MAX_ERRNO (4095).
      return { action: 'errno', errno: Math.min(data, 4095) };
    case 0x7fc00000:
      return { action: 'user_notif' };
    case 0x7ff00000:
      return { action: 'trace', data };
    case 0x7ffc0000:
      return { action: 'log' };
    case 0x7fff0000:
      return { action: 'allow' };
    default:
      // An unknown action is a kill (kernel: seccomp_run_filters' default).
      return { action: 'kill_process' };
  }
}

/** Runs `program` over `data` and answers the kernel's decision. Throws on what the kernel would refuse to load. */
export function runSeccomp(program: Buffer, data: SeccompData): Decision {
  if (program.length === 0 || program.length % 8 !== 0) throw new Error('not a whole number of sock_filter records');
  const count = program.length / 8;
  if (count > BPF_MAXINSNS) throw new Error(`${count} instructions: more than BPF_MAXINSNS`);
  const le = endianness() === 'LE';
  const input = seccompData(data);
  let a = 0;
  let pc = 0;
  for (let steps = 0; steps <= count; steps++) {
    if (pc >= count) throw new Error(`ran off the end of the program at ${pc}`);
    const at = pc * 8;
    const code = le ? program.readUInt16LE(at) : program.readUInt16BE(at);
    const jt = program.readUInt8(at + 2);
    const jf = program.readUInt8(at + 3);
    const k = (le ? program.readUInt32LE(at + 4) : program.readUInt32BE(at + 4)) >>> 0;
    const jump = (offset: number) => {
      const target = pc + 1 + offset;
      if (target >= count) throw new Error(`instruction ${pc} jumps past the end`);
      pc = target;
    };
    switch (code) {
      case 0x20: // BPF_LD | BPF_W | BPF_ABS
        if (k % 4 !== 0 || k + 4 > SECCOMP_DATA_SIZE) throw new Error(`instruction ${pc} loads outside seccomp_data`);
        a = (le ? input.readUInt32LE(k) : input.readUInt32BE(k)) >>> 0;
        pc++;
        break;
      case 0x05: // BPF_JMP | BPF_JA
        jump(k);
        break;
      case 0x15: // BPF_JMP | BPF_JEQ | BPF_K
        jump(a === k ? jt : jf);
        break;
      case 0x25: // BPF_JMP | BPF_JGT | BPF_K
        jump(a > k ? jt : jf);
        break;
      case 0x35: // BPF_JMP | BPF_JGE | BPF_K
        jump(a >= k ? jt : jf);
        break;
      case 0x45: // BPF_JMP | BPF_JSET | BPF_K
        jump((a & k) !== 0 ? jt : jf);
        break;
      case 0x06: // BPF_RET | BPF_K
        return decision(k);
      case 0x16: // BPF_RET | BPF_A
        return decision(a);
      default:
        throw new Error(`instruction ${pc}: opcode 0x${code.toString(16)} is not one this interpreter knows`);
    }
  }
  throw new Error('the program did not return');
}
