/**
 * dtrain's cache folder, shared by the single file's extraction, the type
 * check's records and parsed datasets: DTRAIN_CACHE, else
 * $XDG_CACHE_HOME/dtrain, else $HOME/.cache/dtrain (as single_file/header.sh).
 */
import { join } from "node:path";

type Lookup = (name: string) => string | undefined;

/**
 * The cache folder for the environment `env` (it may not exist yet).
 *
 * @example
 * ```ts
 * cacheFolder((n) => ({ HOME: "/home/me" })[n]); // "/home/me/.cache/dtrain"
 * ```
 */
export function cacheFolder(env: Lookup = (n) => Deno.env.get(n)): string {
  const explicit = env("DTRAIN_CACHE");
  if (explicit) return explicit;
  const xdg = env("XDG_CACHE_HOME");
  if (xdg) return join(xdg, "dtrain");
  const home = env("HOME");
  if (home) return join(home, ".cache", "dtrain");
  throw new Error(
    "cannot choose dtrain's cache folder: HOME is not set. Set DTRAIN_CACHE to a writable folder",
  );
}
