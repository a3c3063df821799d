import type { OutboundAnswer } from '@tether/jsonrpc';
import type { ProcessEvent } from '@tether/local-process';
import { afterEach, describe, expect, it } from 'vitest';
import { silentLogger } from './logger.js';
import { keyPrincipal, LOCAL_PRINCIPAL, UNATTRIBUTED_PRINCIPAL } from './principal.js';
import { type Session, type SessionAttachment, SessionRegistry } from './session-registry.js';

class Attachment implements SessionAttachment {
  readonly events: ProcessEvent[] = [];
  writable = true;
  notify(): void {}
  ask(): Promise<OutboundAnswer> {
    return Promise.resolve({ kind: 'none', reason: 'not connected' });
  }
  deliver(event: ProcessEvent): boolean {
    this.events.push(event);
    return this.writable;
  }
  detached(): void {}
  output(): string {
    return this.events.map((e) => (e.kind === 'output' ? e.chunk.toString() : '')).join('');
  }
}

const registries: SessionRegistry[] = [];
afterEach(async () => {
  await Promise.all(registries.splice(0).map((r) => r.shutdown()));
});

function registry(
  options: { detachedTtlMs?: number; maxDetachedProcesses?: number; detachedExitedRetentionMs?: number } = {},
) {
  const r = new SessionRegistry({
    detachedTtlMs: options.detachedTtlMs ?? 30_000,
    ...(options.detachedExitedRetentionMs === undefined
      ? {}
      : { detachedExitedRetentionMs: options.detachedExitedRetentionMs }),
    maxSessions: 8,
    logger: silentLogger(),
    tableOptions: {},
    ...(options.maxDetachedProcesses === undefined ? {} : { maxDetachedProcesses: options.maxDetachedProcesses }),
  });
  registries.push(r);
  return r;
}

const start = (processId: string, script: string) => ({
  processId,
  argv: ['/bin/sh', '-c', script],
  cwd: '/',
  env: { PATH: '/usr/bin:/bin' },
  tty: false,
  pipeStdin: false,
});

/** All the output `processId` has had so far, as `session` reads it attached. */
async function outputOf(session: Session, processId: string): Promise<string> {
  const read = await session.tableFor(processId, 'attach').read(processId, { afterSeq: 0 });
  return read.chunks.map((c) => c.chunk.toString()).join('');
}

