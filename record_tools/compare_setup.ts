/**
 * The comparisons of how two runs were set up: script and dtrain version,
 * seed, config, script arguments and device, world size and launch options,
 * environment, versions and hardware. Each reports findings into a Sink.
 */
import { envRule } from "../run_record/env_rules.ts";
import type { RunDir } from "../run_record/format.ts";
import { short, show, type Sink, WEIGHT } from "./findings.ts";

/** Flattens nested objects and arrays into `a.b[2].c` → JSON value text. */
export function flatten(
  value: unknown,
  prefix = "",
  out = new Map<string, string>(),
): Map<string, string> {
  if (Array.isArray(value) && value.length > 0) {
    value.forEach((v, i) => flatten(v, `${prefix}[${i}]`, out));
  } else if (
    value !== null && typeof value === "object" && !Array.isArray(value) &&
    Object.keys(value).length > 0
  ) {
    for (const [k, v] of Object.entries(value)) flatten(v, prefix ? `${prefix}.${k}` : k, out);
  } else {
    out.set(prefix || "(value)", JSON.stringify(value));
  }
  return out;
}

/** Options of the launch command that cannot change results, with the value that follows them. */
const VOLATILE_OPTIONS = [
  "--run-dir",
  "--master-port",
  "--master-addr",
  "--rdzv-token",
  "--rdzv-token-file",
  "--node-rank",
  "--log-ranks",
  "--nproc",
  "--nnodes",
];

/**
 * The launcher options of a command line that can change results: the
 * script path and its arguments (compared on their own) and VOLATILE_OPTIONS
 * (or those recorded in `world`) are removed.
 */
