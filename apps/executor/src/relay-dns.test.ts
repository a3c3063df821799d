import { describe, expect, it } from 'vitest';
import { FakeResolver } from './relay-dns.js';

/** A query for `name` of `type` with id 0x1234 and RD set. */
function query(name: string, type: number): Buffer {
  const labels = name.split('.').flatMap((label) => [Buffer.from([label.length]), Buffer.from(label, 'latin1')]);
  const tail = Buffer.alloc(5);
  tail.writeUInt16BE(type, 1);
  tail.writeUInt16BE(1, 3);
  return Buffer.concat([Buffer.from([0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]), ...labels, tail]);
}

/** The flags, answer count and the answer's data of the answer to `asked`. */
function ask(resolver: FakeResolver, asked: Buffer) {
  const reply = resolver.answer(asked);
  if (reply === null) return null;
  const answers = reply.readUInt16BE(6);
  // The answer record follows the question: name pointer, type, class, TTL, length, data.
  const data = answers === 0 ? null : [...reply.subarray(asked.length + 12)];
  return { id: reply.readUInt16BE(0), flags: reply.readUInt16BE(2), answers, data };
}

describe('FakeResolver', () => {
  it('gives each name (case-insensitively) a number of its own, as an A and an AAAA record, TTL 60', () => {
    const resolver = new FakeResolver();
    const one = query('One.invalid', 1);
    expect(ask(resolver, one)).toEqual({ id: 0x1234, flags: 0x8180, answers: 1, data: [198, 18, 0, 1] });
    expect(resolver.answer(one)!.readUInt32BE(one.length + 6)).toBe(60);
    expect(ask(resolver, query('two.invalid', 28))?.data).toEqual([0xfd, 0xc0, 0xde, 0, ...Array(9).fill(0), 0, 0, 2]);
    expect(ask(resolver, query('one.INVALID', 28))?.data?.at(-1)).toBe(1);
    expect(resolver.nameFor('198.18.0.1')).toBe('one.invalid');
    expect(resolver.nameFor('fdc0:de00::2')).toBe('two.invalid');
    expect(resolver.nameFor('198.18.0.3')).toBeNull();
    expect(resolver.nameFor('203.0.113.7')).toBeNull();
    expect(FakeResolver.inPool('198.19.255.254')).toBe(true);
    expect(FakeResolver.inPool('fdc0:de00::1:0')).toBe(true);
    expect(FakeResolver.inPool('198.20.0.1')).toBe(false);
  });

  it('answers no data for other types, no such name for PTR, FORMERR for a broken question, nothing for a non-query', () => {
    const resolver = new FakeResolver();
    expect(ask(resolver, query('x.invalid', 15))).toMatchObject({ flags: 0x8180, answers: 0 });
    expect(ask(resolver, query('1.0.18.198.in-addr.arpa', 12))).toMatchObject({ flags: 0x8183, answers: 0 });
    expect(ask(resolver, query('x.invalid', 1).subarray(0, 16))).toMatchObject({ flags: 0x8181 });
    const response = query('x.invalid', 1);
    response[2] = 0x81;
    expect(resolver.answer(response)).toBeNull();
    expect(resolver.answer(Buffer.alloc(5))).toBeNull();
    expect(resolver.answer(Buffer.alloc(600))).toBeNull();
  });

  it('past its bound, a new name fails (SERVFAIL) while known ones still resolve', () => {
    const resolver = new FakeResolver(2);
    expect(ask(resolver, query('a.invalid', 1))?.data).toEqual([198, 18, 0, 1]);
    expect(ask(resolver, query('b.invalid', 1))?.data).toEqual([198, 18, 0, 2]);
    expect(ask(resolver, query('c.invalid', 1))).toMatchObject({ flags: 0x8182, answers: 0 });
    expect(ask(resolver, query('a.invalid', 1))?.data).toEqual([198, 18, 0, 1]);
  });
});