describe('detached processes', () => {
  it('takes each session’s writes under its own write ids: the same writeId from two sessions is two writes', async () => {
    const r = registry();
    const first = r.create(new Attachment());
    const second = r.create(new Attachment());
    await first.startDetached({ ...start('typed', 'head -c 6; echo'), pipeStdin: true });
    expect(await first.writeProcess('typed', Buffer.from('one'), 'w-1')).toBe('accepted');
    expect(await first.writeProcess('typed', Buffer.from('one'), 'w-1')).toBe('accepted'); // a retry: once
    expect(await second.writeProcess('typed', Buffer.from('two'), 'w-1')).toBe('accepted');
    const table = first.tableFor('typed', 'attach');
    await expect.poll(async () => (await table.read('typed')).closed, { timeout: 5000 }).toBe(true);
    const { chunks } = await table.read('typed');
    expect(chunks.map((chunk) => chunk.chunk.toString()).join('')).toBe('onetwo\n');
  });

  it('outlive the session that started them, which expired, and another session reads them to the end', async () => {
    const r = registry({ detachedTtlMs: 20 });
    const a = new Attachment();
    const first = r.create(a);
    await first.startDetached({ ...start('job-1', 'read line; echo "got $line"; exit 7'), pipeStdin: true });
    await first.startDetached({ ...start('job-2', 'cat'), pipeStdin: true });
    r.detach(first, a);
    await expect.poll(() => r.size, { timeout: 5000 }).toBe(0);

    const second = r.create(new Attachment());
    const listed = second.listProcesses();
    expect(listed.map((p) => [p.processId, p.state, p.detached])).toEqual([
      ['job-1', 'running', true],
      ['job-2', 'running', true],
    ]);
    expect(listed[0]?.pid).toBeGreaterThan(0);
    expect(await second.tableFor('job-1', 'control').write('job-1', Buffer.from('x\n'), 'w1')).toBe('accepted');
    const read = await second.tableFor('job-1', 'attach').read('job-1', { afterSeq: 0, waitMs: 5000 });
    expect(read.chunks.map((c) => c.chunk.toString()).join('')).toBe('got x\n');
    await expect
      .poll(() =>
        second
          .tableFor('job-1', 'attach')
          .read('job-1', { afterSeq: 0 })
          .then((x) => x.closed),
      )
      .toBe(true);
    expect((await second.tableFor('job-1', 'attach').read('job-1', { afterSeq: 0 })).exitCode).toBe(7);

    expect(await second.tableFor('job-2', 'control').write('job-2', Buffer.from('hello\n'), 'w1')).toBe('accepted');
    await expect.poll(() => outputOf(second, 'job-2')).toBe('hello\n');
    expect(second.terminateProcess('job-2')).toEqual({ running: true });
  });

  it('pushes notifications to every session that attached, and a congested one drops them until it drains', async () => {
    const r = registry();
    const starter = r.create(new Attachment());
    await starter.startDetached({ ...start('echoer', 'cat'), pipeStdin: true });
    const a = new Attachment();
    const b = new Attachment();
    const sa = r.create(a);
    const sb = r.create(b);
    expect(sa.attachDetached('echoer')).toMatchObject({ processId: 'echoer', state: 'running', detached: true });
    sb.attachDetached('echoer');
    sb.attachDetached('echoer'); // idempotent
    b.writable = false;
    await sa.tableFor('echoer', 'control').write('echoer', Buffer.from('one\n'), 'w1');
    await expect.poll(() => a.output()).toBe('one\n');
    await expect.poll(() => b.output()).toBe('one\n');
    // b said it was congested: nothing more for it until it drains.
    await sa.tableFor('echoer', 'control').write('echoer', Buffer.from('two\n'), 'w2');
    await expect.poll(() => a.output()).toBe('one\ntwo\n');
    expect(b.output()).toBe('one\n');
    b.writable = true;
    sb.drained(b);
    expect(sa.tableFor('echoer', 'control').closeStdin('echoer')).toBe('accepted');
    await expect.poll(() => b.events.some((e) => e.kind === 'closed')).toBe(true);
    expect(a.events.map((e) => e.kind)).toEqual(['output', 'output', 'exited', 'closed']);
    // The starter never attached: it got nothing.
    expect((starter as unknown as { stateValue: { attachment: Attachment } }).stateValue.attachment.events).toEqual([]);
  });

  it('refuses an id used anywhere on the executor, a bad id, and a start beyond the limit', async () => {
    const r = registry({ maxDetachedProcesses: 2 });
    const one = r.create(new Attachment());
    const two = r.create(new Attachment());
    await one.table.start(start('mine', 'sleep 30'));
    await expect(two.startDetached(start('mine', 'true'))).rejects.toMatchObject({
      code: 'already_exists',
      message: 'process mine already exists',
    });
    await two.startDetached(start('d1', 'sleep 30'));
    await expect(one.startProcess(start('d1', 'true'))).rejects.toMatchObject({
      code: 'already_exists',
      message: 'process d1 already exists (a detached process)',
    });
    await expect(two.startDetached(start('d1', 'true'))).rejects.toMatchObject({ code: 'already_exists' });
    await expect(two.startDetached(start('bad id', 'true'))).rejects.toMatchObject({ code: 'invalid_argument' });
    await expect(two.startDetached(start('', 'true'))).rejects.toMatchObject({ code: 'invalid_argument' });
    await two.startDetached(start('d2', 'sleep 30'));
    await expect(two.startDetached(start('d3', 'true'))).rejects.toMatchObject({
      code: 'too_many_processes',
      message: expect.stringContaining('too many detached processes: the limit is 2'),
    });
    expect(() => one.attachDetached('nope')).toThrow('unknown process id nope');
    expect(() => one.attachDetached('mine')).toThrow('belongs to this session');
  });

  it('are killed at shutdown, and shutdown waits for them', async () => {
    const r = registry();
    const session = r.create(new Attachment());
    const started = await session.startDetached(start('long', 'sleep 60'));
    await r.shutdown();
    expect(() => process.kill(started.pid, 0)).toThrow();
    const [entry] = r.detached.list(LOCAL_PRINCIPAL);
    expect(entry?.state).toBe('closed');
  });
});

