/**
 * What a resume changes in what the checkpoint was trained with: the saved
 * resolved config and world size against this run's. A change of the data
 * order (seed, shuffle, dropLast) or of the global batch (data.globalBatchSize:
 * world size × per-rank batch × accumulation) changes what the next steps see
 * and how big they are, so it is refused unless the user says it is intended
 * (--allow-config-change); every other change (learning rate, schedule,
 * epochs, world size at the same global batch…) is listed once.
 */

/** One field that differs between the checkpoint's config and this run's. */
export interface ConfigChange {
  /** dotted path, e.g. "optim.lr", or "worldSize" */
  key: string;
  saved: unknown;
  now: unknown;
  /** "order": the data order; "batch": the global batch; "other": anything else */
  kind: "order" | "batch" | "other";
}

/** Keys whose change alters the data order. */
const ORDER_KEYS = new Set(["seed", "data.shuffle", "data.dropLast"]);
/** Keys whose change alters the global batch. */
const BATCH_KEYS = new Set(["data.globalBatchSize"]);
/** Keys that differ between a run and its resume by design (where to save, how to resume). */
const IGNORED_KEYS = new Set([
  "checkpoint.dir",
  "checkpoint.resume",
  "checkpoint.allowConfigChange",
]);

/** Flattens plain JSON into dotted keys; arrays are leaves (compared whole). */
function flatten(value: unknown, prefix: string, out: Map<string, unknown>): void {
  if (value !== null && typeof value === "object" && !Array.isArray(value)) {
    for (const [k, v] of Object.entries(value)) flatten(v, prefix ? `${prefix}.${k}` : k, out);
  } else {
    out.set(prefix, value);
  }
}

/**
 * Every difference between the saved config (and world size) and this run's,
 * order and batch changes first.
 *
 * @example
 * ```ts
 * configChanges({ seed: 1, optim: { lr: 0.1 } }, { seed: 1, optim: { lr: 0.2 } }, 2, 2);
 * // [{ key: "optim.lr", saved: 0.1, now: 0.2, kind: "other" }]
 * ```
 */
export function configChanges(
  saved: Record<string, unknown>,
  now: Record<string, unknown>,
  savedWorldSize: number,
  worldSize: number,
): ConfigChange[] {
  const a = new Map<string, unknown>(), b = new Map<string, unknown>();
  flatten(saved, "", a);
  flatten(now, "", b);
  const out: ConfigChange[] = [];
  for (const key of new Set([...a.keys(), ...b.keys()])) {
    if (IGNORED_KEYS.has(key)) continue;
    const x = a.get(key), y = b.get(key);
    if (JSON.stringify(x) === JSON.stringify(y)) continue;
    const kind = ORDER_KEYS.has(key) ? "order" : BATCH_KEYS.has(key) ? "batch" : "other";
    out.push({ key, saved: x, now: y, kind });
  }
  if (savedWorldSize !== worldSize) {
    out.push({ key: "worldSize", saved: savedWorldSize, now: worldSize, kind: "other" });
  }
  const rank = { order: 0, batch: 1, other: 2 } as const;
  return out.sort((p, q) => rank[p.kind] - rank[q.kind] || p.key.localeCompare(q.key));
}

/** `optim.lr 0.001 → 0.002` */
export function describeChange(c: ConfigChange): string {
  const show = (v: unknown) => v === undefined ? "(absent)" : JSON.stringify(v);
  return `${c.key} ${show(c.saved)} → ${show(c.now)}`;
}

/**
 * Throws when `changes` alter the data order or the global batch and the
 * user did not allow it; the error lists them and names the option.
 */
export function refuseUnintendedChanges(
  changes: readonly ConfigChange[],
  allowed: boolean,
  checkpoint: string,
): void {
  const serious = changes.filter((c) => c.kind !== "other");
  if (serious.length === 0 || allowed) return;
  const what = [
    ...(serious.some((c) => c.kind === "order") ? ["the data order"] : []),
    ...(serious.some((c) => c.kind === "batch") ? ["the global batch size"] : []),
  ].join(" and ");
  throw new Error(
    `Cannot resume from ${checkpoint}: this run changes ${what} it was trained with ` +
      `(${serious.map(describeChange).join("; ")}). If that is intended, launch with ` +
      `--allow-config-change (or set checkpoint.allowConfigChange: true); else restore the ` +
      `saved values`,
  );
}
