/**
 * A copy of `view`'s bytes in a new buffer. Not `view.slice()`: on a Node `Buffer` (what sockets, `ws`
 * and the crypto module hand out, and any subarray of one) `slice` is a view of the same memory, so a
 * "copy" made that way changes when the buffer under it is reused.
 */
export function copyBytes(view: Uint8Array, start = 0, end = view.byteLength): Uint8Array {
  return new Uint8Array(view.subarray(start, end)); // a typed array from a typed array is a copy
}
