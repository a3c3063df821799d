// Tether's `binaryOutput` extension: where the transport carries binary attachments (WebSocket, the relay's
// secure stream), a process started with `binaryOutput: true` sends its output as raw bytes after the JSON
// header instead of base64 inside it. Over stdio, and for Codex, nothing changes.
import { collectUntilClosed, type RpcNotification } from '@tether/test-kit';
import { describe, expect, it } from 'vitest';
import { CASES_WITH_REMOTE, sh, useHarness } from './support.ts';

describe.each(CASES_WITH_REMOTE)('binary output: %s', (_label, { kind, transport }) => {
  const h = useHarness();
  const offered = kind === 'tether' && transport !== 'stdio';

  it(`${offered ? 'advertises' : 'does not advertise'} binaryOutput and binaryInput`, async () => {
    const { initializeResult } = await h.session(kind, transport);
    const capabilities = (initializeResult.environmentInfo as { capabilities?: Record<string, unknown> } | undefined)
      ?.capabilities;
    expect(capabilities?.binaryOutput === true).toBe(offered);
    expect(capabilities?.binaryInput === true).toBe(offered);
  });

  if (offered) {
    it('process/write with the bytes as an attachment (binaryInput) reaches the child byte for byte', async () => {
      const { client } = await h.session(kind, transport);
      await client.call(
        'process/start',
        h.startParams('sink', sh('od -An -tx1 -v | tr -d " \\n"'), { pipeStdin: true }),
      );
      const bytes = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
      const header = JSON.stringify({
        id: 'w1',
        method: 'process/write',
        params: { processId: 'sink', writeId: 'w1' },
      });
      const prefix = Buffer.alloc(5);
      prefix[0] = 0x01;
      prefix.writeUInt32BE(Buffer.byteLength(header), 1);
      client.sendRaw(Buffer.concat([prefix, Buffer.from(header), bytes]));
      const answer = await client.waitForMessage((m) => m.id === 'w1');
      expect(answer.result).toEqual({ status: 'accepted' });
      await client.call('process/closeStdin', { processId: 'sink' });
      const { output } = await collectUntilClosed(client, 'sink');
      expect(output).toBe(bytes.toString('hex'));
    });
  }

  if (kind !== 'tether') return;

  it(`output of a binaryOutput process arrives ${offered ? 'as raw attachments' : 'as base64'}, byte for byte`, async () => {
    const { client } = await h.session(kind, transport);
    // Every byte value, then 1 MiB more: no text encoding may touch it.
    const script = 'printf "$(printf "\\\\%03o" $(seq 0 255))"; head -c 1048576 /dev/zero | tr "\\\\0" "\\\\377"';
    await client.call('process/start', h.startParams('bin', sh(script), { binaryOutput: true }));
    await collectUntilClosed(client, 'bin');
    const outputs = client.notifications.filter(
      (n): n is RpcNotification<{ processId: string; seq: number; chunk?: string }> =>
        n.method === 'process/output' && (n.params as { processId?: string }).processId === 'bin',
    );
    expect(outputs.length).toBeGreaterThan(0);
    const bytes = Buffer.concat(
      outputs
        .sort((a, b) => a.params.seq - b.params.seq)
        .map((n) => {
          if (offered) {
            expect(n.params.chunk).toBeUndefined();
            return n.attachment as Buffer;
          }
          expect(n.attachment).toBeUndefined();
          return Buffer.from(n.params.chunk ?? '', 'base64');
        }),
    );
    const expected = Buffer.concat([
      Buffer.from(Array.from({ length: 256 }, (_, i) => i)),
      Buffer.alloc(1 << 20, 0xff),
    ]);
    expect(bytes.equals(expected)).toBe(true);
  });
});
