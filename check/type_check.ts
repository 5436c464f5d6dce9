/**
 * The type check of the user's script that the launcher runs before any rank starts (and
 * `dtrain check` before its stages; it sits here, below the launcher, so both can import it):
 * `deno check` with the config the ranks run with, its errors printed as
 * deno prints them. A script that passed is remembered by the content of
 * every local file of its module graph (the script, its own modules,
 * dtrain's, the config, the npm type files), so the next start with nothing
 * changed skips the check. That next start hashes only the files whose
 * identity changed since (as git's index does: size, modification and
 * status-change times, inode); stat-ing ~200 files costs ~2 ms of CPU where
 * hashing their ~2 MB cost ~20 ms on every launch.
 */
import { fileURLToPath } from "node:url";
import { join, resolve } from "node:path";
import { cacheFolder } from "../os/cache_folder.ts";

/** What checkScriptTypes() found. */
export type TypeCheckResult =
  | { ok: true; cached: boolean }
  | { ok: false; output: string };

/** Options of checkScriptTypes(). */
export interface TypeCheckOptions {
  /** the deno.json the ranks run with */
  config: string;
  /** the deno executable (default: this one) */
  deno?: string;
  /** where passing checks are remembered (default: <dtrain cache>/typecheck) */
  cacheDir?: string;
  /** called when the check really runs (not remembered), before it starts */
  onCheck?: () => void;
}

/** A passing check: the Deno version, and every file of the graph with its sha256. */
interface Record {
  deno: string;
  files: [string, string][];
  /** each file's identity when it was hashed (same order as files); absent: hash every file */
  stats?: (FileIdentity | null)[];
  /** epoch ms just before the files were hashed */
  hashedAt?: number;
}

/** What changes when a file's content does: [size, mtime ms, ctime ms, inode, device]. */
type FileIdentity = [number, number, number, number, number];

function identity(info: Deno.FileInfo): FileIdentity | null {
  if (!info.mtime || !info.ctime || info.ino === null || info.dev === null) return null;
  return [info.size, info.mtime.getTime(), info.ctime.getTime(), info.ino, info.dev];
}

/**
 * A file changed within this long before it was hashed may change again within the same clock tick
 * without its times showing it (git's "racy clean" case): such a file is hashed on every check.
 */
const RACY_MS = 2000;

/** True when a file whose identity is `now` still has the one it had when hashed, not changed just before. */
function unchanged(now: FileIdentity | null, was: unknown, hashedAt: number): boolean {
  if (now === null || !Array.isArray(was) || was.length !== 5) return false;
  if (was[1] >= hashedAt - RACY_MS || was[2] >= hashedAt - RACY_MS) return false;
  return now.every((v, i) => v === was[i]);
}

function identityOf(file: string): FileIdentity | null {
  try {
    return identity(Deno.statSync(file));
  } catch {
    return null;
  }
}

/** Hex sha256 through WebCrypto (node:crypto would add its module loading to every launch). */
async function sha256(bytes: Uint8Array<ArrayBuffer>): Promise<string> {
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", bytes));
  return Array.from(digest, (b) => b.toString(16).padStart(2, "0")).join("");
}

async function recordPath(cacheDir: string, script: string, config: string): Promise<string> {
  const key = await sha256(new TextEncoder().encode(`${resolve(script)}\u0000${resolve(config)}`));
  return join(cacheDir, `${key.slice(0, 24)}.json`);
}

/** True when the record is of this Deno and every file still has its recorded content. */
async function stillValid(path: string): Promise<boolean> {
  let rec: Record;
  try {
    rec = JSON.parse(Deno.readTextFileSync(path));
  } catch {
    return false;
  }
  if (rec?.deno !== Deno.version.deno || !Array.isArray(rec.files) || rec.files.length === 0) {
    return false;
  }
  const hashedAt = typeof rec.hashedAt === "number" ? rec.hashedAt : -Infinity;
  const stats = Array.isArray(rec.stats) && rec.stats.length === rec.files.length ? rec.stats : [];
  // each file's identity before any is read: a change while hashing shows next time
  const startedAt = Date.now();
  const now = rec.files.map(([file]) => identityOf(file));
  let hashed = 0;
  // Files whose identity changed are hashed, every one at once: their digests run in parallel off the
  // main thread.
  const same = await Promise.all(rec.files.map(async ([file, hash], i) => {
    if (unchanged(now[i]!, stats[i], hashedAt)) return true;
    hashed++;
    try {
      return await sha256(await Deno.readFile(file)) === hash;
    } catch {
      return false;
    }
  }));
  if (!same.every(Boolean)) return false;
  // Content unchanged but identities new (a record from before they were kept, a file saved
  // again as it was, or one changed just before the last hashing): remember them, so the next start
  // does not hash those files again.
  if (hashed > 0) {
    try {
      writeRecord(path, { ...rec, stats: now, hashedAt: startedAt });
    } catch { /* not refreshed: hashed again next time */ }
  }
  return true;
}

