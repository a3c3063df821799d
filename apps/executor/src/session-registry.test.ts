import type { OutboundAnswer } from '@tether/jsonrpc';
import type { ProcessEvent } from '@tether/local-process';
import { afterEach, describe, expect, it } from 'vitest';
import { silentLogger } from './logger.js';
import { type SessionAttachment, SessionRegistry } from './session-registry.js';

class SlowAttachment implements SessionAttachment {
  readonly events: ProcessEvent[] = [];
  writable = false;
  takenAway = false;
  notify(): void {}
  ask(): Promise<OutboundAnswer> {
    return Promise.resolve({ kind: 'none', reason: 'not connected' });
  }
  deliver(event: ProcessEvent): boolean {
    this.events.push(event);
    return this.writable;
  }
  detached(): void {
    this.takenAway = true;
  }
  outputBytes(): number {
    return this.events.reduce((sum, e) => sum + (e.kind === 'output' ? e.chunk.length : 0), 0);
  }
}

const registries: SessionRegistry[] = [];
afterEach(async () => {
  await Promise.all(registries.splice(0).map((r) => r.shutdown()));
});

function registry(detachedTtlMs = 30_000) {
  const r = new SessionRegistry({ detachedTtlMs, maxSessions: 2, logger: silentLogger(), tableOptions: {} });
  registries.push(r);
  return r;
}

const settle = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('Session backpressure', () => {
  it('holds the children back while the connection is over its high-water mark, and loses nothing', async () => {
    const attachment = new SlowAttachment();
    const session = registry().create(attachment);
    const total = 32 * 1024 * 1024;
    await session.table.start({
      processId: 'flood',
      argv: ['head', '-c', String(total), '/dev/zero'],
      cwd: '/',
      env: { PATH: '/usr/bin:/bin' },
      tty: false,
      pipeStdin: false,
    });
    // The first delivery reported "not writable": the child is paused with its pipe full.
    await expect.poll(() => attachment.events.length, { timeout: 5000 }).toBeGreaterThan(0);
    await settle(200);
    const whilePaused = attachment.outputBytes();
    await settle(300);
    expect(attachment.outputBytes()).toBe(whilePaused);
    expect(whilePaused).toBeLessThan(total);
    expect(attachment.events.some((e) => e.kind === 'closed')).toBe(false);

    attachment.writable = true;
    session.drained(attachment);
    await expect.poll(() => attachment.events.some((e) => e.kind === 'closed'), { timeout: 20_000 }).toBe(true);
    expect(attachment.outputBytes()).toBe(total);
  });
});

describe('SessionRegistry', () => {
  it('refuses sessions beyond its limit and after shutdown, and tells attachments on shutdown', async () => {
    const r = registry();
    const a = new SlowAttachment();
    r.create(a);
    r.create(new SlowAttachment());
    expect(() => r.create(new SlowAttachment())).toThrow('too many sessions: limit is 2');
    await r.shutdown();
    expect(a.takenAway).toBe(true);
    expect(r.size).toBe(0);
    expect(() => r.create(new SlowAttachment())).toThrow('exec-server is shutting down');
  });

  it('resumes a detached session within the TTL and forgets it after', async () => {
    const r = registry(100);
    const first = new SlowAttachment();
    const session = r.create(first);
    r.detach(session, first);
    const second = new SlowAttachment();
    expect(r.resume(session.id, second)).toBe(session);
    expect(() => r.resume(session.id, new SlowAttachment())).toThrow(/already attached/);
    r.detach(session, second);
    await expect.poll(() => r.size, { timeout: 5000 }).toBe(0);
    expect(() => r.resume(session.id, new SlowAttachment())).toThrow(`unknown session id ${session.id}`);
  });
});
