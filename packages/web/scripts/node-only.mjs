/**
 * What must never reach the page's bundle: Node's built-ins (`node:*`), `ws` and its native helpers,
 * the proxy agent, native addons and the packages that exist for Node (local processes, outbound proxies,
 * user-space reads). The SDK's packages keep these out of their browser entries (`browser` conditions,
 * `@tether/client/browser`); this esbuild plugin fails a build they reach, naming the importer.
 */
// A bare built-in name (`fs`) esbuild already refuses on the browser platform; `buffer` is the npm package.
const NODE_PACKAGES =
  /^(ws|bufferutil|utf-8-validate|https-proxy-agent|@tether\/(native-[^/]+|local-process|outbound|user-read))(\/|$)/;

/** Whether an import specifier names a Node-only module. */
export function isNodeOnly(specifier) {
  return specifier.startsWith('node:') || NODE_PACKAGES.test(specifier);
}

/** An esbuild plugin whose build fails on every Node-only import (each one an error naming its importer). */
export function nodeOnlyGuard(root) {
  return {
    name: 'node-only-guard',
    setup(build) {
      build.onResolve({ filter: /.*/ }, (args) => {
        if (args.kind === 'entry-point' || !isNodeOnly(args.path)) return undefined;
        const importer = root ? args.importer.replace(`${root}/`, '') : args.importer;
        return {
          errors: [{ text: `${args.path} (from ${importer}) is Node-only: the page must not import it` }],
        };
      });
    },
  };
}
