import { generateKeyPairSync } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { publicKeyOf, publicKeyText } from './chain.js';
import { playRecording } from './play.js';
import { verifyRecording } from './verify.js';
import { CastWriter } from './writer.js';

const { privateKey, publicKey } = generateKeyPairSync('ed25519');

/** A session with output, a cut UTF-8 character, input from two senders, a resize and the exit. */
function session(clock = { ms: 1_000 }): string {
  const writer = new CastWriter(
    { version: 2, width: 80, height: 24, timestamp: 1, command: 'bash', tether: { key: publicKeyText(publicKey) } },
    privateKey,
    () => clock.ms,
  );
  const lines: Buffer[] = [Buffer.from(`${writer.headerLine}\n`)];
  lines.push(writer.output('pty', Buffer.from('$ ')));
  clock.ms += 500;
  lines.push(writer.input(Buffer.from('echo hé\r'), 'key:harness:k1'));
  const bytes = Buffer.from('hé\r\n');
  lines.push(writer.output('pty', bytes.subarray(0, 2)));
  lines.push(writer.output('pty', bytes.subarray(2)));
  lines.push(writer.seal());
  clock.ms += 250;
  lines.push(writer.resize(100, 30));
  lines.push(writer.input(Buffer.from('x'), 'browser:s1'));
  lines.push(writer.input(Buffer.from('y'), 'browser:s1'));
  lines.push(writer.exit(0));
  lines.push(writer.seal());
  return Buffer.concat(lines).toString();
}

describe('a recording', () => {
  it('is asciicast v2 a player reads: header, then [seconds, type, data] events, characters whole', () => {
    const lines = session().trimEnd().split('\n');
    expect(JSON.parse(lines[0]!)).toMatchObject({ version: 2, width: 80, height: 24 });
    const events = lines.slice(1).map((line) => JSON.parse(line));
    for (const event of events) expect(event).toHaveLength(3);
    expect(events.filter((e) => e[1] !== 'tether.seal')).toEqual([
      [0, 'o', '$ '],
      [0.5, 'tether.from', 'key:harness:k1'],
      [0.5, 'i', 'echo hé\r'],
      [0.5, 'o', 'h'],
      [0.5, 'o', 'é\r\n'],
      [0.75, 'r', '100x30'],
      [0.75, 'tether.from', 'browser:s1'],
      [0.75, 'i', 'x'],
      [0.75, 'i', 'y'],
      [0.75, 'tether.exit', '0'],
    ]);
  });

  it('verifies intact, with the trusted key or (saying so) the file’s own', () => {
    const text = session();
    expect(verifyRecording(text, { key: publicKey })).toEqual({
      ok: true,
      events: 10,
      seals: 2,
      key: publicKeyText(publicKey),
      trusted: true,
    });
    expect(verifyRecording(text)).toMatchObject({ ok: true, trusted: false });
  });

  it('fails at the first event whose bytes changed, for a change of any one byte of any event', () => {
    const text = session();
    const lines = text.split('\n');
    const eventLines = lines
      .map((line, index) => ({ line, index }))
      .filter(({ line, index }) => index > 0 && line !== '' && !line.includes('tether.seal'));
    let event = 0;
    for (const { line, index } of eventLines) {
      event++;
      for (let at = 0; at < line.length; at++) {
        const changed = [...lines];
        const code = line.charCodeAt(at);
        changed[index] = line.slice(0, at) + String.fromCharCode(code === 0x31 ? 0x32 : 0x31) + line.slice(at + 1);
        if (changed[index] === line) continue;
        const report = verifyRecording(changed.join('\n'), { key: publicKey });
        expect(report.ok).toBe(false);
        expect(report.problem).toMatchObject({ line: index + 1, event });
      }
    }
  });

  it('fails on a seal that was changed, removed events, added lines, another key, a cut end', () => {
    const text = session();
    const lines = text.trimEnd().split('\n');
    const sealAt = lines.findIndex((line) => line.includes('tether.seal'));
    const other = generateKeyPairSync('ed25519');
    const seal = JSON.parse(JSON.parse(lines[sealAt]!)[2]);
    const forged = [...lines];
    forged[sealAt] = JSON.stringify([
      0.5,
      'tether.seal',
      JSON.stringify({ ...seal, sig: Buffer.alloc(64).toString('base64') }),
    ]);
    expect(verifyRecording(forged.join('\n'), { key: publicKey }).problem).toEqual({
      line: sealAt + 1,
      reason: 'the seal is not signed by the recording key',
    });
    const removed = lines.filter((_, index) => index !== 2);
    expect(verifyRecording(removed.join('\n'), { key: publicKey }).problem).toMatchObject({ line: 3, event: 2 });
    const added = [...lines, '[9,"o","appended"]'];
    expect(verifyRecording(added.join('\n'), { key: publicKey }).problem).toMatchObject({
      event: 11,
      reason: 'events 11–11 follow the last seal (the recording did not end cleanly, or lines were added)',
    });
    expect(verifyRecording(text, { key: other.publicKey }).problem?.reason).toMatch(
      /^the header names key ed25519:.*, not the trusted ed25519:/,
    );
    expect(verifyRecording('', { key: publicKey }).problem).toEqual({ line: 1, reason: 'the file is empty' });
    expect(verifyRecording('{"version":1}\n').problem?.reason).toBe('the header is not an asciicast v2 header');
  });

  it('a key prints and reads back as ed25519:BASE64; anything else is refused', () => {
    const text = publicKeyText(publicKey);
    expect(text).toMatch(/^ed25519:[A-Za-z0-9+/]{43}=$/);
    expect(publicKeyText(publicKeyOf(text))).toBe(text);
    expect(() => publicKeyOf('ed25519:abc')).toThrow(/^not a recording key/);
  });

  it('plays its output with its timing, at a speed, waits capped', async () => {
    const written: string[] = [];
    const waits: number[] = [];
    const result = await playRecording(session(), {
      speed: 2,
      write: (text) => {
        written.push(text);
      },
      sleep: async (ms) => {
        waits.push(ms);
      },
    });
    expect(written.join('')).toBe('$ hé\r\n');
    expect(waits).toEqual([250]);
    expect(result).toEqual({ events: 3, exitCode: 0 });
    await expect(playRecording('{"version":1}', { write: () => undefined })).rejects.toThrow(/not an asciicast v2/);
  });
});
