import { EventEmitter } from 'node:events';
import type { Readable, Writable } from 'node:stream';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ATTACHMENT_MARKER, attachmentOf, encodeWithAttachment, splitAttachment } from './attachment.js';
import { classifyMessage, type InboundMessage, parseMessage } from './message.js';
import { StdioTransport } from './transports/stdio.js';

// Hostile input at the JSON-RPC edge (issue 16): every byte sequence a peer can send is either a classified
// message or `malformed` with a reason, never an exception. Runs per property: TETHER_FUZZ_RUNS (`pnpm fuzz`
// raises it), a CI-sized default otherwise; a failure prints the seed and path to replay it.
const numRuns = Number(process.env.TETHER_FUZZ_RUNS) || 300;
// TETHER_FUZZ_SEED replays a failure's printed seed.
if (process.env.TETHER_FUZZ_SEED) fc.configureGlobal({ seed: Number(process.env.TETHER_FUZZ_SEED) });
const KINDS = ['request', 'notification', 'response', 'error', 'malformed'];

/** What every parse result must look like, whatever the input. */
function expectWellFormed(message: InboundMessage): void {
  expect(KINDS).toContain(message.kind);
  if (message.kind === 'malformed') {
    expect(typeof message.reason).toBe('string');
    expect(message.reason.length).toBeGreaterThan(0);
  }
}

/** The reference: JSON.parse then classify (what `parseMessage` must equal for text, any size). */
function reference(text: string): InboundMessage | 'malformed' {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return 'malformed';
  }
  return classifyMessage(value);
}

const ids = fc.oneof(fc.integer(), fc.string({ maxLength: 8 }), fc.double(), fc.constant(null), fc.boolean());
/** Objects shaped like JSON-RPC messages, with members of every type (most are wrong somewhere). */
const messageLike = fc.record(
  {
    id: ids,
    method: fc.oneof(fc.string({ maxLength: 12 }), fc.integer(), fc.constant(null)),
    params: fc.jsonValue({ maxDepth: 3 }),
    result: fc.jsonValue({ maxDepth: 3 }),
    error: fc.oneof(
      fc.record({ code: fc.oneof(fc.integer(), fc.double(), fc.string()), message: fc.jsonValue({ maxDepth: 1 }) }),
      fc.jsonValue({ maxDepth: 2 }),
    ),
    jsonrpc: fc.constant('2.0'),
  },
  { requiredKeys: [] },
);

/** A message holding one long plain string (≥ 16 KiB), the shape the large-message path takes apart. */
const largeText = fc
  .tuple(messageLike, fc.constantFrom('params', 'result'), fc.integer({ min: 16 * 1024, max: 70 * 1024 }))
  .map(([message, where, size]) => JSON.stringify({ ...message, [where]: { chunk: 'A'.repeat(size) } }));

/** Mutations that break JSON where the fast path looks: quotes, backslashes, control bytes, cuts. */
function mutate(text: string, at: number, insert: string, cut: number): string {
  const i = at % (text.length + 1);
  return text.slice(0, i) + insert + text.slice(i + cut);
}
const insertion = fc.constantFrom('"', '\\', '\\"', '\u0001', '\n', '}', ',', '{"a":', 'é', '\u0000', '');

describe('fuzz: parseMessage', () => {
  it('classifies any bytes or text as a message or `malformed` with a reason, never throwing', () => {
    fc.assert(
      fc.property(
        fc.oneof(fc.uint8Array({ maxLength: 512 }), fc.string({ unit: 'binary', maxLength: 256 })),
        (data) => {
          expectWellFormed(parseMessage(typeof data === 'string' ? data : Buffer.from(data)));
        },
      ),
      { numRuns },
    );
  });

  it('agrees with JSON.parse + classifyMessage for message-shaped JSON, as text and as bytes', () => {
    fc.assert(
      fc.property(messageLike, (message) => {
        const text = JSON.stringify(message);
        const expected = reference(text);
        expect(parseMessage(text)).toEqual(expected);
        expect(parseMessage(Buffer.from(text))).toEqual(expected);
      }),
      { numRuns },
    );
  });

  it('takes large messages apart exactly as JSON.parse would, also when mutated (quotes, escapes, cuts)', () => {
    fc.assert(
      fc.property(
        largeText,
        fc.nat(),
        insertion,
        fc.integer({ min: 0, max: 3 }),
        fc.boolean(),
        (text, at, insert, cut, doMutate) => {
          const input = doMutate ? mutate(text, at, insert, cut) : text;
          const parsed = parseMessage(Buffer.from(input));
          const expected = reference(input);
          if (expected === 'malformed') expect(parsed.kind).toBe('malformed');
          else expect(parsed).toEqual(expected);
          expectWellFormed(parsed);
        },
      ),
      { numRuns: Math.max(50, Math.ceil(numRuns / 4)) },
    );
  });
});

