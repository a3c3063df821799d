/**
 * The harness bundle loads at every command's start only what every command needs: the relay's frame codec
 * (relay-frames' RelayMessageFrame reader), the Noise handshake and the WebSocket client sit in chunks loaded when a command dials, so a
 * command served by a connection master (and `--help`, `config`, `completion`) never compiles them. The
 * test follows the static imports from dist/main.js (import() is lazy) and looks for each piece's marker.
 */
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { repoRoot } from '@tether/test-kit';
import { describe, expect, it } from 'vitest';

const dist = join(repoRoot(), 'apps', 'harness', 'dist');

/** `starts` and every chunk they reach through static imports, each with its text. */
function staticClosure(...starts: string[]): Map<string, string> {
  const files = new Map<string, string>();
  const visit = (file: string) => {
    if (files.has(file)) return;
    const text = readFileSync(file, 'utf8');
    files.set(file, text);
    // esbuild writes static imports of chunks as `from "./chunks/…"` / `from "./chunk-…"`; import() as import("…").
    for (const match of text.matchAll(/(?:^|[\s;])(?:import|export)\s[^"'()]*?from\s*"(\.[^"]+)"/g)) {
      visit(join(dirname(file), match[1] as string));
    }
    for (const match of text.matchAll(/^import\s*"(\.[^"]+)";/gm)) visit(join(dirname(file), match[1] as string));
  };
  for (const start of starts) visit(start);
  return files;
}

/**
 * The files loaded at every command's start: main.js, the CLI chunk it imports at once (after turning on
 * Node's compile cache), and every chunk those reach through static imports.
 */
function eagerFiles(): Map<string, string> {
  const cli = /await import\("(\.\/chunks\/cli-[^"]+)"\)/.exec(readFileSync(join(dist, 'main.js'), 'utf8'));
  return staticClosure(join(dist, 'main.js'), ...(cli ? [join(dist, cli[1] as string)] : []));
}

describe('the harness bundle', () => {
  const markers = {
    'the relay frame codec': 'function readRelayMessage',
    'the Noise handshake': 'var HandshakeState',
  };

  it('follows static imports and finds the shared chunks (the check can see what it looks for)', () => {
    const files = eagerFiles();
    expect(files.size).toBeGreaterThan(1);
    const all = [...files.values()].join('\n');
    // The dial chunk is loaded with import(): it and the chunks it imports (shared with the other lazy dial
    // chunk, Node's sockets) hold both markers.
    const cli = [...files.keys()].find((file) => /\/chunks\/cli-[^/]+\.js$/.test(file));
    expect(cli).toBeDefined();
    const lazy = /import\("(\.\/dial-[^"]+)"\)/.exec(files.get(cli as string) as string);
    expect(lazy).not.toBeNull();
    const dial = [...staticClosure(join(dist, 'chunks', lazy?.[1] as string)).values()].join('\n');
    for (const marker of Object.values(markers)) expect(dial).toContain(marker);
    // protobuf-es's reflection runtime (its descriptor registry boots when loaded) is in neither: the frame
    // codec reads and writes the message with the wire reader and writer alone (relay-frames message.ts).
    expect(`${all}\n${dial}`).not.toContain('bootFieldDescriptorProto');
    expect(all).toContain('CommanderError'); // commander, which every command needs, is loaded at once
  });

  it.each(Object.entries(markers))('does not load %s at start', (_name, marker) => {
    const eager = [...eagerFiles()].filter(([, text]) => text.includes(marker)).map(([file]) => file);
    expect(eager).toEqual([]);
  });
});
