/**
 * Names inside a checkpoint root directory: `step-<8 digits>` checkpoints, the
 * `latest` pointer, `.tmp-*` leftovers of interrupted saves and `.aside-*`
 * copies of a step being replaced; plus reading the pointer and listing.
 */
import { join } from "node:path";
import { type CheckpointIO, describeError } from "./io.ts";

/** The pointer file naming the current checkpoint. */
export const LATEST_FILE = "latest";

const LEFTOVER = /^\.tmp-(step-\d{8,}|latest|deleting-step-\d{8,})-\d+-[0-9a-f]{8}$/;
const ASIDE = /^\.aside-(step-\d{8,})-\d+-[0-9a-f]{8}$/;

/** What the `latest` pointer says. */
export type Pointer =
  | { kind: "missing" }
  | { kind: "bad"; problem: string }
  | { kind: "ok"; name: string; step: number };

/** A checkpoint directory (or an aside copy of one) found in the root. */
export interface Candidate {
  name: string;
  step: number;
  aside: boolean;
}

/**
 * The directory name of a step: `step-` and the step with at least 8 digits.
 * @example stepDirName(42) // "step-00000042"
 */
export function stepDirName(step: number): string {
  return `step-${String(step).padStart(8, "0")}`;
}

/** The step a directory name stands for, or null when it is not a canonical step directory name. */
export function parseStepDirName(name: string): number | null {
  const match = /^step-(\d{8,})$/.exec(name);
  if (match === null) return null;
  const step = Number(match[1]);
  return Number.isSafeInteger(step) && stepDirName(step) === name ? step : null;
}

/** The step of an aside copy's name (`.aside-step-00000042-<pid>-<random>`), or null. */
export function asideStep(name: string): number | null {
  const match = ASIDE.exec(name);
  return match === null ? null : parseStepDirName(match[1]!);
}

/** True for the names only this module's saves create under `.tmp-` (never an unrelated file). */
export function isLeftover(name: string): boolean {
  return LEFTOVER.test(name);
}

/** The pid of the process that made a `.tmp-*` or `.aside-*` name, or null for other names. */
export function writerPid(name: string): number | null {
  const m = /-(\d+)-[0-9a-f]{8}$/.exec(name);
  return m && (LEFTOVER.test(name) || ASIDE.test(name)) ? Number(m[1]) : null;
}

/**
 * Whether the writer of a temporary name may still be saving: another
 * process of this machine with that pid is running (this process's own
 * leftovers are done: a manager runs one save at a time, and at most one manager writes a directory). A reused pid errs on the
 * side of keeping the folder.
 */
export function writerMayBeActive(pid: number): boolean {
  if (pid === Deno.pid) return false;
  try {
    const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
    const state = stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3);
    return state !== "Z" && state !== "X";
  } catch (e) {
    // No /proc entry: the process is gone. Without /proc at all, keep the folder.
    return !(e instanceof Deno.errors.NotFound) || !procMounted();
  }
}

function procMounted(): boolean {
  try {
    Deno.statSync("/proc/self/stat");
    return true;
  } catch {
    return false;
  }
}

/**
 * A fresh temporary name for `what` ("step-00000042", "latest",
 * "deleting-step-00000042"), unique per process and call.
 */
export function tempName(what: string): string {
  return `.tmp-${what}-${uniqueTag()}`;
}

/** A fresh name for the aside copy of `stepDir`. */
export function asideName(stepDir: string): string {
  return `.aside-${stepDir}-${uniqueTag()}`;
}

function uniqueTag(): string {
  const random = [...crypto.getRandomValues(new Uint8Array(4))].map((b) =>
    b.toString(16).padStart(2, "0")
  );
  return `${Deno.pid}-${random.join("")}`;
}

/** Reads `<root>/latest`. */
export function readPointer(io: CheckpointIO, root: string): Pointer {
  let text: string;
  try {
    text = new TextDecoder().decode(io.readFile(join(root, LATEST_FILE)));
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) return { kind: "missing" };
    return { kind: "bad", problem: `cannot be read (${describeError(e)})` };
  }
  const name = text.trim();
  const step = parseStepDirName(name);
  if (step === null) {
    const preview = JSON.stringify(text.length > 40 ? `${text.slice(0, 40)}…` : text);
    return {
      kind: "bad",
      problem:
        `does not name a checkpoint: it holds ${preview}, expected a line like "step-00000042"`,
    };
  }
  return { kind: "ok", name, step };
}

/** The entries of `root`, or none when it does not exist. */
export function readRoot(io: CheckpointIO, root: string): { name: string; isDirectory: boolean }[] {
  try {
    return io.readDir(root);
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) return [];
    throw e;
  }
}

/** Every checkpoint directory and aside copy in `root`, newest step first (a step's own directory before its aside copy). */
export function scanCandidates(io: CheckpointIO, root: string): Candidate[] {
  const found: Candidate[] = [];
  for (const e of readRoot(io, root)) {
    if (!e.isDirectory) continue;
    const step = parseStepDirName(e.name);
    const asideOf = asideStep(e.name);
    if (step !== null) found.push({ name: e.name, step, aside: false });
    else if (asideOf !== null) found.push({ name: e.name, step: asideOf, aside: true });
  }
  return found.sort((a, b) => b.step - a.step || Number(a.aside) - Number(b.aside));
}
