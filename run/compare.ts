/**
 * Compares two run directories and ranks what differs as hypotheses for
 * why their losses differ, most likely cause first. The ranking rules are
 * the WEIGHT table below (documented in docs/RUN_DIR.md); `dtrain diff`
 * (diff.ts) prints the result.
 */
import { envRule } from "./env_rules.ts";
import { type DataOrderRecord, finalSteps, type MetricsRecord, type RunDir } from "./format.ts";

/** One difference, with its evidence and a check that would confirm or rule it out. */
export interface Finding {
  /** rank key: lower is printed first (see WEIGHT) */
  weight: number;
  /** what differs, e.g. "seed", "config", "env:DTRAIN_NUM_THREADS" */
  topic: string;
  /** one line naming the thing and both values */
  headline: string;
  /** further facts, one per line */
  evidence: string[];
  /** what to do to confirm or rule it out */
  check: string;
}

/** The ranked result. */
export interface Comparison {
  /** sorted, most likely cause first; empty when the runs agree */
  findings: Finding[];
  /** what could not be compared, and context that is not a difference */
  notes: string[];
  /** what was compared, for the "runs agree" line */
  compared: string[];
}

/**
 * The ranking. Deliberate changes to what is computed come first (code,
 * seed, config, device), then the partition of the work (world size,
 * launch options), then the data order (usually a consequence of the
 * former), then sources of last-bit non-determinism (numeric environment,
 * native build, hardware, runtime versions), then cosmetic settings; the
 * loss divergence and the run's outcome are the symptoms the others explain.
 */
export const WEIGHT = {
  script: 10,
  dtrainVersion: 15,
  seed: 20,
  config: 30,
  scriptArgs: 35,
  device: 40,
  worldSize: 50,
  topology: 52,
  launchOptions: 55,
  dataOrder: 60,
  envNumeric: 70,
  envSelection: 72,
  nativeBuild: 75,
  gpuStack: 78,
  envTuning: 80,
  hardware: 84,
  runtime: 88,
  envCosmetic: 95,
  loss: 100,
  nondeterminism: 101,
  outcome: 105,
} as const;

/** Options of compareRuns(). */
export interface CompareOptions {
  /** relative tolerance for losses, |a-b| / max(|a|,|b|) */
  lossTol: number;
}

/** A tolerance as people write it: 1e-6 rather than 0.000001. */
const tolText = (tol: number) => tol > 0 && tol < 1e-3 ? tol.toExponential() : String(tol);
const short = (hash: string) => hash.length > 12 ? `${hash.slice(0, 8)}…` : hash;
const show = (v: unknown) => v === undefined ? "(unset)" : typeof v === "string" ? v : JSON.stringify(v);

/** Flattens nested objects and arrays into `a.b[2].c` → JSON value text. */
export function flatten(value: unknown, prefix = "", out = new Map<string, string>()): Map<string, string> {
  if (Array.isArray(value) && value.length > 0) {
    value.forEach((v, i) => flatten(v, `${prefix}[${i}]`, out));
  } else if (value !== null && typeof value === "object" && !Array.isArray(value) && Object.keys(value).length > 0) {
    for (const [k, v] of Object.entries(value)) flatten(v, prefix ? `${prefix}.${k}` : k, out);
  } else {
    out.set(prefix || "(value)", JSON.stringify(value));
  }
  return out;
}

/** Relative difference of two losses; equal non-finite values (NaN and NaN) count as equal. */
export function relDiff(a: number, b: number): number {
  if (Object.is(a, b) || a === b) return 0;
  if (!Number.isFinite(a) || !Number.isFinite(b)) return Infinity;
  return Math.abs(a - b) / Math.max(Math.abs(a), Math.abs(b));
}

/** Options of the launch command that cannot change results, with the value that follows them. */
const VOLATILE_OPTIONS = ["--run-dir", "--master-port", "--master-addr", "--rdzv-token", "--rdzv-token-file", "--node-rank", "--log-ranks", "--nproc", "--nnodes"];

/**
 * The launcher options of a command line that can change results: the
 * script path and its arguments (compared on their own) and VOLATILE_OPTIONS
 * (or those recorded in `world`) are removed.
 */
