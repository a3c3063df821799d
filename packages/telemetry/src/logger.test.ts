import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { createLogger, isPretty } from './logger.js';

function sink() {
  const lines: string[] = [];
  const stream = new Writable({
    write(chunk, _encoding, done) {
      lines.push(String(chunk));
      done();
    },
  });
  return { lines, stream };
}

describe('createLogger', () => {
  it('writes the component on every line, with credentials and environments redacted', () => {
    const { lines, stream } = sink();
    const log = createLogger({ component: 'relay', destination: stream });
    log.child({ streamId: 's1' }).info({ token: 'tok-secret', params: { env: { A: '1' } } }, 'hello');
    const line = JSON.parse(lines[0] as string) as Record<string, unknown>;
    expect(line).toMatchObject({ component: 'relay', streamId: 's1', msg: 'hello', token: '[redacted]' });
    expect(line.params).toEqual({ env: '[redacted]' });
    expect(line).not.toHaveProperty('name');
    expect(lines[0]).not.toContain('tok-secret');
  });

  it('keeps the older name option as pino name and the component', () => {
    const { lines, stream } = sink();
    createLogger({ name: 'executor', destination: stream }).warn('x');
    expect(JSON.parse(lines[0] as string)).toMatchObject({ component: 'executor', name: 'executor', level: 40 });
  });

  it('is pretty only when asked, or on a terminal under auto', () => {
    expect(isPretty('pretty', 99)).toBe(true);
    expect(isPretty('json', 99)).toBe(false);
    // fd 99 is no terminal (not even open).
    expect(isPretty('auto', 99)).toBe(false);
  });
});
