/**
 * Node built-in modules loaded on first use, synchronously (process.getBuiltinModule), for library
 * code that needs one only on some paths. A static `import … from "node:crypto"` costs every
 * process that loads the module ~15-20 ms of CPU at start-up (each rank's module loading, before
 * its first step), whether it ever hashes or not; node:worker_threads a few more. The types come
 * from type-only imports, which load nothing.
 */
import type * as NodeCrypto from "node:crypto";
import type * as NodeWorkerThreads from "node:worker_threads";

let crypto: typeof NodeCrypto | undefined;
let workerThreads: typeof NodeWorkerThreads | undefined;

/**
 * node:crypto, loaded the first time it is asked for.
 *
 * @example
 * ```ts
 * nodeCrypto().createHash("sha256").update("abc").digest("hex"); // "ba7816bf…"
 * ```
 */
export function nodeCrypto(): typeof NodeCrypto {
  crypto ??= globalThis.process.getBuiltinModule("node:crypto");
  return crypto!;
}

/** node:worker_threads, loaded the first time it is asked for (a worker is started). */
export function nodeWorkerThreads(): typeof NodeWorkerThreads {
  workerThreads ??= globalThis.process.getBuiltinModule("node:worker_threads");
  return workerThreads!;
}

/** Whether this process has asked for `name` through this module yet (for tests of when it loads). */
export function nodeBuiltinAskedFor(name: "node:crypto" | "node:worker_threads"): boolean {
  return (name === "node:crypto" ? crypto : workerThreads) !== undefined;
}