export function launchOptions(argv: readonly string[], scriptArgs: readonly string[]): string[] {
  const n = scriptArgs.length;
  const endsWithArgs = argv.length > n && scriptArgs.every((a, i) => argv[argv.length - n + i] === a);
  const own = endsWithArgs ? argv.slice(1, argv.length - n - 1) : argv.slice(1);
  const out: string[] = [];
  for (let i = 0; i < own.length; i++) {
    const a = own[i]!;
    const opt = VOLATILE_OPTIONS.find((o) => a === o || a.startsWith(`${o}=`));
    if (opt === undefined) out.push(a);
    else if (a === opt) i++;
  }
  return out;
}

function compareCode(a: RunDir, b: RunDir, add: (f: Finding) => void): void {
  const sa = a.run.script, sb = b.run.script;
  if (sa.sha256 !== sb.sha256) {
    const where = sa.path === sb.path ? `${sa.path} edited?` : `${sa.path} vs ${sb.path}`;
    add({
      weight: WEIGHT.script,
      topic: "script",
      headline: `script changed: sha256 ${short(sa.sha256)} vs ${short(sb.sha256)} (${where})`,
      evidence: [],
      check: "diff the two versions of the script, or rerun both with the same script",
    });
  }
  const va = a.run.versions.dtrain, vb = b.run.versions.dtrain;
  if (va !== vb) {
    add({
      weight: WEIGHT.dtrainVersion,
      topic: "versions.dtrain",
      headline: `dtrain version ${va} vs ${vb}: the trainer's own code changed`,
      evidence: [],
      check: "rerun both with one dtrain build",
    });
  }
}

function compareConfig(a: RunDir, b: RunDir, add: (f: Finding) => void, notes: string[], compared: string[]): void {
  const ca = a.config, cb = b.config;
  if (ca === null || cb === null) {
    const where = [ca === null ? "a" : "", cb === null ? "b" : ""].filter(Boolean).join(" and ");
    notes.push(`config, seed and device not compared: config.json is missing in run ${where}`);
  } else {
    compared.push("config", "seed", "device");
    if (ca.seed !== cb.seed) {
      add({
        weight: WEIGHT.seed,
        topic: "seed",
        headline: `seed ${ca.seed} vs ${cb.seed}: weight initialisation and shuffling differ`,
        evidence: [],
        check: "rerun with the same seed",
      });
    }
    const fa = flatten(ca.config), fb = flatten(cb.config);
    const keys = [...new Set([...fa.keys(), ...fb.keys()])].sort();
    const differing = keys.filter((k) => fa.get(k) !== fb.get(k));
    if (differing.length > 0) {
      const pairs = differing.map((k) => `${k} ${fa.get(k) ?? "(absent)"} vs ${fb.get(k) ?? "(absent)"}`);
      add({
        weight: WEIGHT.config,
        topic: "config",
        headline: `config: ${pairs.slice(0, 4).join("; ")}${pairs.length > 4 ? `; and ${pairs.length - 4} more` : ""}`,
        evidence: pairs.length > 4 ? pairs : [],
        check: "confirm the change was intended; set these keys equal to see whether the difference goes away",
      });
    }
    if (ca.device !== cb.device) {
      add({
        weight: WEIGHT.device,
        topic: "device",
        headline: `device ${ca.device} vs ${cb.device}: different kernels, so different rounding`,
        evidence: [],
        check: "compare runs on one device; compare across devices only with a tolerance",
      });
    }
  }
  const aa = a.run.script.args, ab = b.run.script.args;
  if (JSON.stringify(aa) !== JSON.stringify(ab)) {
    add({
      weight: WEIGHT.scriptArgs,
      topic: "script.args",
      headline: `script arguments ${JSON.stringify(aa)} vs ${JSON.stringify(ab)}`,
      evidence: [],
      check: "rerun with the same arguments",
    });
  }
}

