// `node:crypto` in the browser bundle: what the shared client code calls on the paths a page uses (ids and
// random bytes), on WebCrypto. Anything else is absent, so a path that needs it fails loudly where it runs.
const { Buffer } = require('buffer');

module.exports = {
  randomUUID: () => globalThis.crypto.randomUUID(),
  randomBytes: (size) => {
    const bytes = Buffer.alloc(size);
    for (let offset = 0; offset < size; offset += 65536) {
      globalThis.crypto.getRandomValues(bytes.subarray(offset, Math.min(size, offset + 65536)));
    }
    return bytes;
  },
  webcrypto: globalThis.crypto,
};
