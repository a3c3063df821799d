import { PassThrough } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { openTerminal, terminalAsker } from './network-ask.js';

function streams() {
  const input = new PassThrough();
  const output = new PassThrough();
  const said: string[] = [];
  output.on('data', (chunk: Buffer) => said.push(chunk.toString()));
  return { input, output, said };
}

const question = (host: string, port = 80) => ({ host, port, protocol: 'http' as const });

describe('terminalAsker', () => {
  it('asks one question at a time and answers as the person typed: y/yes allows, anything else refuses', async () => {
    const io = streams();
    const asker = terminalAsker(io);
    const first = asker.ask(question('a.example'));
    const second = asker.ask(question('b.example', 443));
    const third = asker.ask(question('c.example'));
    await new Promise((resolve) => setImmediate(resolve));
    // The second question waits for the first's answer.
    expect(io.said.join('')).toBe('harness: network: let the command reach a.example:80 (http)? [y/N] ');
    io.input.write('yes\n');
    expect(await first).toBe('allow');
    io.input.write('\n');
    expect(await second).toEqual({ deny: 'denied_by_user' });
    io.input.write('Y\n');
    expect(await third).toBe('allow');
    expect(io.said.join('')).toContain('b.example:443 (http)? [y/N] ');
    asker.close();
  });

  it('remembers an answer for its host and port for the rest of the command', async () => {
    const io = streams();
    const asker = terminalAsker(io);
    const first = asker.ask(question('a.example'));
    io.input.write('n\n');
    expect(await first).toEqual({ deny: 'denied_by_user' });
    expect(await asker.ask(question('A.example'))).toEqual({ deny: 'denied_by_user' });
    expect(io.said.filter((s) => s.includes('a.example'))).toHaveLength(1);
    asker.close();
  });

  it('prints no control characters from the executor, and refuses what is open or asked once closed', async () => {
    const io = streams();
    const asker = terminalAsker(io);
    const open = asker.ask(question('evil\u001b]0;x\u0007.example'));
    await new Promise((resolve) => setImmediate(resolve));
    expect(io.said.join('')).not.toMatch(/[\u0000-\u001f]/);
    asker.close();
    expect(await open).toEqual({ deny: 'denied_by_user' });
    expect(await asker.ask(question('later.example'))).toBe('deny');
  });

  it('no terminal to ask on is a usage error naming it', () => {
    expect(() => openTerminal('/nonexistent/tty')).toThrow(
      '--network-ask asks on the terminal, and there is none (/nonexistent/tty: ENOENT)',
    );
  });
});
