import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { publicKeyOf, verifyRecording } from '@tether/recording';
import { afterEach, describe, expect, it } from 'vitest';
import { DEFAULT_RECORDING_OPTIONS, Recordings } from './recordings.js';

const dirs: string[] = [];
const opened: Recordings[] = [];
afterEach(async () => {
  for (const recordings of opened.splice(0)) await recordings.close();
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

function recordingsIn(options: Partial<typeof DEFAULT_RECORDING_OPTIONS> = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'tether-recordings-'));
  dirs.push(dir);
  const recordings = new Recordings({ ...DEFAULT_RECORDING_OPTIONS, ...options, dir: join(dir, 'rec') });
  opened.push(recordings);
  return recordings;
}

const START = { processId: 'p/1', argv: ['sh'], tty: false, size: null, startedBy: 'local', detached: false };

function casts(recordings: Recordings): string[] {
  const dir = recordings.options.dir;
  return readdirSync(dir)
    .filter((name) => name.endsWith('.cast'))
    .sort()
    .map((name) => join(dir, name));
}

describe('Recordings', () => {
  it('makes its directory 0700 and its key once (0600, public half beside), and keeps it', async () => {
    const first = recordingsIn();
    const dir = first.options.dir;
    expect(statSync(dir).mode & 0o777).toBe(0o700);
    expect(statSync(join(dir, 'recording-key.pem')).mode & 0o777).toBe(0o600);
    expect(readFileSync(join(dir, 'recording-key.pub'), 'utf8')).toBe(`${first.publicKey}\n`);
    const again = new Recordings({ ...DEFAULT_RECORDING_OPTIONS, dir });
    opened.push(again);
    expect(again.publicKey).toBe(first.publicKey);
  });

  it('a session past max_file_bytes goes on in parts, each whole and sealed, naming the part before', async () => {
    const recordings = recordingsIn({ maxFileBytes: 2000 });
    const recording = await recordings.begin(START);
    for (let i = 0; i < 20; i++) recording.output('stdout', Buffer.from(`${'x'.repeat(200)}\n`));
    recording.exit(0);
    recording.close();
    await recording.finished();
    const files = casts(recordings);
    expect(files.length).toBeGreaterThan(1);
    expect(files[0]).toMatch(/-p_1\.cast$/);
    const key = publicKeyOf(recordings.publicKey);
    let previous: { file: string; head: string } | undefined;
    let output = '';
    for (const [index, file] of files.entries()) {
      const text = readFileSync(file, 'utf8');
      expect(verifyRecording(text, { key })).toMatchObject({ ok: true });
      const header = JSON.parse(text.split('\n')[0]!);
      expect(header.tether.part).toBe(index + 1);
      if (previous) expect(header.tether.previous.file).toBe(previous.file);
      const lines = text.trimEnd().split('\n');
      const seal = JSON.parse(JSON.parse(lines.at(-1)!)[2]);
      previous = { file: file.split('/').at(-1)!, head: seal.head };
      for (const line of lines.slice(1)) {
        const event = JSON.parse(line);
        if (event[1] === 'o') output += event[2];
      }
    }
    expect(output).toBe(`${'x'.repeat(200)}\n`.repeat(20));
  });

  it('a session older than max_file_age goes on in a new part at its next event, both parts sealed', async () => {
    const recordings = recordingsIn({ maxFileAgeMs: 30 });
    const recording = await recordings.begin(START);
    recording.output('stdout', Buffer.from('early\n'));
    await new Promise((resolve) => setTimeout(resolve, 80));
    recording.output('stdout', Buffer.from('late\n'));
    recording.exit(0);
    recording.close();
    await recording.finished();
    const files = casts(recordings);
    expect(files.length).toBeGreaterThanOrEqual(2);
    const key = publicKeyOf(recordings.publicKey);
    for (const file of files) expect(verifyRecording(readFileSync(file, 'utf8'), { key }).ok).toBe(true);
    expect(readFileSync(files.at(-1)!, 'utf8')).toContain('"tether.exit"');
  });

  it('policy open: what does not fit its queue is dropped and noted as a gap; the rest stays whole', async () => {
    const recordings = recordingsIn({ queueBytes: 1000 });
    const recording = await recordings.begin(START);
    // Synchronously, as a burst of output comes: the write loop has had no turn yet.
    for (let i = 0; i < 10; i++) recording.output('stdout', Buffer.from('y'.repeat(300)));
    // Once the write loop has caught up, the next event finds room: the gap is said before it.
    await new Promise((resolve) => setTimeout(resolve, 100));
    recording.output('stdout', Buffer.from('after'));
    recording.exit(0);
    recording.close();
    await recording.finished();
    const [file] = casts(recordings);
    const text = readFileSync(file!, 'utf8');
    expect(verifyRecording(text, { key: publicKeyOf(recordings.publicKey) }).ok).toBe(true);
    const events = text
      .trimEnd()
      .split('\n')
      .slice(1)
      .map((line) => JSON.parse(line))
      .filter((event) => event[1] !== 'tether.seal');
    const gap = events.find((event) => event[1] === 'tether.gap');
    expect(Number(gap[2])).toBeGreaterThan(0);
    const kept = events.filter((event) => event[1] === 'o').map((event) => event[2]);
    expect(kept.length).toBeLessThan(11);
    expect(kept.at(-1)).toBe('after');
    expect(events.findIndex((event) => event[1] === 'tether.gap')).toBe(events.length - 3);
    expect(events.at(-1)).toEqual([expect.any(Number), 'tether.exit', '0']);
  });

  it('a process whose start was refused leaves no file', async () => {
    const recordings = recordingsIn();
    const recording = await recordings.begin(START);
    recording.close();
    recording.close();
    await recording.finished();
    expect(casts(recordings)).toEqual([]);
  });
});