/** The local files of the script's module graph (deno info), plus the config. */
async function graphFiles(deno: string, script: string, config: string): Promise<string[] | null> {
  const out = await new Deno.Command(deno, {
    args: ["info", "--json", "--config", config, script],
    stdout: "piped",
    stderr: "null",
    env: { NO_COLOR: "1" },
  }).output();
  if (!out.success) return null;
  const info = JSON.parse(new TextDecoder().decode(out.stdout)) as {
    modules?: { specifier?: string; local?: string }[];
  };
  const files = new Set<string>([resolve(config)]);
  for (const m of info.modules ?? []) {
    if (m.specifier?.startsWith("file:")) files.add(fileURLToPath(m.specifier));
    else if (m.local) files.add(m.local);
  }
  return [...files].sort();
}

function writeRecord(path: string, rec: Record): void {
  const tmp = `${path}.tmp-${Deno.pid}-${crypto.randomUUID().slice(0, 8)}`;
  try {
    Deno.writeTextFileSync(tmp, JSON.stringify(rec));
    Deno.renameSync(tmp, path);
  } finally {
    try {
      Deno.removeSync(tmp);
    } catch { /* renamed */ }
  }
}

/**
 * Type-checks `script` as the ranks will run it. A check that passed before
 * on files that have not changed since is not run again.
 *
 * @example
 * ```ts
 * const r = await checkScriptTypes("train.ts", { config: "deno.json" });
 * if (!r.ok) console.error(r.output);
 * ```
 */
export async function checkScriptTypes(
  script: string,
  opts: TypeCheckOptions,
): Promise<TypeCheckResult> {
  const deno = opts.deno ?? Deno.execPath();
  let cacheDir: string | null;
  try {
    cacheDir = opts.cacheDir ?? join(cacheFolder(), "typecheck");
  } catch {
    cacheDir = null; // no HOME and no DTRAIN_CACHE: check every time
  }
  const record = cacheDir ? await recordPath(cacheDir, script, opts.config) : null;
  if (record && await stillValid(record)) return { ok: true, cached: true };
  opts.onCheck?.();
  const out = await new Deno.Command(deno, {
    args: ["check", "--config", opts.config, script],
    stdout: "piped",
    stderr: "piped",
    // deno colours its errors even into a pipe: only when they end up on a terminal.
    env: Deno.stderr.isTerminal() ? {} : { NO_COLOR: "1" },
  }).output();
  if (!out.success) {
    const text = new TextDecoder().decode(out.stderr) + new TextDecoder().decode(out.stdout);
    const shown = text.replace(/\n*Stack backtrace:[\s\S]*$/, "").split("\n")
      // deno-lint-ignore no-control-regex -- deno's own colour codes, stripped to read the line
      .filter((l) => !/^Check /.test(l.replace(/\x1b\[[0-9;]*m/g, "")));
    return { ok: false, output: shown.join("\n").trimEnd() };
  }
  if (record && cacheDir) {
    try {
      const files = await graphFiles(deno, script, opts.config);
      if (files) {
        Deno.mkdirSync(cacheDir, { recursive: true });
        const hashedAt = Date.now();
        // each file's identity before its bytes are read: a change while hashing shows next time
        const stats = files.map(identityOf);
        writeRecord(record, {
          deno: Deno.version.deno,
          files: await Promise.all(
            files.map(async (
              f,
            ): Promise<[string, string]> => [f, await sha256(await Deno.readFile(f))]),
          ),
          stats,
          hashedAt,
        });
      }
    } catch { /* not remembered: checked again next time */ }
  }
  return { ok: true, cached: false };
}