describe('fuzz: binary attachments', () => {
  it('any bytes behind the 0x01 marker are a message with its attachment or `malformed`, never a throw', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 300 }), (rest) => {
        const data = Buffer.concat([Buffer.of(ATTACHMENT_MARKER), rest]);
        expectWellFormed(parseMessage(data));
        const parts = splitAttachment(data);
        if (typeof parts !== 'string') expect(parts.attachment.byteLength).toBeLessThanOrEqual(data.length);
      }),
      { numRuns },
    );
  });

  it('a header length past the message (up to 4 GiB) is refused by its reason, no allocation of it', () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 0xffff_ffff }), fc.uint8Array({ maxLength: 64 }), (declared, body) => {
        const data = Buffer.alloc(5 + body.length);
        data[0] = ATTACHMENT_MARKER;
        data.writeUInt32BE(declared, 1);
        data.set(body, 5);
        const parts = splitAttachment(data);
        if (declared > body.length) {
          expect(parts).toMatch(/overruns a message of/);
          expect(parseMessage(data)).toEqual({ kind: 'malformed', reason: parts });
        } else {
          expect(typeof parts).toBe('object');
        }
      }),
      { numRuns },
    );
  });

  it('round-trips any object-shaped message with any attachment; other shapes are refused', () => {
    fc.assert(
      fc.property(messageLike, fc.uint8Array({ maxLength: 2048 }), (message, bytes) => {
        const attachment = Buffer.from(bytes);
        const json = JSON.stringify(message);
        const parsed = parseMessage(encodeWithAttachment(json, attachment));
        expectWellFormed(parsed);
        const expected = reference(json);
        if (expected === 'malformed' || expected.kind === 'malformed') {
          expect(parsed.kind).toBe('malformed');
          return;
        }
        const holder = parsed.kind === 'request' || parsed.kind === 'notification' ? parsed.params : undefined;
        const carrier = parsed.kind === 'response' ? parsed.result : holder;
        if (parsed.kind === 'malformed') {
          expect(parsed.reason).toBe('a binary attachment needs an object as params or result');
        } else {
          expect(attachmentOf(carrier)?.equals(attachment)).toBe(true);
          expect(parsed).toEqual(expected);
        }
      }),
      { numRuns },
    );
  });
});

/** A Readable stand-in that StdioTransport listens to; `emit('data', …)` delivers a chunk synchronously. */
function fakeInput(): Readable {
  return Object.assign(new EventEmitter(), { pause() {}, resume() {} }) as unknown as Readable;
}

function fakeOutput(): Writable {
  return Object.assign(new EventEmitter(), { writableLength: 0, write: () => true, cork() {}, uncork() {} }) as never;
}

/** The line splitter's contract over a whole stream: complete lines, blank ones skipped, long ones reported. */
function expectedLines(stream: Buffer, maxBytes: number): Array<{ line: string } | { oversize: number }> {
  const out: Array<{ line: string } | { oversize: number }> = [];
  const pieces = stream.toString('latin1').split('\n');
  pieces.pop(); // no newline after it: still pending
  for (const piece of pieces) {
    if (piece.length > maxBytes) out.push({ oversize: piece.length });
    else if (!/^[ \t\r]*$/.test(piece)) out.push({ line: piece });
  }
  return out;
}

/** Byte streams rich in newlines, blanks and long runs, cut into chunks at arbitrary places. */
const streamBytes = fc
  .array(
    fc.oneof(
      fc.constantFrom('\n', '\r\n', ' ', '\t', '{}', '{"method":"x"}'),
      fc.string({ unit: 'binary-ascii', maxLength: 40 }),
      fc.integer({ min: 1, max: 120 }).map((n) => 'x'.repeat(n)),
    ),
    { maxLength: 40 },
  )
  .map((parts) => Buffer.from(parts.join(''), 'latin1'));

describe('fuzz: stdio line splitter', () => {
  it('yields the same lines for any chunking, drops blank ones and reports each over-long one once', () => {
    fc.assert(
      fc.property(
        streamBytes,
        fc.array(fc.nat(), { maxLength: 12 }),
        fc.integer({ min: 1, max: 100 }),
        (stream, cuts, maxMessageBytes) => {
          const input = fakeInput();
          const seen: Array<{ line: string } | { oversize: number }> = [];
          const transport = new StdioTransport({
            input,
            output: fakeOutput(),
            maxMessageBytes,
            onOversize: (bytes) => seen.push({ oversize: bytes }),
          });
          transport.start({
            onMessage: (data) => seen.push({ line: Buffer.from(data as Buffer).toString('latin1') }),
            onClose: () => {},
            onDrain: () => {},
          });
          const points = [...new Set(cuts.map((c) => c % (stream.length + 1)))].sort((a, b) => a - b);
          let from = 0;
          for (const point of [...points, stream.length]) {
            input.emit('data', stream.subarray(from, point));
            from = point;
          }
          expect(seen).toEqual(expectedLines(stream, maxMessageBytes));
          transport.close();
        },
      ),
      { numRuns },
    );
  });
});