describe('detached processes belong to the principal that started them', () => {
  const alice = keyPrincipal('key_alice', 'harness');
  const bob = keyPrincipal('key_bob', 'harness');
  const admin = keyPrincipal('key_admin', 'admin');

  it('another key neither lists, attaches to, reads, writes, resizes, signals nor terminates it: each is an unknown id', async () => {
    const r = registry();
    const a = r.create(new Attachment(), alice);
    await a.startDetached({ ...start('secret', 'echo token=s3cr3t; cat'), pipeStdin: true });
    await a.startDetached({ ...start('secret-tty', 'cat'), tty: true });
    const b = r.create(new Attachment(), bob);
    expect(b.listProcesses()).toEqual([]);
    // What an id nobody has answers, and what the other key's id answers: the same, word for word.
    for (const id of ['secret', 'nope']) {
      const unknown = `unknown process id ${id}`;
      expect(() => b.attachDetached(id)).toThrow(unknown);
      await expect(b.tableFor(id, 'attach').read(id, { afterSeq: 0 })).rejects.toThrow(unknown);
      expect(await b.writeProcess(id, Buffer.from('x\n'), 'w1')).toBe('unknownProcess');
      expect(b.tableFor(id, 'control').closeStdin(id)).toBe('unknownProcess');
      expect(b.terminateProcess(id)).toEqual({ running: false });
      expect(() => b.tableFor(id, 'control').signal(id, 'kill')).not.toThrow();
    }
    expect(() => b.tableFor('secret-tty', 'control').resize('secret-tty', 10, 10)).toThrow(
      'unknown process id secret-tty',
    );
    expect(() => b.tableFor('nope', 'control').resize('nope', 10, 10)).toThrow('unknown process id nope');
    // Nothing reached it: still running, its stdin open, and its output only what it wrote.
    const own = r.create(new Attachment(), alice);
    expect(own.listProcesses().map((p) => [p.processId, p.state])).toEqual([
      ['secret', 'running'],
      ['secret-tty', 'running'],
    ]);
    expect(await own.writeProcess('secret', Buffer.from('mine\n'), 'w1')).toBe('accepted');
    await expect.poll(() => outputOf(own, 'secret')).toBe('token=s3cr3t\nmine\n');
    // Starting another process under its id says it exists, not that it is detached.
    await expect(b.startProcess(start('secret', 'true'))).rejects.toMatchObject({
      code: 'already_exists',
      message: 'process secret already exists',
    });
    expect(own.terminateProcess('secret')).toEqual({ running: true });
    expect(own.terminateProcess('secret-tty')).toEqual({ running: true });
  });

  it('an admin key lists, attaches to and controls every process; the local principal too; an unattributed harness none', async () => {
    const r = registry();
    const a = r.create(new Attachment(), alice);
    await a.startDetached({ ...start('job', 'cat'), pipeStdin: true });
    const local = r.create(new Attachment());
    await local.startDetached(start('local-job', 'sleep 30'));

    const root = r.create(new Attachment(), admin);
    expect(root.listProcesses().map((p) => p.processId)).toEqual(['job', 'local-job']);
    expect(root.attachDetached('job')).toMatchObject({ processId: 'job', state: 'running' });
    expect(await root.writeProcess('job', Buffer.from('by admin\n'), 'w1')).toBe('accepted');
    await expect
      .poll(async () => (await a.tableFor('job', 'attach').read('job', { afterSeq: 0 })).chunks.length)
      .toBe(1);
    expect(
      r
        .create(new Attachment())
        .listProcesses()
        .map((p) => p.processId),
    ).toEqual(['job', 'local-job']);
    // Neither a harness key nor a harness the registry named no key for sees the local one.
    expect(a.listProcesses().map((p) => p.processId)).toEqual(['job']);
    const anonymous = r.create(new Attachment(), UNATTRIBUTED_PRINCIPAL);
    expect(anonymous.listProcesses()).toEqual([]);
    expect(() => anonymous.attachDetached('local-job')).toThrow('unknown process id local-job');

    expect(root.terminateProcess('job')).toEqual({ running: true });
    expect(root.terminateProcess('local-job')).toEqual({ running: true });
  });

  it('a session is resumed only by the principal it acts for; to another it is an unknown session', () => {
    const r = registry();
    const first = new Attachment();
    const session = r.create(first, alice);
    r.detach(session, first);
    expect(() => r.resume(session.id, new Attachment(), bob)).toThrow(`unknown session id ${session.id}`);
    expect(() => r.resume(session.id, new Attachment())).toThrow(`unknown session id ${session.id}`);
    expect(() => r.resume(session.id, new Attachment(), admin)).toThrow(`unknown session id ${session.id}`);
    expect(r.resume(session.id, new Attachment(), keyPrincipal('key_alice', 'harness'))).toBe(session);
  });

  it('session processes stay the session’s: another session of the same key does not see them', async () => {
    const r = registry();
    const a = r.create(new Attachment(), alice);
    await a.startProcess(start('own', 'sleep 30'));
    const again = r.create(new Attachment(), alice);
    const root = r.create(new Attachment(), admin);
    for (const other of [again, root]) {
      expect(other.listProcesses()).toEqual([]);
      expect(other.terminateProcess('own')).toEqual({ running: false });
    }
    expect(a.terminateProcess('own')).toEqual({ running: true });
  });
});