function compareWorld(a: RunDir, b: RunDir, add: (f: Finding) => void): void {
  const wa = a.run.world, wb = b.run.world;
  if (wa.worldSize !== wb.worldSize) {
    add({
      weight: WEIGHT.worldSize,
      topic: "world.worldSize",
      headline: `world size ${wa.worldSize} vs ${wb.worldSize}: per-rank batch and reduction order differ — expected to change losses in the last bits`,
      evidence: [`topology (nodes × ranks per node): ${wa.nnodes}×${wa.nprocPerNode} vs ${wb.nnodes}×${wb.nprocPerNode}`],
      check: "compare runs at one world size, or compare across world sizes with a tolerance (dtrain check)",
    });
  } else if (wa.nnodes !== wb.nnodes) {
    add({
      weight: WEIGHT.topology,
      topic: "world.topology",
      headline: `topology ${wa.nnodes}×${wa.nprocPerNode} vs ${wb.nnodes}×${wb.nprocPerNode} (nodes × ranks per node): the reduction crosses nodes differently`,
      evidence: [],
      check: "rerun on the same number of nodes",
    });
  }
  const la = launchOptions(a.run.command.argv, a.run.script.args);
  const lb = launchOptions(b.run.command.argv, b.run.script.args);
  if (JSON.stringify(la) !== JSON.stringify(lb)) {
    add({
      weight: WEIGHT.launchOptions,
      topic: "command",
      headline: `launch options [${la.join(" ")}] vs [${lb.join(" ")}]`,
      evidence: [`a: ${a.run.command.argv.join(" ")}`, `b: ${b.run.command.argv.join(" ")}`],
      check: "rerun with the same launcher options",
    });
  }
}

/** The first (epoch, rank), in that order, present in both runs whose digest differs. */
export function firstOrderDifference(
  a: readonly DataOrderRecord[],
  b: readonly DataOrderRecord[],
): { a: DataOrderRecord; b: DataOrderRecord; common: number } | null {
  const key = (d: DataOrderRecord) => `${d.epoch}/${d.rank}`;
  const inB = new Map(b.map((d) => [key(d), d]));
  const common = a.filter((d) => inB.has(key(d))).sort((x, y) => x.epoch - y.epoch || x.rank - y.rank);
  for (const da of common) {
    const db = inB.get(key(da))!;
    if (da.sha256 !== db.sha256 || da.count !== db.count) return { a: da, b: db, common: common.length };
  }
  return null;
}

function compareDataOrder(a: RunDir, b: RunDir, causes: Finding[], add: (f: Finding) => void, notes: string[], compared: string[]): void {
  const lacking = [a, b].flatMap((r, i) => r.missing.includes("data_order.jsonl") ? [i === 0 ? "a" : "b"] : []);
  if (lacking.length > 0) {
    notes.push(`data order not compared: data_order.jsonl is missing in run ${lacking.join(" and ")}`);
    return;
  }
  compared.push("data order");
  const d = firstOrderDifference(a.dataOrder, b.dataOrder);
  if (d === null) return;
  const explained = causes.filter((f) => f.weight < WEIGHT.dataOrder).map((f) => f.topic);
  const counts = d.a.count !== d.b.count ? `count ${d.a.count} vs ${d.b.count}; ` : "";
  add({
    weight: WEIGHT.dataOrder,
    topic: "data order",
    headline: `data order differs first at epoch ${d.a.epoch}, rank ${d.a.rank} (${counts}sha256 ${short(d.a.sha256)} vs ${short(d.b.sha256)}; ` +
      `first indices [${d.a.first.join(",")}] vs [${d.b.first.join(",")}])`,
    evidence: explained.length > 0 ? [`may follow from the differences above (${explained.join(", ")})`] : [],
    check: explained.length > 0
      ? "expected given the differences above"
      : "the sampler or the dataset changed: check the dataset files, the sampler's seed and that set_epoch() is called every epoch",
  });
}

function compareEnv(a: RunDir, b: RunDir, add: (f: Finding) => void): void {
  const ea = a.run.env, eb = b.run.env;
  const names = [...new Set([...Object.keys(ea), ...Object.keys(eb)])].sort();
  for (const name of names) {
    if (ea[name] === eb[name]) continue;
    const rule = envRule(name);
    const effect = rule?.effect ?? "tuning";
    const weight = { numeric: WEIGHT.envNumeric, selection: WEIGHT.envSelection, tuning: WEIGHT.envTuning, cosmetic: WEIGHT.envCosmetic }[effect];
    add({
      weight,
      topic: `env:${name}`,
      headline: `environment: ${name} ${show(ea[name])} vs ${show(eb[name])} (${rule?.why ?? "a recorded variable"})`,
      evidence: [],
      check: effect === "cosmetic" ? "harmless for results" : `rerun with the same ${name} to see whether the difference goes away`,
    });
  }
}

