/**
 * The numerics policy of two runs (tensor/numerics_policy.ts): config.json's
 * record of it, else what rank 0 reported for the last attempt in run.json.
 * A policy that turns autocast, loss scaling, clipping or dropout off
 * changes every step, so a difference ranks with the deliberate changes.
 */
import type { RunDir } from "../run_record/format.ts";
import type { Sink } from "./findings.ts";
import { WEIGHT } from "./findings.ts";

type Policy = Record<string, unknown>;

/** The run's recorded policy and where it was found, or null when neither file records one. */
export function recordedNumerics(r: RunDir): { policy: Policy; from: string } | null {
  if (r.config?.numerics) return { policy: withDefaults(r.config.numerics), from: "config.json" };
  const last = [...r.run.attempts].reverse().find((x) => x.numerics !== undefined);
  return last?.numerics
    ? { policy: withDefaults(last.numerics), from: `run.json attempt ${last.attempt}` }
    : null;
}

/** Fields added after runs were recorded without them, at the value those runs had. */
const ADDED_LATER: Policy = { exact: false };

function withDefaults(p: Policy): Policy {
  return { ...ADDED_LATER, ...p };
}

/** Adds a finding naming every field in which the two runs' numerics policies differ. */
export function compareNumerics(a: RunDir, b: RunDir, sink: Sink): void {
  const na = recordedNumerics(a), nb = recordedNumerics(b);
  if (na === null || nb === null) {
    if (na !== null || nb !== null) {
      sink.notes.push(
        `numerics policy not compared: run ${na === null ? "a" : "b"} does not record one ` +
          "(recorded before dtrain recorded it)",
      );
    }
    return;
  }
  sink.compared.push("numerics");
  const fields = [...new Set([...Object.keys(na.policy), ...Object.keys(nb.policy)])].sort();
  const differing = fields.filter((k) =>
    JSON.stringify(na.policy[k]) !== JSON.stringify(nb.policy[k])
  );
  if (differing.length === 0) return;
  const pairs = differing.map((k) =>
    `${k} ${JSON.stringify(na.policy[k]) ?? "(absent)"} vs ${
      JSON.stringify(nb.policy[k]) ?? "(absent)"
    }`
  );
  sink.findings.push({
    weight: WEIGHT.numerics,
    topic: "numerics",
    headline: `numerics policy: ${pairs.join("; ")}`,
    evidence: [`a: ${na.from}, b: ${nb.from}`],
    check:
      "run both under one numerics policy (the Trainer's config.numerics, or setNumericsPolicy " +
      "in a loop of one's own); dtrain check runs its comparisons under the plain one",
  });
}
