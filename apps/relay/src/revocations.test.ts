import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import {
  heartbeatRevocations,
  parseRevocationPush,
  readRequestLimited,
  readResponseLimited,
  revocationEntries,
} from './revocations.js';

describe('revocation lists (untrusted input)', () => {
  it('keeps the well-formed entries and skips everything else', () => {
    expect(
      revocationEntries([
        { environment_id: 'env-1', registration_id: 'reg_a' },
        null,
        'env-1',
        [],
        { environment_id: 'env-1' },
        { environment_id: 'env/../x', registration_id: 'reg_b' },
        { environment_id: 'env-2', registration_id: 'has space' },
        { environment_id: 'env-2', registration_id: 'x'.repeat(257) },
        { environment_id: 7, registration_id: 'reg_c' },
        { environment_id: 'env-3', registration_id: 'reg_d', extra: true },
      ]),
    ).toEqual([
      { environmentId: 'env-1', registrationId: 'reg_a' },
      { environmentId: 'env-3', registrationId: 'reg_d' },
    ]);
    expect(revocationEntries({ length: 1, 0: { environment_id: 'e', registration_id: 'r' } })).toEqual([]);
  });

  it('reads a heartbeat answer with or without the field, and anything malformed as none', () => {
    const entry = { environment_id: 'env-1', registration_id: 'reg_a' };
    expect(heartbeatRevocations(JSON.stringify({ status: 'ok', revoked_registrations: [entry] }))).toEqual([
      { environmentId: 'env-1', registrationId: 'reg_a' },
    ]);
    for (const text of ['{"status":"ok"}', '', 'not json', 'null', '[1]', '{"revoked_registrations":{}}']) {
      expect(heartbeatRevocations(text)).toEqual([]);
    }
  });

  it('parses a push only as the documented object', () => {
    const entry = { environment_id: 'env-1', registration_id: 'reg_a' };
    expect(parseRevocationPush(JSON.stringify({ revoked_registrations: [entry], issued_at: 1_700_000_000 }))).toEqual({
      revocations: [{ environmentId: 'env-1', registrationId: 'reg_a' }],
      issuedAt: 1_700_000_000,
    });
    for (const body of [
      'not json',
      '[]',
      '{"issued_at":1}',
      '{"revoked_registrations":{},"issued_at":1}',
      '{"revoked_registrations":[]}',
      '{"revoked_registrations":[],"issued_at":"1"}',
      '{"revoked_registrations":[],"issued_at":-1}',
      '{"revoked_registrations":[],"issued_at":1.5}',
    ]) {
      expect(parseRevocationPush(body), body).toBeNull();
    }
  });

  it('reads a response body up to its limit and gives up beyond it', async () => {
    const body = (chunks: string[]) =>
      new ReadableStream<Uint8Array>({
        start(controller) {
          for (const chunk of chunks) controller.enqueue(Buffer.from(chunk));
          controller.close();
        },
      });
    expect((await readResponseLimited(body(['ab', 'cd']), 4))?.toString()).toBe('abcd');
    expect(await readResponseLimited(body(['ab', 'cde']), 4)).toBeNull();
    expect((await readResponseLimited(null, 4))?.byteLength).toBe(0);
  });

  /** A server that reads each request's body with readRequestLimited(…, limit, timeoutMs) into `seen`. */
  async function readingServer(
    limit: number,
    timeoutMs: number | undefined,
    send: (url: string, seen: Array<Buffer | null | 'timeout'>) => Promise<void>,
  ) {
    const seen: Array<Buffer | null | 'timeout'> = [];
    const server = createServer(async (req: IncomingMessage, res) => {
      seen.push(await readRequestLimited(req, limit, timeoutMs));
      res.once('finish', () => req.destroy());
      res.end();
    });
    server.listen(0, '127.0.0.1');
    await new Promise((resolve) => server.once('listening', resolve));
    try {
      await send(`http://127.0.0.1:${(server.address() as AddressInfo).port}/`, seen);
    } finally {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    }
  }

  it('reads a request body up to its limit, refusing a longer declared or sent one', async () => {
    await readingServer(8, undefined, async (url, seen) => {
      await fetch(url, { method: 'POST', body: '12345678' });
      await fetch(url, { method: 'POST', body: '123456789' });
      // Chunked (no content-length): the limit applies to what arrives.
      const chunked = new ReadableStream<Uint8Array>({
        start(controller) {
          controller.enqueue(Buffer.from('12345'));
          controller.enqueue(Buffer.from('67890'));
          controller.close();
        },
      });
      await fetch(url, { method: 'POST', body: chunked, duplex: 'half' } as RequestInit).catch(() => {});
      await expect.poll(() => seen.length).toBe(3);
      expect(seen.map((b) => b?.toString() ?? null)).toEqual(['12345678', null, null]);
    });
  });

  it('gives up on a request body that has not all arrived by its deadline', async () => {
    await readingServer(1024, 50, async (url, seen) => {
      await fetch(url, { method: 'POST', body: 'on time' });
      // Half a body, and the rest never.
      const stalled = new ReadableStream<Uint8Array>({
        start(controller) {
          controller.enqueue(Buffer.from('12345'));
        },
      });
      await fetch(url, { method: 'POST', body: stalled, duplex: 'half' } as RequestInit).catch(() => {});
      await expect.poll(() => seen.length).toBe(2);
      expect(seen.map((b) => (Buffer.isBuffer(b) ? b.toString() : b))).toEqual(['on time', 'timeout']);
    });
  });
});