function compareVersions(a: RunDir, b: RunDir, add: (f: Finding) => void): void {
  const va = a.run.versions, vb = b.run.versions;
  const rows: Array<[string, number, string, unknown, unknown]> = [
    ["native.cpu", WEIGHT.nativeBuild, "native CPU library build", va.native.cpu, vb.native.cpu],
    ["native.cuda", WEIGHT.nativeBuild, "native CUDA library build", va.native.cuda, vb.native.cuda],
    ["cuda.runtime", WEIGHT.gpuStack, "CUDA runtime", va.cuda?.runtime, vb.cuda?.runtime],
    ["cuda.driver", WEIGHT.gpuStack, "CUDA driver", va.cuda?.driver, vb.cuda?.driver],
    ["cuda.gpus", WEIGHT.gpuStack, "GPUs", va.cuda?.gpus, vb.cuda?.gpus],
    ["nccl", WEIGHT.gpuStack, "NCCL", va.nccl, vb.nccl],
    ["deno", WEIGHT.runtime, "Deno", va.deno, vb.deno],
    ["v8", WEIGHT.runtime, "V8", va.v8, vb.v8],
    ["typescript", WEIGHT.runtime, "TypeScript", va.typescript, vb.typescript],
  ];
  for (const [key, weight, what, x, y] of rows) {
    if (JSON.stringify(x) === JSON.stringify(y)) continue;
    const fmt = (v: unknown) => typeof v === "string" && key.startsWith("native") ? short(v) : show(v);
    add({
      weight,
      topic: `versions.${key}`,
      headline: `versions: ${what} ${fmt(x)} vs ${fmt(y)}`,
      evidence: [],
      check: key.startsWith("native") ? "rebuild both from one source tree (deno task native) and rerun" : `rerun both with one ${what} version`,
    });
  }
  const ma = a.run.machine, mb = b.run.machine;
  if (ma === undefined || mb === undefined) return;
  const hw: Array<[string, unknown, unknown]> = [["CPU", ma.cpuModel, mb.cpuModel], ["cpus", ma.cpus, mb.cpus], ["arch", ma.arch, mb.arch], ["OS", ma.os, mb.os]];
  const differing = hw.filter(([, x, y]) => x !== y).map(([k, x, y]) => `${k} ${show(x)} vs ${show(y)}`);
  if (differing.length > 0) {
    add({
      weight: WEIGHT.hardware,
      topic: "machine",
      headline: `hardware: ${differing.join("; ")}`,
      evidence: [],
      check: "rerun both on one machine type",
    });
  }
}

/** Digits enough to show a relative difference `rel` between two printed numbers. */
function digitsFor(rel: number): number {
  return Math.min(17, Math.max(5, Number.isFinite(rel) && rel > 0 ? Math.ceil(-Math.log10(rel)) + 2 : 5));
}

function compareLosses(a: RunDir, b: RunDir, tol: number, add: (f: Finding) => void, notes: string[], compared: string[]): void {
  const lacking = [a, b].flatMap((r, i) => r.missing.includes("metrics.jsonl") ? [i === 0 ? "a" : "b"] : []);
  if (lacking.length > 0) {
    notes.push(`losses not compared: metrics.jsonl is missing in run ${lacking.join(" and ")}`);
    return;
  }
  const sa = finalSteps(a.metrics), sb = finalSteps(b.metrics);
  const inB = new Map(sb.map((m) => [m.step, m]));
  const common = sa.filter((m) => inB.has(m.step));
  if (common.length === 0) {
    notes.push(`losses not compared: the runs share no logged step (a: ${stepRange(sa)}, b: ${stepRange(sb)})`);
    return;
  }
  compared.push(`losses (${common.length} steps, rel tol ${tolText(tol)})`);
  let prev: MetricsRecord | null = null;
  for (const ma of common) {
    const mb = inB.get(ma.step)!;
    const rel = relDiff(ma.loss, mb.loss);
    if (rel > tol) {
      const d = digitsFor(rel);
      const agreed = prev === null ? `losses differ from the first common step` : `losses agree to ${tolText(tol)} up to step ${prev.step}`;
      add({
        weight: WEIGHT.loss,
        topic: "loss",
        headline: `${agreed}; first difference at step ${ma.step}: ${ma.loss.toPrecision(d)} vs ${mb.loss.toPrecision(d)} (rel ${rel.toExponential(1)})`,
        evidence: [`lr at that step: ${ma.lr} vs ${mb.lr}`],
        check: "the symptom; the other differences listed are its candidate causes",
      });
      return;
    }
    prev = ma;
  }
  if (sa.length !== sb.length) notes.push(`losses agree on the ${common.length} common steps`);
}

