/**
 * The `fs/*` answers of a lying executor, for tests of the harness side only: it serves a made-up tree whose
 * listings may name entries outside the destination (`../../x`, `a/b`, `..`, ``, a NUL) or links, and with
 * `deep` a tree that never ends. The real executor never lists such names.
 */

/** Directory path → its entries; an entry with `file` is a file holding that text, else a directory. */
export type HostileTree = Record<string, Array<{ name: string; file?: string; link?: string }>>;

/** The answer to one JSON-RPC call, or null for a method it does not serve. */
export type HostileAnswer = (method: string, params: Record<string, unknown>) => unknown;

/**
 * Answers `initialize` and `fs/getMetadata|readDirectory|open|readBlock|close` for `tree()` (read at each call,
 * so a test may swap the tree); with `deep` every directory holds another one, `d`. Open handles are this
 * answerer's own: make one per connection.
 */
export function hostileFsAnswers(tree: () => HostileTree, options: { deep?: boolean } = {}): HostileAnswer {
  const deep = options.deep === true;
  const pathOf = (uri: unknown) => decodeURIComponent(new URL(String(uri)).pathname);
  const lookup = (path: string) => {
    const slash = path.lastIndexOf('/');
    return tree()[path.slice(0, slash) || '/']?.find((entry) => entry.name === path.slice(slash + 1));
  };
  const handles = new Map<string, Buffer>();
  return (method, params) => {
    switch (method) {
      case 'initialize':
        return {
          sessionId: 'hostile-session',
          environmentInfo: { shell: { name: 'sh', path: '/bin/sh' }, capabilities: {} },
        };
      case 'fs/getMetadata': {
        const path = pathOf(params.path);
        const file = lookup(path)?.file;
        return {
          isDirectory: deep || path in tree(),
          isFile: file !== undefined,
          isSymlink: lookup(path)?.link !== undefined,
          size: file === undefined ? 0 : Buffer.byteLength(file),
          createdAtMs: 0,
          modifiedAtMs: 0,
        };
      }
      case 'fs/readDirectory':
        if (deep) return { entries: [{ fileName: 'd', isDirectory: true, isFile: false }] };
        return {
          entries: (tree()[pathOf(params.path)] ?? []).map((entry) => ({
            fileName: entry.name,
            isDirectory: entry.file === undefined,
            isFile: entry.file !== undefined,
          })),
        };
      case 'fs/open':
        handles.set(String(params.handleId), Buffer.from(lookup(pathOf(params.path))?.file ?? ''));
        return { handleId: params.handleId };
      case 'fs/readBlock': {
        const data = handles.get(String(params.handleId)) ?? Buffer.alloc(0);
        const offset = params.offset as number;
        const len = params.len as number;
        return { chunk: data.subarray(offset, offset + len).toString('base64'), eof: offset + len >= data.length };
      }
      case 'fs/close':
        return {};
      default:
        return null;
    }
  };
}
