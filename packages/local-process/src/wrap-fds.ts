/**
 * A wrap's inherited descriptors (`ProcessWrap.inheritFds`): the wrapper's argv names each by a placeholder,
 * replaced at each spawn by the number the child has it at (4, 5, … in a pipe child's stdio array; the
 * executor's own number on a PTY, where node-pty cannot place descriptors). A placeholder holds a NUL, which
 * no real argument can, so nothing else is ever taken for one.
 */
export function inheritedFdArg(index: number): string {
  return `\0inherited-fd-${index}`;
}

/** `args` with each placeholder replaced by the number `at[index]`; one without a descriptor is an error. */
export function placeInheritedFds(args: readonly string[], at: readonly number[]): string[] {
  return args.map((arg) => {
    const found = /^\0inherited-fd-(\d+)$/.exec(arg);
    if (found === null) return arg;
    const fd = at[Number(found[1])];
    if (fd === undefined) throw new Error(`the wrapper names inherited descriptor ${found[1]}, which it was not given`);
    return String(fd);
  });
}