function stepRange(steps: readonly MetricsRecord[]): string {
  return steps.length === 0 ? "no steps" : `steps ${steps[0]!.step}–${steps.at(-1)!.step}`;
}

function compareOutcome(a: RunDir, b: RunDir, add: (f: Finding) => void, notes: string[]): void {
  const describe = (r: RunDir) => {
    const last = r.run.attempts.at(-1);
    if (last === undefined || r.run.status === "succeeded" || r.run.status === "running") return r.run.status;
    const how = last.signal ?? `exit ${last.exitCode}`;
    const rank = last.failingRank === null ? "" : `, rank ${last.failingRank}`;
    return `${r.run.status} (attempt ${last.attempt}: ${how}${rank}${last.reason ? `: ${last.reason}` : ""})`;
  };
  const ra = stepRange(finalSteps(a.metrics)), rb = stepRange(finalSteps(b.metrics));
  if (a.run.status !== b.run.status || ra !== rb) {
    add({
      weight: WEIGHT.outcome,
      topic: "outcome",
      headline: `outcome: run a ${describe(a)}, logged ${ra}; run b ${describe(b)}, logged ${rb}`,
      evidence: [],
      check: "read the failing run's rank logs (rank-<r>.log)",
    });
  }
  const na = a.run.attempts.length, nb = b.run.attempts.length;
  if (na !== nb) notes.push(`attempts: run a made ${na}, run b ${nb}`);
}

/** Adds the "nothing recorded explains it" hypothesis when only the losses (and perhaps hardware) differ. */
function nondeterminism(a: RunDir, b: RunDir, findings: Finding[]): Finding | null {
  if (!findings.some((f) => f.topic === "loss")) return null;
  if (findings.some((f) => f.weight < WEIGHT.loss && f.topic !== "machine")) return null;
  const both = (what: string, x: unknown, y: unknown) => show(x) === show(y) ? `${what}: ${show(x)} in both` : `${what}: ${show(x)} vs ${show(y)}`;
  const ma = a.run.machine, mb = b.run.machine;
  return {
    weight: WEIGHT.nondeterminism,
    topic: "non-determinism",
    headline: "nothing recorded explains the loss difference: the remaining hypotheses are non-determinism sources (thread count, native library build, hardware)",
    evidence: [
      both("thread count DTRAIN_NUM_THREADS", a.run.env.DTRAIN_NUM_THREADS, b.run.env.DTRAIN_NUM_THREADS),
      both("native library build", a.run.versions.native.cpu, b.run.versions.native.cpu),
      both("hosts", a.run.world.hosts.join(","), b.run.world.hosts.join(",")),
      both("CPU", ma?.cpuModel, mb?.cpuModel),
      both("cpus", ma?.cpus, mb?.cpus),
      both("memory bytes", ma?.memBytes, mb?.memBytes),
    ],
    check: "rerun one configuration twice on one machine: if it disagrees with itself, a kernel is non-deterministic (threaded reduction, atomics)",
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
  const findings: Finding[] = [];
  const notes: string[] = [];
  const compared = ["script", "versions", "environment", "world"];
  const add = (f: Finding) => findings.push(f);
  compareCode(a, b, add);
  compareConfig(a, b, add, notes, compared);
  compareWorld(a, b, add);
  compareDataOrder(a, b, findings, add, notes, compared);
  compareEnv(a, b, add);
  compareVersions(a, b, add);
  compareLosses(a, b, opts.lossTol, add, notes, compared);
  compareOutcome(a, b, add, notes);
  const extra = nondeterminism(a, b, findings);
  if (extra) findings.push(extra);
  for (const [name, r] of [["a", a], ["b", b]] as const) {
    for (const w of r.warnings) notes.push(`run ${name}: ${w}`);
  }
  // Array.prototype.sort is stable: equal weights keep the order above.
  findings.sort((x, y) => x.weight - y.weight);
  return { findings, notes, compared };
}
