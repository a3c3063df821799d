// Tether's flow-control extension (capability `flowControl`, exec-protocol's flow-control.ts), on the
// wire: a client that opts in at `process/start` is never sent more than its window of unacknowledged
// output; the child blocks instead, and `process/ack` lets it run on. Codex does not offer it: a Codex
// peer must not advertise it, and the SDK then keeps Codex's semantics.
import { isAlive, type TestClient, waitUntil } from '@tether/test-kit';
import { describe, expect, it } from 'vitest';
import { CASES_WITH_REMOTE, useHarness } from './support.ts';

/** Bytes of `process/output` received for `processId`, and the highest seq among them. */
function received(client: TestClient, processId: string): { bytes: number; lastSeq: number; closed: boolean } {
  let bytes = 0;
  let lastSeq = 0;
  let closed = false;
  for (const n of client.notifications) {
    const params = n.params as { processId?: string; seq?: number; chunk?: string };
    if (params?.processId !== processId) continue;
    if (n.method === 'process/output') {
      bytes += Buffer.from(params.chunk ?? '', 'base64').length;
      lastSeq = Math.max(lastSeq, params.seq ?? 0);
    }
    if (n.method === 'process/closed') closed = true;
  }
  return { bytes, lastSeq, closed };
}

describe.each(CASES_WITH_REMOTE)('flow control: %s', (_label, { kind, transport }) => {
  const h = useHarness();

  if (kind === 'codex') {
    it('codex does not advertise flowControl (our SDK then sends no flow-control fields)', async () => {
      const { initializeResult } = await h.session(kind, transport);
      const capabilities = (initializeResult.environmentInfo as { capabilities?: Record<string, unknown> } | undefined)
        ?.capabilities;
      expect(capabilities?.flowControl).toBeUndefined();
    });
    return;
  }

  it('advertises flowControl and grants a clamped window', async () => {
    const { client, initializeResult } = await h.session(kind, transport);
    const info = initializeResult.environmentInfo as { capabilities: Record<string, unknown> };
    expect(info.capabilities.flowControl).toBe(true);
    const started = await client.call<{ flowControl?: { windowBytes: number } }>(
      'process/start',
      h.startParams('tiny-window', ['true'], { flowControl: { windowBytes: 1 } }),
    );
    expect(started.flowControl).toEqual({ windowBytes: 64 * 1024 });
    const plain = await client.call<{ flowControl?: unknown }>('process/start', h.startParams('no-window', ['true']));
    expect(plain.flowControl).toBeUndefined();
  });

  it('sends no more than the window until acknowledged, then every byte once the client acknowledges', async () => {
    const { client } = await h.session(kind, transport);
    const window = 128 * 1024;
    const total = 4 * 1024 * 1024;
    await client.call(
      'process/start',
      h.startParams('flow', ['head', '-c', String(total), '/dev/zero'], { flowControl: { windowBytes: window } }),
    );
    await waitUntil(() => received(client, 'flow').bytes >= window, 'the first window of output');
    // Without acknowledgements nothing more comes: the window plus at most one read of the pipe.
    await new Promise((resolve) => setTimeout(resolve, 300));
    const stalled = received(client, 'flow');
    expect(stalled.bytes).toBeLessThanOrEqual(window + 64 * 1024);
    expect(stalled.closed).toBe(false);
    // Acknowledge as a consumer would, until the process closes.
    let acked = 0;
    await waitUntil(
      () => {
        const now = received(client, 'flow');
        if (now.lastSeq > acked) {
          acked = now.lastSeq;
          client.notify('process/ack', { processId: 'flow', seq: acked });
        }
        return now.closed;
      },
      'the process to close with acknowledgements',
      30_000,
      5,
    );
    expect(received(client, 'flow').bytes).toBe(total);
  });

  it('an invalid process/ack is a protocol error that closes the connection', async () => {
    const { client } = await h.session(kind, transport);
    const started = await client.call<{ processId: string }>('process/start', h.startParams('kept', ['sleep', '1000']));
    expect(started.processId).toBe('kept');
    const { processes } = await client.call<{ processes: Array<{ pid: number }> }>('process/list', {});
    const pid = processes[0]!.pid;
    client.notify('process/ack', { processId: 'kept', seq: -1 });
    if (transport === 'stdio') {
      // stdio serves one connection: its end ends the session, which kills its processes.
      await waitUntil(() => !isAlive(pid), 'the child of the closed connection to be killed');
    } else {
      await client.closed;
    }
  });
});
