import { ConnectionClosedError, type MessageTransport, WebSocketTransport } from '@tether/jsonrpc';
import { type PeerHandle, startPeer } from '@tether/test-kit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { TetherError } from './errors.js';
import { ExecServerClient } from './exec-client.js';

describe('ExecServerClient: connection set-up retries', () => {
  let peer: PeerHandle;
  beforeAll(async () => {
    peer = await startPeer({ kind: 'tether', transport: 'ws' });
  });
  afterAll(async () => {
    await peer?.close();
  });

  const dialPeer = async (): Promise<MessageTransport> => {
    const ws = new WebSocket(peer.url!, { perMessageDeflate: false });
    await new Promise<void>((resolve, reject) => {
      ws.once('open', resolve);
      ws.once('error', reject);
    });
    return new WebSocketTransport(ws, { peer: peer.url! });
  };

  it('tries again after failures that may pass (a refused socket, a connection closed during set-up)', async () => {
    const failures: Error[] = [
      new TetherError('connect_failed', 'cannot connect: ECONNREFUSED'),
      new ConnectionClosedError('relay socket closed (1006)'),
    ];
    let attempts = 0;
    const client = await ExecServerClient.connect({
      dial: async () => {
        attempts++;
        const failure = failures.shift();
        if (failure) throw failure;
        return dialPeer();
      },
    });
    try {
      expect(attempts).toBe(3);
      expect(client.sessionId).toMatch(/[0-9a-f-]{36}/);
    } finally {
      client.close();
    }
  });

  it('a refusal is final at once', async () => {
    let attempts = 0;
    const error = await ExecServerClient.connect({
      dial: async () => {
        attempts++;
        throw new TetherError('unauthorized', 'the registry refused the harness API key (HTTP 401)');
      },
    }).catch((err: unknown) => err);
    expect(error).toMatchObject({ code: 'unauthorized' });
    expect(attempts).toBe(1);
  });

  it('gives up at its bound with a clear error naming the attempts and the last failure', async () => {
    let attempts = 0;
    const error = await ExecServerClient.connect({
      connectRetry: { timeoutMs: 400 },
      dial: async () => {
        attempts++;
        throw new TetherError('connect_failed', 'cannot connect: ECONNREFUSED');
      },
    }).catch((err: unknown) => err);
    expect(error).toBeInstanceOf(TetherError);
    expect((error as TetherError).code).toBe('connect_failed');
    expect((error as Error).message).toMatch(
      /could not connect within 400 ms \(\d+ attempts\): cannot connect: ECONNREFUSED/,
    );
    expect(attempts).toBeGreaterThan(1);
  });

  it('connectRetry: false makes one attempt', async () => {
    let attempts = 0;
    await expect(
      ExecServerClient.connect({
        connectRetry: false,
        dial: async () => {
          attempts++;
          throw new TetherError('connect_failed', 'cannot connect: ECONNREFUSED');
        },
      }),
    ).rejects.toMatchObject({ code: 'connect_failed' });
    expect(attempts).toBe(1);
  });
});
