/**
 * Compares two run directories and ranks what differs as hypotheses for
 * why their losses differ, most likely cause first. The ranking rules are
 * the WEIGHT table in findings.ts (documented in docs/RUN_DIR.md); `dtrain diff`
 * (diff.ts) prints the result.
 */
import type { RunDir } from "../run_record/format.ts";
import { type Finding, show, type Sink, WEIGHT } from "./findings.ts";
import {
  compareCode,
  compareConfig,
  compareEnv,
  compareVersions,
  compareWorld,
} from "./compare_setup.ts";
import { compareDataOrder, compareLosses, compareOutcome } from "./compare_results.ts";
import { compareNumerics } from "./compare_numerics.ts";

/** The ranked result. */
export interface Comparison {
  /** sorted, most likely cause first; empty when the runs agree */
  findings: Finding[];
  /** what could not be compared, and context that is not a difference */
  notes: string[];
  /** what was compared, for the "runs agree" line */
  compared: string[];
}

/** Options of compareRuns(). */
export interface CompareOptions {
  /** relative tolerance for losses, |a-b| / max(|a|,|b|) */
  lossTol: number;
}

/** Adds the "nothing recorded explains it" hypothesis when only the losses (and perhaps hardware) differ. */
function nondeterminism(a: RunDir, b: RunDir, findings: Finding[]): Finding | null {
  if (!findings.some((f) => f.topic === "loss")) return null;
  if (findings.some((f) => f.weight < WEIGHT.loss && f.topic !== "machine")) return null;
  const both = (what: string, x: unknown, y: unknown) =>
    show(x) === show(y) ? `${what}: ${show(x)} in both` : `${what}: ${show(x)} vs ${show(y)}`;
  const ma = a.run.machine, mb = b.run.machine;
  return {
    weight: WEIGHT.nondeterminism,
    topic: "non-determinism",
    headline:
      "nothing recorded explains the loss difference: the remaining hypotheses are non-determinism sources (thread count, native library build, hardware)",
    evidence: [
      both(
        "thread count DTRAIN_NUM_THREADS",
        a.run.env.DTRAIN_NUM_THREADS,
        b.run.env.DTRAIN_NUM_THREADS,
      ),
      both("native library build", a.run.versions.native.cpu, b.run.versions.native.cpu),
      both("hosts", a.run.world.hosts.join(","), b.run.world.hosts.join(",")),
      both("CPU", ma?.cpuModel, mb?.cpuModel),
      both("cpus", ma?.cpus, mb?.cpus),
      both("memory bytes", ma?.memBytes, mb?.memBytes),
    ],
    check:
      "rerun one configuration twice on one machine: if it disagrees with itself, a kernel is non-deterministic (threaded reduction, atomics)",
  };
}

/**
 * Compares run `a` with run `b`: every recorded difference as a ranked
 * finding (see WEIGHT), plus notes on what could not be compared.
 *
 * @example
 * ```ts
 * const c = compareRuns(readRunDir("runs/a"), readRunDir("runs/b"), { lossTol: 1e-6 });
 * console.log(c.findings[0]?.headline ?? "runs agree");
 * ```
 */
export function compareRuns(a: RunDir, b: RunDir, opts: CompareOptions): Comparison {
  const sink: Sink = {
    findings: [],
    notes: [],
    compared: ["script", "versions", "environment", "world"],
  };
  const { findings, notes, compared } = sink;
  compareCode(a, b, sink);
  compareConfig(a, b, sink);
  compareNumerics(a, b, sink);
  compareWorld(a, b, sink);
  compareDataOrder(a, b, sink);
  compareEnv(a, b, sink);
  compareVersions(a, b, sink);
  compareLosses(a, b, opts.lossTol, sink);
  compareOutcome(a, b, sink);
  const extra = nondeterminism(a, b, findings);
  if (extra) findings.push(extra);
  for (const [name, r] of [["a", a], ["b", b]] as const) {
    for (const w of r.warnings) notes.push(`run ${name}: ${w}`);
  }
  // Array.prototype.sort is stable: equal weights keep the order above.
  findings.sort((x, y) => x.weight - y.weight);
  return { findings, notes, compared };
}
