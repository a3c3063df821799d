/**
 * Runs `work` over `items` with at most `parallelism` at once; results in the order of `items`. How the
 * executor and the SDK work through a batch of small files: each costs a few syscalls, which the libuv
 * pool runs side by side.
 */
export async function mapBounded<T, R>(
  items: readonly T[],
  parallelism: number,
  work: (item: T, index: number) => Promise<R>,
): Promise<R[]> {
  const results = new Array<R>(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const index = next++;
      results[index] = await work(items[index] as T, index);
    }
  };
  await Promise.all(Array.from({ length: Math.min(parallelism, items.length) }, worker));
  return results;
}