export function launchOptions(argv: readonly string[], scriptArgs: readonly string[]): string[] {
  const n = scriptArgs.length;
  const endsWithArgs = argv.length > n &&
    scriptArgs.every((a, i) => argv[argv.length - n + i] === a);
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

/** The script's sha256 and the dtrain version. */
export function compareCode(a: RunDir, b: RunDir, sink: Sink): void {
  const sa = a.run.script, sb = b.run.script;
  if (sa.sha256 !== sb.sha256) {
    const where = sa.path === sb.path ? `${sa.path} edited?` : `${sa.path} vs ${sb.path}`;
    sink.findings.push({
      weight: WEIGHT.script,
      topic: "script",
      headline: `script changed: sha256 ${short(sa.sha256)} vs ${short(sb.sha256)} (${where})`,
      evidence: [],
      check: "diff the two versions of the script, or rerun both with the same script",
    });
  }
  const va = a.run.versions.dtrain, vb = b.run.versions.dtrain;
  if (va !== vb) {
    sink.findings.push({
      weight: WEIGHT.dtrainVersion,
      topic: "versions.dtrain",
      headline: `dtrain version ${va} vs ${vb}: the trainer's own code changed`,
      evidence: [],
      check: "rerun both with one dtrain build",
    });
  }
}

/** Seed, every differing config key path, device (config.json) and the script arguments. */
export function compareConfig(a: RunDir, b: RunDir, sink: Sink): void {
  const ca = a.config, cb = b.config;
  if (ca === null || cb === null) {
    const where = [ca === null ? "a" : "", cb === null ? "b" : ""].filter(Boolean).join(" and ");
    sink.notes.push(`config, seed and device not compared: config.json is missing in run ${where}`);
  } else {
    sink.compared.push("config", "seed", "device");
    if (ca.seed !== cb.seed) {
      sink.findings.push({
        weight: WEIGHT.seed,
        topic: "seed",
        headline: `seed ${ca.seed} vs ${cb.seed}: weight initialisation and shuffling differ`,
        evidence: [],
        check: "rerun with the same seed",
      });
    }
    const fa = flatten(ca.config), fb = flatten(cb.config);
    const keys = [...new Set([...fa.keys(), ...fb.keys()])].sort();
    // The config's numerics section is the policy compareNumerics reports on its own.
    const differing = keys.filter((k) => !k.startsWith("numerics.") && fa.get(k) !== fb.get(k));
    if (differing.length > 0) {
      const pairs = differing.map((k) =>
        `${k} ${fa.get(k) ?? "(absent)"} vs ${fb.get(k) ?? "(absent)"}`
      );
      sink.findings.push({
        weight: WEIGHT.config,
        topic: "config",
        headline: `config: ${pairs.slice(0, 4).join("; ")}${
          pairs.length > 4 ? `; and ${pairs.length - 4} more` : ""
        }`,
        evidence: pairs.length > 4 ? pairs : [],
        check:
          "confirm the change was intended; set these keys equal to see whether the difference goes away",
      });
    }
    if (ca.device !== cb.device) {
      sink.findings.push({
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
    sink.findings.push({
      weight: WEIGHT.scriptArgs,
      topic: "script.args",
      headline: `script arguments ${JSON.stringify(aa)} vs ${JSON.stringify(ab)}`,
      evidence: [],
      check: "rerun with the same arguments",
    });
  }
}

/** World size, nodes × ranks per node, and the launch options that can change results. */
export function compareWorld(a: RunDir, b: RunDir, sink: Sink): void {
  const wa = a.run.world, wb = b.run.world;
  if (wa.worldSize !== wb.worldSize) {
    sink.findings.push({
      weight: WEIGHT.worldSize,
      topic: "world.worldSize",
      headline:
        `world size ${wa.worldSize} vs ${wb.worldSize}: per-rank batch and reduction order differ — expected to change losses in the last bits`,
      evidence: [
        `topology (nodes × ranks per node): ${wa.nnodes}×${wa.nprocPerNode} vs ${wb.nnodes}×${wb.nprocPerNode}`,
      ],
      check:
        "compare runs at one world size, or compare across world sizes with a tolerance (dtrain check)",
    });
  } else if (wa.nnodes !== wb.nnodes) {
    sink.findings.push({
      weight: WEIGHT.topology,
      topic: "world.topology",
      headline:
        `topology ${wa.nnodes}×${wa.nprocPerNode} vs ${wb.nnodes}×${wb.nprocPerNode} (nodes × ranks per node): the reduction crosses nodes differently`,
      evidence: [],
      check: "rerun on the same number of nodes",
    });
  }
  const la = launchOptions(a.run.command.argv, a.run.script.args);
  const lb = launchOptions(b.run.command.argv, b.run.script.args);
  if (JSON.stringify(la) !== JSON.stringify(lb)) {
    sink.findings.push({
      weight: WEIGHT.launchOptions,
      topic: "command",
      headline: `launch options [${la.join(" ")}] vs [${lb.join(" ")}]`,
      evidence: [`a: ${a.run.command.argv.join(" ")}`, `b: ${b.run.command.argv.join(" ")}`],
      check: "rerun with the same launcher options",
    });
  }
}

/** Each recorded environment variable that differs, ranked by its effect class. */
export function compareEnv(a: RunDir, b: RunDir, sink: Sink): void {
  const ea = a.run.env, eb = b.run.env;
  const names = [...new Set([...Object.keys(ea), ...Object.keys(eb)])].sort();
  for (const name of names) {
    if (ea[name] === eb[name]) continue;
    const rule = envRule(name);
    const effect = rule?.effect ?? "tuning";
    const weight = {
      numeric: WEIGHT.envNumeric,
      selection: WEIGHT.envSelection,
      tuning: WEIGHT.envTuning,
      cosmetic: WEIGHT.envCosmetic,
    }[effect];
    sink.findings.push({
      weight,
      topic: `env:${name}`,
      headline: `environment: ${name} ${show(ea[name])} vs ${show(eb[name])} (${
        rule?.why ?? "a recorded variable"
      })`,
      evidence: [],
      check: effect === "cosmetic"
        ? "harmless for results"
        : `rerun with the same ${name} to see whether the difference goes away`,
    });
  }
}

/** Native build hashes, CUDA/NCCL/GPUs, Deno/V8/TypeScript, and the machine's hardware facts. */
export function compareVersions(a: RunDir, b: RunDir, sink: Sink): void {
  const va = a.run.versions, vb = b.run.versions;
  const rows: Array<[string, number, string, unknown, unknown]> = [
    ["native.cpu", WEIGHT.nativeBuild, "native CPU library build", va.native.cpu, vb.native.cpu],
    [
      "native.cuda",
      WEIGHT.nativeBuild,
      "native CUDA library build",
      va.native.cuda,
      vb.native.cuda,
    ],
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
    const fmt = (v: unknown) =>
      typeof v === "string" && key.startsWith("native") ? short(v) : show(v);
    sink.findings.push({
      weight,
      topic: `versions.${key}`,
      headline: `versions: ${what} ${fmt(x)} vs ${fmt(y)}`,
      evidence: [],
      check: key.startsWith("native")
        ? "rebuild both from one source tree (deno task native) and rerun"
        : `rerun both with one ${what} version`,
    });
  }
  const ma = a.run.machine, mb = b.run.machine;
  if (ma === undefined || mb === undefined) return;
  const hw: Array<[string, unknown, unknown]> = [
    ["CPU", ma.cpuModel, mb.cpuModel],
    ["cpus", ma.cpus, mb.cpus],
    ["arch", ma.arch, mb.arch],
    ["OS", ma.os, mb.os],
  ];
  const differing = hw.filter(([, x, y]) => x !== y).map(([k, x, y]) =>
    `${k} ${show(x)} vs ${show(y)}`
  );
  if (differing.length > 0) {
    sink.findings.push({
      weight: WEIGHT.hardware,
      topic: "machine",
      headline: `hardware: ${differing.join("; ")}`,
      evidence: [],
      check: "rerun both on one machine type",
    });
  }
}
