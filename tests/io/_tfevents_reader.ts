/**
 * Runs tfevents_reader.py (Debian's /usr/bin/python3 with python3-protobuf):
 * an event-file reader that is not dtrain's code, checking framing, both
 * masked CRC32Cs and the protobuf encoding of every record.
 */
import { fileURLToPath } from "node:url";

export const PYTHON = "/usr/bin/python3";
const READER = fileURLToPath(new URL("./tfevents_reader.py", import.meta.url));

/** Why the reader cannot run here (printed when a test is skipped), or null when it can. */
export const readerMissing: string | null = (() => {
  try {
    const r = new Deno.Command(PYTHON, {
      args: ["-c", "import google.protobuf"],
      stdout: "null",
      stderr: "null",
    }).outputSync();
    return r.success
      ? null
      : `${PYTHON} cannot import google.protobuf (Debian package python3-protobuf)`;
  } catch {
    return `${PYTHON} is absent (Debian packages python3, python3-protobuf)`;
  }
})();

/** One summary value as the reader decoded it. */
export interface PyValue {
  tag: string;
  kind: "simple_value" | "tensor" | null;
  /** float32 bits, little-endian hex, of a simple_value */
  f32?: string;
  dtype?: number;
  shape?: number[];
  has_shape?: boolean;
  strings?: string[];
  plugin?: string;
  plugin_content?: string;
  data_class?: number;
}

/** One event as the reader decoded it (the step as a decimal string: it is an int64). */
export interface PyEvent {
  wall_time: number;
  step: string;
  what: "file_version" | "summary" | "session_log" | null;
  file_version?: string;
  values?: PyValue[];
  status?: number;
}

/** The reader's exit status and output for `paths`. */
export async function runReader(
  paths: string[],
): Promise<{ ok: boolean; stdout: string; stderr: string }> {
  const r = await new Deno.Command(PYTHON, {
    args: [READER, ...paths],
    stdout: "piped",
    stderr: "piped",
  }).output();
  const dec = new TextDecoder();
  return { ok: r.success, stdout: dec.decode(r.stdout), stderr: dec.decode(r.stderr) };
}

/** Decodes event files with the reader; throws with its message when any record is bad. */
export async function readEvents(paths: string[]): Promise<Record<string, PyEvent[]>> {
  const r = await runReader(paths);
  if (!r.ok) throw new Error(`tfevents_reader.py refused the files: ${r.stderr.slice(-2000)}`);
  return JSON.parse(r.stdout);
}

/** The float32 bits of `v` as the reader prints them (little-endian hex). */
export function f32Hex(v: number): string {
  const b = new Uint8Array(Float32Array.of(v).buffer);
  return [...b].map((x) => x.toString(16).padStart(2, "0")).join("");
}

/** The event files in `dir`, in name order (the order TensorBoard reads them). */
export function eventFiles(dir: string): string[] {
  return [...Deno.readDirSync(dir)].map((e) => e.name).filter((n) =>
    n.startsWith("events.out.tfevents.")
  ).sort().map((n) => `${dir}/${n}`);
}