describe('shared detached processes', () => {
  const alice = keyPrincipal('alice', 'harness');
  const bob = keyPrincipal('bob', 'harness');

  class Watching extends Attachment {
    readonly notices: Array<[string, unknown]> = [];
    override notify(method?: string, params?: unknown): void {
      if (method) this.notices.push([method, params]);
    }
  }

  it('a token lets another key in with its access until it expires; the expiry stops its session at once', async () => {
    const r = registry();
    const owner = r.create(new Attachment(), alice);
    await owner.startDetached({ ...start('shared', 'cat'), pipeStdin: true });
    const share = owner.shareDetached('shared', 'view', 300);
    const watching = new Watching();
    const viewer = r.create(watching, bob);
    expect(() => viewer.attachDetached('shared')).toThrow('unknown process id shared');
    expect(() => viewer.attachDetached('shared', 'tsh_wrong')).toThrow('unknown process id shared');
    expect(viewer.attachDetached('shared', share.token)).toMatchObject({ processId: 'shared', access: 'view' });
    // View: it reads, but cannot write, resize or signal (its table for control is its own, where the id is unknown).
    expect(viewer.tableFor('shared', 'attach')).toBe(owner.tableFor('shared', 'attach'));
    expect(viewer.tableFor('shared', 'control')).not.toBe(owner.tableFor('shared', 'control'));
    // A bob cannot share it on.
    expect(() => viewer.shareDetached('shared', 'control', 1000)).toThrow('unknown process id shared');
    // Told who follows at its attach (only itself: the owner's session follows nothing), then the revocation.
    expect(watching.notices).toEqual([
      [
        'process/participants',
        {
          processId: 'shared',
          participants: [{ who: 'bob', access: 'view', owner: false, sessions: 1, you: true }],
        },
      ],
    ]);
    await expect
      .poll(() => watching.notices.map(([method]) => method), { timeout: 5000 })
      .toEqual(['process/participants', 'process/accessRevoked']);
    expect(watching.notices[1]).toEqual(['process/accessRevoked', { processId: 'shared' }]);
    expect(viewer.tableFor('shared', 'attach')).not.toBe(owner.tableFor('shared', 'attach'));
    expect(() => viewer.attachDetached('shared', share.token)).toThrow('unknown process id shared');
  });

  it('a control share lets the other key write; a new process under the same id shares nothing of the old one', async () => {
    const r = registry({ detachedExitedRetentionMs: 10 });
    const owner = r.create(new Attachment(), alice);
    await owner.startDetached({ ...start('reused', 'cat'), pipeStdin: true });
    const { token } = owner.shareDetached('reused', 'control', 60_000);
    const other = r.create(new Attachment(), bob);
    other.attachDetached('reused', token);
    expect(await other.writeProcess('reused', Buffer.from('from bob\n'), 'w1')).toBe('accepted');
    await expect.poll(() => outputOf(owner, 'reused')).toBe('from bob\n');
    expect(owner.listProcesses().find((p) => p.processId === 'reused')).toMatchObject({
      shares: [{ access: 'control', attached: 1 }],
    });
    // Another key's list shows no shares, even to the one that came in by one.
    expect(other.listProcesses().find((p) => p.processId === 'reused')).not.toHaveProperty('shares');
    // The process ends and is evicted; the owner starts another under its id: the old token's grant is gone.
    owner.terminateProcess('reused');
    await expect.poll(() => owner.listProcesses().some((p) => p.processId === 'reused'), { timeout: 5000 }).toBe(false);
    await owner.startDetached({ ...start('reused', 'cat'), pipeStdin: true });
    expect(await other.writeProcess('reused', Buffer.from('again\n'), 'w2')).toBe('unknownProcess');
    expect(() => other.attachDetached('reused', token)).toThrow('unknown process id reused');
    expect(owner.unshareDetached('reused')).toBe(0);
    owner.terminateProcess('reused');
  });

  it('holds at most 16 live shares of a process; a revoked one makes room', async () => {
    const r = registry();
    const owner = r.create(new Attachment(), alice);
    await owner.startDetached({ ...start('many', 'cat'), pipeStdin: true });
    const shares = Array.from({ length: 16 }, () => owner.shareDetached('many', 'view', 60_000));
    expect(new Set(shares.map((share) => share.shareId)).size).toBe(16);
    expect(() => owner.shareDetached('many', 'view', 60_000)).toThrow(
      'too many shares: at most 16 per process and 1024 in all (revoke some with process/unshare)',
    );
    expect(owner.unshareDetached('many', shares[0]!.shareId)).toBe(1);
    expect(owner.shareDetached('many', 'control', 60_000).token).toMatch(/^tsh_/);
    owner.terminateProcess('many');
  });
  it('every follower is told who follows, each principal once with its access, as principals come and go', async () => {
    const r = registry();
    const ownerWatch = new Watching();
    const owner = r.create(ownerWatch, alice);
    await owner.startDetached({ ...start('watched', 'cat'), pipeStdin: true, tty: true });
    owner.attachDetached('watched');
    const view = owner.shareDetached('watched', 'view', 60_000);
    const control = owner.shareDetached('watched', 'control', 60_000);
    const bobWatch = new Watching();
    const bobSession = r.create(bobWatch, bob);
    bobSession.attachDetached('watched', view.token);
    const last = (w: Watching) => {
      const notice = w.notices.filter(([m]) => m === 'process/participants').at(-1);
      return (notice?.[1] as { participants: unknown[] } | undefined)?.participants;
    };
    expect(last(ownerWatch)).toEqual([
      { who: 'alice', access: 'control', owner: true, sessions: 1, you: true },
      { who: 'bob', access: 'view', owner: false, sessions: 1, you: false },
    ]);
    expect(last(bobWatch)).toEqual([
      { who: 'alice', access: 'control', owner: true, sessions: 1, you: false },
      { who: 'bob', access: 'view', owner: false, sessions: 1, you: true },
    ]);
    // A second session of bob's, and a control token: one entry, two sessions, control for both.
    const bobAgain = r.create(new Watching(), bob);
    bobAgain.attachDetached('watched', control.token);
    expect(last(ownerWatch)).toContainEqual({
      who: 'bob',
      access: 'control',
      owner: false,
      sessions: 2,
      you: false,
    });
    expect(await bobSession.writeProcess('watched', Buffer.from('x'), 'w1')).toBe('accepted');
    // A session gone: the others are told.
    await r.end(bobAgain);
    expect(last(ownerWatch)).toContainEqual({
      who: 'bob',
      access: 'control',
      owner: false,
      sessions: 1,
      you: false,
    });
    // The control share revoked: bob came in by it last (a principal holds one share, the strongest), so bob's
    // session loses the process and the owner is told who is left.
    owner.unshareDetached('watched', control.shareId);
    expect(bobWatch.notices.at(-1)).toEqual(['process/accessRevoked', { processId: 'watched' }]);
    expect(last(ownerWatch)).toEqual([{ who: 'alice', access: 'control', owner: true, sessions: 1, you: true }]);
    owner.unshareDetached('watched');
    expect(owner.terminateProcess('watched')).toEqual({ running: true });
  });

  it('a share link session is a principal of its own: it reaches nothing of its key but what is shared with it', async () => {
    const r = registry();
    const owner = r.create(new Attachment(), alice);
    await owner.startDetached({ ...start('agent', 'cat'), pipeStdin: true });
    await owner.startDetached({ ...start('private', 'cat'), pipeStdin: true });
    // The link of alice's own key, and one behind an admin key: neither reaches anything by ownership or role.
    const link = r.create(new Watching(), keyPrincipal('alice', 'harness', false, 'lnk_1'));
    const adminLink = r.create(new Watching(), keyPrincipal('root', 'admin', false, 'lnk_2'));
    for (const session of [link, adminLink]) {
      expect(session.listProcesses()).toEqual([]);
      expect(() => session.attachDetached('private')).toThrow('unknown process id private');
      expect(session.tableFor('private', 'control')).not.toBe(owner.tableFor('private', 'control'));
    }
    const { token } = owner.shareDetached('agent', 'control', 60_000);
    expect(link.attachDetached('agent', token)).toMatchObject({ access: 'control' });
    expect(link.listProcesses().map((p) => p.processId)).toEqual(['agent']);
    expect(await link.writeProcess('agent', Buffer.from('from the link\n'), 'w1')).toBe('accepted');
    await expect.poll(() => outputOf(owner, 'agent')).toBe('from the link\n');
    // It cannot share on, and alice's own sessions keep what they had.
    expect(() => link.shareDetached('agent', 'view', 1000)).toThrow('unknown process id agent');
    expect(owner.listProcesses().map((p) => p.processId)).toEqual(['agent', 'private']);
    // A view link's session with a control token: view.
    const viewLink = r.create(new Watching(), keyPrincipal('alice', 'harness', true, 'lnk_3'));
    expect(viewLink.attachDetached('agent', token)).toMatchObject({ access: 'view' });
    expect(owner.terminateProcess('agent')).toEqual({ running: true });
    expect(owner.terminateProcess('private')).toEqual({ running: true });
  });

  it('a session process cannot be shared, and says to start it detached', async () => {
    const r = registry();
    const owner = r.create(new Attachment(), alice);
    await owner.startProcess(start('mine', 'sleep 30'));
    expect(() => owner.shareDetached('mine', 'view', 1000)).toThrow(/belongs to this session.*detached: true/);
    expect(owner.terminateProcess('mine')).toEqual({ running: true });
  });
});
