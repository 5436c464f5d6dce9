/**
 * lazySchema(): a zod schema built on first use. Building dtrain's schemas costs tens of
 * milliseconds of every process start (a rank's module loading included) although most runs
 * parse with few of them or none, so each schema module wraps its top-level schemas in this.
 */

/**
 * A stand-in for the schema `build()` returns, built the first time anything reads it (a
 * property, a method, `instanceof`, composition into another schema). It behaves as the schema
 * itself: zod reads schemas through their properties, which the stand-in forwards.
 *
 * @example
 * ```ts
 * import { z } from "zod";
 * const Port = lazySchema(() => z.int().min(1).max(65535)); // nothing built yet
 * Port.parse(8080); // built here, once
 * ```
 */
export function lazySchema<T extends object>(build: () => T): T {
  let built: T | undefined;
  const real = (): T => built ??= build();
  return new Proxy({} as T, {
    get: (_, key) => Reflect.get(real(), key, real()),
    set: (_, key, value) => Reflect.set(real(), key, value, real()),
    has: (_, key) => Reflect.has(real(), key),
    ownKeys: () => Reflect.ownKeys(real()),
    getOwnPropertyDescriptor: (_, key) => {
      const d = Reflect.getOwnPropertyDescriptor(real(), key);
      // A proxy may report a property only as configurable as its (empty, extensible) target.
      return d && { ...d, configurable: true };
    },
    getPrototypeOf: () => Reflect.getPrototypeOf(real()),
  });
}
