// Port of codex-rs/exec-server/tests/exec_process.rs (the "remote" half) to the raw protocol, run
// against every peer (codex = reference, tether = ours) over every transport.
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  b64,
  collectEvents,
  collectUntilClosed,
  decodeB64Text,
  eventsOutput,
  type ProcessEvent,
  readProcess,
  readUntilOutput,
  type TestClient,
  waitUntil,
} from '@tether/test-kit';
import { describe, expect, it } from 'vitest';
import { CASES_WITH_REMOTE, type StartParamsExtra, sh, useHarness } from './support.ts';

describe.each(CASES_WITH_REMOTE)('exec_process: %s', (_label, { kind, transport }) => {
  const h = useHarness();

  it('starts_and_exits', async () => {
    const { client } = await h.session(kind, transport);
    const started = await client.call<{ processId: string }>('process/start', h.startParams('proc-1', ['true']));
    expect(started.processId).toBe('proc-1');
    const collected = await collectUntilClosed(client, 'proc-1');
    expect(collected.exitCode).toBe(0);
    expect(collected.closed).toBe(true);
  });

  it('streams_output', async () => {
    const { client } = await h.session(kind, transport);
    const started = await client.call<{ processId: string }>(
      'process/start',
      h.startParams('proc-stream', sh("sleep 0.05; printf 'session output\\n'")),
    );
    expect(started.processId).toBe('proc-stream');
    const collected = await collectUntilClosed(client, 'proc-stream');
    expect(collected.output).toBe('session output\n');
    expect(collected.exitCode).toBe(0);
    expect(collected.closed).toBe(true);
  });

  it('gives the child pipes: /dev/stdout and /dev/stderr can be opened, as with sshd', async () => {
    const { client } = await h.session(kind, transport);
    await client.call(
      'process/start',
      h.startParams(
        'proc-devstd',
        sh(
          'echo out > /dev/stdout; echo err > /dev/stderr; echo tee | tee /dev/stderr; stat -L -c %F /proc/self/fd/1 /proc/self/fd/2',
        ),
      ),
    );
    const events = await collectEvents(client, 'proc-devstd');
    expect(eventsOutput(events, ['stdout'])).toBe('out\ntee\nfifo\nfifo\n');
    expect(eventsOutput(events, ['stderr'])).toBe('err\ntee\n');
    expect(events.find((e) => e.kind === 'exited')).toMatchObject({ exitCode: 0 });
  });

  it('streams a large output byte for byte (every chunk, in seq order)', async () => {
    const { client } = await h.session(kind, transport);
    const total = 8 * 1024 * 1024;
    // Word i (4 bytes, big-endian) at offset 4i: a chunk out of place or overwritten in flight shows.
    const script =
      'const total = Number(process.argv[1]); const block = Buffer.alloc(1 << 20); let w = 0;' +
      '(function next() { while (w * 4 < total) { for (let i = 0; i < block.length; i += 4) block.writeUInt32BE(w++, i);' +
      'if (!process.stdout.write(block)) return process.stdout.once("drain", next); } })();';
    await client.call('process/start', h.startParams('proc-large', [process.execPath, '-e', script, String(total)]));
    const events = await collectEvents(client, 'proc-large', { timeoutMs: 60_000 });
    expect(events.at(-1)?.kind).toBe('closed');
    const chunks = client.notifications
      .filter((n) => n.method === 'process/output' && n.params.processId === 'proc-large')
      .map((n) => n.params as { seq: number; chunk: string })
      .sort((a, b) => a.seq - b.seq)
      .map((p) => Buffer.from(p.chunk, 'base64'));
    const output = Buffer.concat(chunks);
    expect(output.length).toBe(total);
    const expected = Buffer.alloc(total);
    for (let i = 0; i < total; i += 4) expected.writeUInt32BE(i / 4, i);
    expect(output.equals(expected)).toBe(true);
  });

  it('pushes_events with exact seqs', async () => {
    const { client } = await h.session(kind, transport);
    await client.call(
      'process/start',
      h.startParams(
        'proc-events',
        sh("printf 'event output\\n'; sleep 0.1; printf 'event err\\n' >&2; sleep 0.1; exit 7"),
      ),
    );
    const events = await collectEvents(client, 'proc-events');
    expect(events).toEqual<ProcessEvent[]>([
      { kind: 'output', seq: 1, stream: 'stdout', text: 'event output\n' },
      { kind: 'output', seq: 2, stream: 'stderr', text: 'event err\n' },
      { kind: 'exited', seq: 3, exitCode: 7 },
      { kind: 'closed', seq: 4 },
    ]);
  });

  it('replays_events_after_close', async () => {
    const { client } = await h.session(kind, transport);
    await client.call(
      'process/start',
      h.startParams('proc-events-late', sh("printf 'late one\\n'; printf 'late two\\n'")),
    );
    const fromReads = await collectUntilClosed(client, 'proc-events-late');
    expect([fromReads.output, fromReads.exitCode, fromReads.closed]).toEqual(['late one\nlate two\n', 0, true]);

    // After close, a read from the start replays the whole retained output again…
    const replay = await readProcess(client, { processId: 'proc-events-late', afterSeq: 0 });
    expect(replay.chunks.map((c) => decodeB64Text(c.chunk)).join('')).toBe('late one\nlate two\n');
    expect(replay).toMatchObject({ exited: true, exitCode: 0, closed: true, failure: null });

    // …and the pushed events cover every seq through close.
    const events = await collectEvents(client, 'proc-events-late');
    expect(eventsOutput(events, ['stdout', 'pty'])).toBe('late one\nlate two\n');
    expect(eventsOutput(events, ['stderr'])).toBe('');
    expect(events.find((e) => e.kind === 'exited')).toMatchObject({ exitCode: 0 });
    expect(events.at(-1)?.kind).toBe('closed');
    expect(events.at(-1)?.seq).toBe(replay.nextSeq - 1);
  });

  it('retains_output_after_exit_until_streams_close', async () => {
    const { client } = await h.session(kind, transport);
    const release = join(h.workDir, `release-${kind}-${transport}`);
    // The parent exits at once; a background child keeps the pipes and prints after the release file appears.
    await client.call(
      'process/start',
      h.startParams(
        'proc-output-after-exit',
        sh('( while [ ! -f "$RELEASE" ]; do sleep 0.01; done; printf \'late output after exit\\n\' ) & exit 0'),
        { env: { RELEASE: release } },
      ),
    );

    // Wait (bounded) until the exit is known.
    let exitResponse = await readProcess(client, { processId: 'proc-output-after-exit', waitMs: 2_000 });
    await waitUntil(async () => {
      if (exitResponse.exited) return true;
      exitResponse = await readProcess(client, { processId: 'proc-output-after-exit', waitMs: 1_000 });
      return exitResponse.exited;
    }, 'the parent to exit');
    expect(exitResponse.chunks).toEqual([]);
    expect(exitResponse.exitCode).toBe(0);
    expect(exitResponse.closed).toBe(false);
    const exitSeq = exitResponse.nextSeq - 1;
    expect(exitSeq).toBeGreaterThanOrEqual(1);

    writeFileSync(release, 'go');
    const late = await readUntilOutput(client, 'proc-output-after-exit', (o) => o.includes('\n'), {
      afterSeq: exitSeq,
    });
    expect(late.chunks.every((c) => c.stream === 'stdout')).toBe(true);
    expect(late.chunks.every((c) => c.seq > exitSeq)).toBe(true);
    expect(late.output).toBe('late output after exit\n');

    const all = await collectUntilClosed(client, 'proc-output-after-exit');
    expect([all.output, all.exitCode, all.closed]).toEqual(['late output after exit\n', 0, true]);
  });

  /** Starts `script` as `processId` (with `extra`), writes `text` to it once, and answers the write's status. */
  async function startThenWrite(
    client: TestClient,
    processId: string,
    script: string,
    extra: StartParamsExtra,
    text: string,
  ): Promise<string> {
    await client.call('process/start', h.startParams(processId, sh(script), extra));
    const write = await client.call<{ status: string }>('process/write', {
      processId,
      chunk: b64(text),
      writeId: 'write-1',
    });
    return write.status;
  }

  it('write_then_read (tty)', async () => {
    const { client } = await h.session(kind, transport);
    const status = await startThenWrite(
      client,
      'proc-stdin',
      'IFS= read line; printf \'from-stdin:%s\\n\' "$line"',
      { tty: true },
      'hello\n',
    );
    expect(status).toBe('accepted');
    const collected = await collectUntilClosed(client, 'proc-stdin');
    expect(collected.output).toContain('from-stdin:hello');
    expect(collected.chunks.every((c) => c.stream === 'pty')).toBe(true);
    expect(collected.exitCode).toBe(0);
    expect(collected.closed).toBe(true);
  });

  it('write_then_read_without_tty', async () => {
    const { client } = await h.session(kind, transport);
    const status = await startThenWrite(
      client,
      'proc-stdin-pipe',
      'IFS= read line; printf \'from-stdin:%s\\n\' "$line"',
      { pipeStdin: true },
      'hello\n',
    );
    expect(status).toBe('accepted');
    const collected = await collectUntilClosed(client, 'proc-stdin-pipe');
    expect([collected.output, collected.exitCode, collected.closed]).toEqual(['from-stdin:hello\n', 0, true]);
  });

  it('rejects_write_without_pipe_stdin', async () => {
    const { client } = await h.session(kind, transport);
    const status = await startThenWrite(
      client,
      'proc-stdin-closed',
      "sleep 0.3; if IFS= read -r line; then printf 'read:%s\\n' \"$line\"; else printf 'eof\\n'; fi",
      {},
      'ignored\n',
    );
    expect(status).toBe('stdinClosed');
    const collected = await collectUntilClosed(client, 'proc-stdin-closed');
    expect([collected.output, collected.exitCode, collected.closed]).toEqual(['eof\n', 0, true]);
  });

  it('signal_interrupts_process', async () => {
    const { client } = await h.session(kind, transport);
    await client.call(
      'process/start',
      h.startParams(
        'proc-signal',
        sh("trap 'printf \"signal:2\\n\"; exit 7' INT; printf 'ready\\n'; while :; do sleep 0.01; done"),
      ),
    );
    await readUntilOutput(client, 'proc-signal', (o) => o.includes('ready\n'));
    expect(await client.call('process/signal', { processId: 'proc-signal', signal: 'interrupt' })).toEqual({});
    const collected = await collectUntilClosed(client, 'proc-signal');
    expect(collected.output).toContain('signal:2');
    expect(collected.exitCode).toBe(7);
    expect(collected.closed).toBe(true);
  });

  it('preserves_queued_events_before_subscribe', async () => {
    const { client } = await h.session(kind, transport);
    await client.call('process/start', h.startParams('proc-queued', sh("printf 'queued output\\n'")));
    // Let the process finish completely before anybody reads.
    await client.nextNotification((n) => n.method === 'process/closed' && n.params.processId === 'proc-queued');
    const collected = await collectUntilClosed(client, 'proc-queued');
    expect([collected.output, collected.exitCode, collected.closed]).toEqual(['queued output\n', 0, true]);
  });

  if (transport === 'ws' || transport === 'remote') {
    it('recovers_after_transport_disconnect (detach, resume, read the gap, write)', async () => {
      const { peer, client, sessionId } = await h.session(kind, transport);
      const gate = join(h.workDir, `gate-${kind}`);
      const emitted = join(h.workDir, `emitted-${kind}`);
      await client.call(
        'process/start',
        h.startParams(
          'proc-recover',
          sh(
            [
              'printf \'ready:%s\\n\' "$$"',
              'while [ ! -f "$GATE" ]; do /bin/sleep 0.01; done',
              'printf \'during:%s\\n\' "$$"',
              ': > "$EMITTED"',
              'IFS= read -r line',
              'printf \'after:%s:%s\\n\' "$$" "$line"',
              'exit 7',
            ].join('; '),
          ),
          { env: { GATE: gate, EMITTED: emitted }, pipeStdin: true },
        ),
      );

      // Events before the disconnect: contiguous seqs from 1 until the ready line is complete.
      let output = '';
      let lastSeq = 0;
      while (!output.endsWith('\n')) {
        const n = await client.nextNotification<{ processId: string; seq: number; chunk: string }>(
          (x) => x.params.processId === 'proc-recover',
        );
        expect(n.method).toBe('process/output');
        expect(n.params.seq).toBe(lastSeq + 1);
        lastSeq = n.params.seq;
        output += decodeB64Text(n.params.chunk);
      }
      const pid = /^ready:(\d+)\n$/.exec(output)?.[1];
      expect(pid).toBeDefined();

      // Abrupt disconnect, then the process produces output while the session is detached.
      client.terminate();
      await client.closed;
      writeFileSync(gate, '');
      await waitUntil(() => existsSync(emitted), 'the process to emit output while detached');

      // Reconnect and resume; the server may not have noticed the disconnect yet (-32010 is retryable).
      let resumed: TestClient | undefined;
      let resumeResult: { sessionId: string } | undefined;
      await waitUntil(async () => {
        const candidate = await h.connect(peer);
        const response = await candidate.request<{ sessionId: string }>('initialize', {
          clientName: 'tether-conformance',
          resumeSessionId: sessionId,
        });
        if (response.error) {
          expect(response.error.code).toBe(-32010);
          await candidate.close();
          return false;
        }
        resumed = candidate;
        resumeResult = response.result;
        return true;
      }, 'the session to become resumable');
      const next = resumed!;
      try {
        expect(resumeResult?.sessionId).toBe(sessionId);
        next.notify('initialized', {});

        const recovered = await readProcess(next, { processId: 'proc-recover', afterSeq: lastSeq, waitMs: 0 });
        expect(recovered.failure).toBeNull();
        expect(recovered.chunks.map((c) => decodeB64Text(c.chunk)).join('')).toBe(`during:${pid}\n`);
        for (const chunk of recovered.chunks) {
          expect(chunk.seq).toBe(lastSeq + 1);
          lastSeq = chunk.seq;
          output += decodeB64Text(chunk.chunk);
        }

        const write = await next.call<{ status: string }>('process/write', {
          processId: 'proc-recover',
          chunk: b64('hello\n'),
          writeId: 'after-resume-1',
        });
        expect(write.status).toBe('accepted');

        // Notifications now flow to the new connection, continuing the seq sequence.
        const events = await collectEvents(next, 'proc-recover', { afterSeq: lastSeq });
        expect(events.map((e) => e.seq)).toEqual(events.map((_, i) => lastSeq + 1 + i));
        output += eventsOutput(events);
        // Close is last; the exit may precede trailing output (output after exit keeps later seqs).
        expect(events.at(-1)?.kind).toBe('closed');
        expect(events.filter((e) => e.kind === 'exited')).toEqual([
          expect.objectContaining({ kind: 'exited', exitCode: 7 }),
        ]);
        expect(output).toBe(`ready:${pid}\nduring:${pid}\nafter:${pid}:hello\n`);
      } finally {
        await next.close();
      }
    });
  }
});
