/**
 * The run's secret store token: generated per run on a single node, or shared
 * between nodes through --rdzv-token / --rdzv-token-file. A token file must
 * belong to the current user and be unreadable by anyone else, like an ssh key.
 * A token refused is a refused command line (UsageError: exit status 2).
 */
import { UsageError } from "./options.ts";

/** Shortest token accepted from the user. */
export const MIN_TOKEN_LENGTH = 16;

/** A fresh random token: 32 bytes as hex. */
export function generateToken(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(32));
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

function checkToken(token: string, where: string): string {
  if (token.length < MIN_TOKEN_LENGTH) {
    throw new UsageError(
      `The store token from ${where} has ${token.length} characters, at least ${MIN_TOKEN_LENGTH} are needed`,
    );
  }
  if (/\s/.test(token)) throw new UsageError(`The store token from ${where} contains whitespace`);
  return token;
}

/**
 * Reads a token file, refusing one that group or others may read or write,
 * or that another user owns.
 */
export function readTokenFile(path: string): string {
  let info: Deno.FileInfo;
  try {
    info = Deno.statSync(path);
  } catch (e) {
    throw new UsageError(`Cannot read the rendezvous token file ${path}: ${(e as Error).message}`);
  }
  if (!info.isFile) throw new UsageError(`The rendezvous token file ${path} is not a regular file`);
  const mode = (info.mode ?? 0) & 0o777;
  if ((mode & 0o077) !== 0) {
    throw new UsageError(
      `Refusing the rendezvous token file ${path}: its mode is ${
        mode.toString(8).padStart(4, "0")
      }, ` +
        `so other users can read it; run \`chmod 600 ${path}\``,
    );
  }
  const uid = Deno.uid();
  if (uid !== null && info.uid !== null && info.uid !== uid) {
    throw new UsageError(
      `Refusing the rendezvous token file ${path}: it belongs to uid ${info.uid}, not to you (uid ${uid})`,
    );
  }
  return checkToken(Deno.readTextFileSync(path).trim(), path);
}

/** The token for this launch: from the options, or generated for a single node. */
export function resolveToken(
  opts: { rdzvToken: string | null; rdzvTokenFile: string | null },
): string {
  if (opts.rdzvTokenFile !== null) return readTokenFile(opts.rdzvTokenFile);
  if (opts.rdzvToken !== null) return checkToken(opts.rdzvToken, "--rdzv-token");
  return generateToken();
}
