import { buildRelayPrologue, createInitiator, generateIdentity, type Transport } from '@tether/noise';
import {
  dataFrame,
  type Frame,
  frameMessage,
  MAX_RECORD_PLAINTEXT_BYTES,
  MessageReassembler,
  SendSequence,
} from '@tether/relay-frames';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { PROTOCOL_ERROR_RESET } from './errors.js';
import type { FrameLink, FrameLinkHandlers } from './link.js';
import { SecureStream } from './secure-stream.js';

// Record decoding of an open secure stream against an authenticated but hostile peer (issue 16): whatever
// records it seals (any length prefixes, any cut, any seq), the stream delivers whole messages or resets
// with the opaque reason; nothing throws out of the frame handler. Runs per property: TETHER_FUZZ_RUNS
// (`pnpm fuzz` raises it); each run does a handshake, so a tenth of that.
const numRuns = Math.max(25, Math.ceil((Number(process.env.TETHER_FUZZ_RUNS) || 300) / 10));
// TETHER_FUZZ_SEED replays a failure's printed seed.
if (process.env.TETHER_FUZZ_SEED) fc.configureGlobal({ seed: Number(process.env.TETHER_FUZZ_SEED) });

const ids = { environmentId: 'env-fuzz', registrationId: 'reg-fuzz', streamId: 'stream-fuzz' };
const harness = generateIdentity();
const executor = generateIdentity();

/** A link that hands frames to the test synchronously and records what the stream sends and why it closed. */
function recordingLink() {
  const sent: Frame[] = [];
  let handlers: FrameLinkHandlers | null = null;
  let closed: string | null = null;
  const link: FrameLink = {
    start: (h) => {
      handlers = h;
    },
    send: (frame, release) => {
      sent.push(frame);
      release?.();
      return true;
    },
    bufferedAmount: 0,
    pause: () => {},
    resume: () => {},
    close: (reason) => {
      closed ??= reason;
    },
  };
  return {
    link,
    sent,
    deliver: (frame: Frame) => handlers?.onFrame(frame),
    get closed() {
      return closed;
    },
  };
}

/** The executor's stream, opened by a raw initiator whose transport the test keeps (it plays the harness). */
async function openedStream() {
  const wire = recordingLink();
  const initiator = createInitiator({
    remoteStatic: executor.publicKey,
    staticKeys: harness,
    prologue: buildRelayPrologue(ids),
    payload: new TextEncoder().encode('authorization'),
  });
  const { stream } = await SecureStream.accept({
    link: wire.link,
    ...ids,
    staticKeys: executor,
    message1: initiator.message1,
    authorize: async () => true,
  });
  const message2 = wire.sent.find((frame) => frame.kind === 'handshake');
  if (message2?.kind !== 'handshake') throw new Error('no message 2');
  const transport: Transport = initiator.readMessage2(message2.payload);
  const messages: Buffer[] = [];
  const closes: string[] = [];
  stream.start({
    onMessage: (data) => messages.push(Buffer.from(data as Buffer)),
    onClose: (reason) => closes.push(reason),
    onDrain: () => {},
  });
  const sequence = new SendSequence();
  /** Seals `plaintext` as the next record and delivers it (optionally under another seq). */
  const sendRecord = (plaintext: Uint8Array, seqOverride?: number) => {
    const seq = sequence.take();
    wire.deliver(dataFrame(ids.streamId, seqOverride ?? seq, transport.encrypt(plaintext)));
  };
  return { stream, wire, messages, closes, sendRecord };
}

/** A record's plaintext: a well-framed piece, a random one, or a prefix claiming a huge or empty message. */
const plaintextRecord = fc.oneof(
  fc.uint8Array({ minLength: 1, maxLength: 200 }).map((json) => frameMessage(json)[0] as Uint8Array),
  fc.uint8Array({ maxLength: 200 }),
  fc
    .tuple(fc.oneof(fc.constant(0), fc.integer({ min: 64 * 1024 * 1024 + 1, max: 0xffff_ffff })), fc.uint8Array())
    .map(([length, rest]) => {
      const prefix = Buffer.alloc(4);
      prefix.writeUInt32BE(length);
      return Buffer.concat([prefix, rest]);
    }),
  fc.constant(new Uint8Array(MAX_RECORD_PLAINTEXT_BYTES + 1)),
);

/**
 * What the stream must deliver: the reassembler's messages for the records before the first framing error
 * (then the stream resets) or the first record under a seq other than its nonce (then nothing later is
 * delivered: the window drops it as a duplicate, parks it for a seq that never comes, or the stream resets).
 */
function reference(records: Array<[Uint8Array, number | undefined]>): {
  messages: string[];
  end: 'open' | 'reset' | 'either';
} {
  const reassembler = new MessageReassembler();
  const messages: string[] = [];
  for (const [index, [plaintext, seq]] of records.entries()) {
    if (seq !== undefined && seq !== index) return { messages, end: 'either' };
    try {
      for (const message of reassembler.push(plaintext)) messages.push(Buffer.from(message).toString('hex'));
    } catch {
      return { messages, end: 'reset' };
    }
  }
  return { messages, end: 'open' };
}

describe('fuzz: secure stream record decoding', () => {
  it('authenticated records of any framing are delivered as whole messages or end the stream with a reset', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.tuple(plaintextRecord, fc.option(fc.nat({ max: 80 }), { nil: undefined })), { maxLength: 8 }),
        async (records) => {
          const { stream, wire, messages, closes, sendRecord } = await openedStream();
          for (const [plaintext, seq] of records) {
            expect(() => sendRecord(plaintext, seq)).not.toThrow();
          }
          const expected = reference(records);
          expect(messages.map((m) => m.toString('hex'))).toEqual(expected.messages);
          if (expected.end !== 'either') expect(stream.status).toBe(expected.end === 'reset' ? 'closed' : 'open');
          if (stream.status === 'closed') {
            expect(wire.sent.at(-1)).toMatchObject({ kind: 'reset', reason: PROTOCOL_ERROR_RESET });
            expect(closes).toHaveLength(1);
          }
          stream.close();
        },
      ),
      { numRuns },
    );
  });

  it('records that were not sealed with the session key (or replayed under another seq) reset the stream', async () => {
    await fc.assert(
      fc.asyncProperty(fc.uint8Array({ minLength: 1, maxLength: 300 }), fc.nat({ max: 3 }), async (bytes, seq) => {
        const { stream, wire, messages } = await openedStream();
        expect(() => wire.deliver(dataFrame(ids.streamId, seq, bytes))).not.toThrow();
        // seq > 0 is parked out of order first; seq 0 is opened at once. Either way nothing is delivered.
        if (seq > 0) for (let s = 0; s < seq; s++) wire.deliver(dataFrame(ids.streamId, s, bytes));
        expect(messages).toEqual([]);
        expect(stream.status).toBe('closed');
        expect(wire.sent.at(-1)).toMatchObject({ kind: 'reset', reason: PROTOCOL_ERROR_RESET });
      }),
      { numRuns },
    );
  });
});
