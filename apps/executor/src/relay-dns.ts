// The sandbox relay's resolver under transparent TCP (proxy-relay.ts), as Codex's: every name resolves to an
// address of its own from a private pool (A: 198.18.0.0/15, AAAA: fdc0:de00::/96, numbered from 1 in the order
// names are first asked, case-insensitively, TTL 60), so that a command connecting by name reaches the relay's
// transparent port with an address that maps back to the name, and the SOCKS5 policy decides the name, not an
// address (and resolves it on the host if allowed). Other types answer no data; PTR no such name.

import { isIPv4, isIPv6 } from 'node:net';

/** How many names a sandbox may have resolved (198.18.0.1 to 198.19.255.254). */
export const MAX_FAKE_NAMES = 2 * 65_536 - 2;

const TTL = 60;
const TYPE_A = 1;
const TYPE_PTR = 12;
const TYPE_AAAA = 28;

export class FakeResolver {
  private readonly numbers = new Map<string, number>();
  private readonly names: string[] = [''];

  constructor(private readonly limit = MAX_FAKE_NAMES) {}

  /** The name `address` stands for, if it is one this resolver gave out. */
  nameFor(address: string): string | null {
    const n = FakeResolver.numberOf(address);
    return n === null ? null : (this.names[n] ?? null);
  }

  /** Whether `address` is in the pool (given out or not): such an address is never a real destination. */
  static inPool(address: string): boolean {
    return FakeResolver.numberOf(address) !== null || /^fdc0:de00:/i.test(address);
  }

  private static numberOf(address: string): number | null {
    if (isIPv4(address)) {
      const [a, b, c, d] = address.split('.').map(Number) as [number, number, number, number];
      if (a !== 198 || (b !== 18 && b !== 19)) return null;
      return ((b - 18) << 16) | (c << 8) | d;
    }
    if (isIPv6(address)) {
      const m = /^fdc0:de00::([0-9a-f]{1,4})(?::([0-9a-f]{1,4}))?$/i.exec(address);
      if (!m) return null;
      return m[2] === undefined
        ? Number.parseInt(m[1]!, 16)
        : (Number.parseInt(m[1]!, 16) << 16) | Number.parseInt(m[2], 16);
    }
    return null;
  }

  /** The number of `name` (lowercase), given a new one when first asked; null once the pool is spent. */
  private numberFor(name: string): number | null {
    const known = this.numbers.get(name);
    if (known !== undefined) return known;
    if (this.names.length > this.limit) return null;
    const n = this.names.length;
    this.names.push(name);
    this.numbers.set(name, n);
    return n;
  }

  /** The answer to the DNS query `query` (one question), or null for what is not one (dropped). */
  answer(query: Buffer): Buffer | null {
    if (query.length < 12 || query.length > 512 || (query[2]! & 0x80) !== 0) return null;
    if (query.readUInt16BE(4) !== 1) return this.reply(query, 12, 1, []); // FORMERR
    let at = 12;
    const labels: string[] = [];
    for (;;) {
      const length = query[at];
      if (length === undefined || length > 63) return this.reply(query, 12, 1, []);
      at += 1;
      if (length === 0) break;
      if (at + length > query.length) return this.reply(query, 12, 1, []);
      labels.push(
        query
          .subarray(at, at + length)
          .toString('latin1')
          .toLowerCase(),
      );
      at += length;
    }
    if (at + 4 > query.length) return this.reply(query, 12, 1, []);
    const type = query.readUInt16BE(at);
    const questionEnd = at + 4;
    const name = labels.join('.');
    if (type === TYPE_PTR) return this.reply(query, questionEnd, 3, []);
    if ((type !== TYPE_A && type !== TYPE_AAAA) || name === '') return this.reply(query, questionEnd, 0, []);
    const n = this.numberFor(name);
    if (n === null) return this.reply(query, questionEnd, 2, []); // SERVFAIL: the pool is spent
    const data =
      type === TYPE_A
        ? Buffer.from([198, 18 + (n >> 16), (n >> 8) & 0xff, n & 0xff])
        : Buffer.from([0xfd, 0xc0, 0xde, 0x00, ...Array(8).fill(0), 0, n >> 16, (n >> 8) & 0xff, n & 0xff]);
    const record = Buffer.alloc(12);
    record.writeUInt16BE(0xc00c, 0); // the question's name
    record.writeUInt16BE(type, 2);
    record.writeUInt16BE(1, 4);
    record.writeUInt32BE(TTL, 6);
    record.writeUInt16BE(data.length, 10);
    return this.reply(query, questionEnd, 0, [record, data]);
  }

  /** The header and question of `query` (up to `questionEnd`) as an answer with `rcode` and `answer`'s bytes. */
  private reply(query: Buffer, questionEnd: number, rcode: number, answer: Buffer[]): Buffer {
    const header = Buffer.from(query.subarray(0, questionEnd));
    // QR, the query's opcode and RD, RA; rcode.
    header[2] = 0x80 | (query[2]! & 0x79);
    header[3] = 0x80 | rcode;
    header.writeUInt16BE(questionEnd > 12 ? 1 : 0, 4);
    header.writeUInt16BE(answer.length > 0 ? 1 : 0, 6);
    header.writeUInt32BE(0, 8);
    return Buffer.concat([header, ...answer]);
  }
}
