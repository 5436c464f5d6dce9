/**
 * The launcher's command line: one table of options (topic, default, help)
 * from which both the parser and the `--help` text are made. Option parsing
 * stops at the script path; everything after it belongs to the script.
 */
import { parseArgs } from "node:util";
import { applyClusterEnv, describeClusterEnv, detectClusterEnv } from "./cluster_env.ts";

/** A command line the launcher cannot run as given (exit status 2), found after parsing. */
export class UsageError extends RangeError {
  override name = "UsageError";
}

/** Validated launcher settings. */
export interface LaunchOptions {
  script: string;
  scriptArgs: string[];
  nproc: number;
  /** native threads per rank; null = cores ÷ local ranks */
  threads: number | null;
  nnodes: number;
  nodeRank: number;
  masterAddr: string;
  /** null = a free port (one node) or 29500 (several) */
  masterPort: number | null;
  rdzvToken: string | null;
  rdzvTokenFile: string | null;
  rdzvTimeoutS: number;
  hangWarnS: number;
  timeoutS: number;
  maxRestarts: number;
  graceS: number;
  runDir: string | null;
  logRanks: string;
  /** "auto", "cpu", "cuda" or "cuda-emu" (DTRAIN_DEVICE for the ranks) */
  device: string;
  /** a run directory or checkpoint folder the Trainer resumes from (DTRAIN_RESUME), or null */
  resume: string | null;
  /** allow more CPU ranks than a few per core */
  oversubscribe: boolean;
  /** start the ranks without type-checking the script */
  noCheck: boolean;
  /** the cluster launcher environment the node settings came from (Slurm, MPI), when one was found */
  cluster?: string;
  /** a resume may change the data order or the global batch (DTRAIN_ALLOW_CONFIG_CHANGE) */
  allowConfigChange: boolean;
  /**
   * Not a command-line option: the sha256 the script must have (`dtrain rerun`
   * verified it); the launcher refuses to start the ranks when it differs.
   */
  expectScriptSha256?: string;
}

type Kind = "int" | "seconds" | "string" | "flag";

interface OptionSpec {
  name: string;
  key: Exclude<keyof LaunchOptions, "script" | "scriptArgs">;
  kind: Kind;
  topic: string;
  /** shown in --help */
  defaultText: string;
  help: string;
  /** placeholder for the value in --help ("" for a flag) */
  value: string;
  min?: number;
}

const TOPICS = ["Processes", "Nodes and rendezvous", "Failures and hangs", "Output"] as const;

/** Every launcher option; adding one here adds it to the parser and the help. */
export const LAUNCH_OPTIONS: readonly OptionSpec[] = [
  {
    name: "nproc",
    value: "N",
    key: "nproc",
    kind: "int",
    min: 1,
    topic: "Processes",
    defaultText: "1",
    help: "rank processes to start on this node",
  },
  {
    name: "threads",
    value: "N",
    key: "threads",
    kind: "int",
    min: 1,
    topic: "Processes",
    defaultText: "cores ÷ nproc",
    help: "native kernel threads per rank (DTRAIN_NUM_THREADS)",
  },
  {
    name: "oversubscribe",
    value: "",
    key: "oversubscribe",
    kind: "flag",
    topic: "Processes",
    defaultText: `off: at most 4 CPU ranks per core`,
    help: "allow more CPU ranks (up to 256, the CPU process group's limit)",
  },
  {
    name: "device",
    value: "auto|cpu|cuda|cuda-emu",
    key: "device",
    kind: "string",
    topic: "Processes",
    defaultText: "auto: GPU LOCAL_RANK for each rank when CUDA works, else the CPU (said once)",
    help: "where ranks compute (DTRAIN_DEVICE); cuda-emu is the emulated GPU, a slow test device",
  },
  {
    name: "resume",
    value: "DIR",
    key: "resume",
    kind: "string",
    topic: "Processes",
    defaultText: "none: a Trainer resumes only from its own run directory's checkpoints",
    help:
      "a Trainer continues from the latest good checkpoint of this run directory (or checkpoint folder)",
  },
  {
    name: "allow-config-change",
    value: "",
    key: "allowConfigChange",
    kind: "flag",
    topic: "Processes",
    defaultText:
      "off: a resume that changes the data order (seed, shuffle, dropLast) or the global batch is refused",
    help: "let a Trainer resume with another data order or global batch size (listed in the log)",
  },
  {
    name: "no-check",
    value: "",
    key: "noCheck",
    kind: "flag",
    topic: "Processes",
    defaultText:
      "off (or $DTRAIN_NO_CHECK=1): `deno check` first, remembered by the files' content",
    help: "start the ranks without type-checking the script",
  },
  {
    name: "nnodes",
    value: "N",
    key: "nnodes",
    kind: "int",
    min: 1,
    topic: "Nodes and rendezvous",
    defaultText: "1",
    help: "machines in the job, each running one launcher",
  },
  {
    name: "node-rank",
    value: "N",
    key: "nodeRank",
    kind: "int",
    min: 0,
    topic: "Nodes and rendezvous",
    defaultText: "0",
    help: "this machine's index; node 0 hosts the control store",
  },
  {
    name: "master-addr",
    value: "ADDR",
    key: "masterAddr",
    kind: "string",
    topic: "Nodes and rendezvous",
    defaultText: "127.0.0.1",
    help: "address of node 0 (MASTER_ADDR)",
  },
  {
    name: "master-port",
    value: "PORT",
    key: "masterPort",
    kind: "int",
    min: 0,
    topic: "Nodes and rendezvous",
    defaultText: "a free port; 29500 with --nnodes > 1",
    help: "port of the control store (MASTER_PORT)",
  },
  {
    name: "rdzv-token",
    value: "TOKEN",
    key: "rdzvToken",
    kind: "string",
    topic: "Nodes and rendezvous",
    defaultText: "generated (one node)",
    help: "the run's shared secret; visible to `ps`, prefer --rdzv-token-file",
  },
  {
    name: "rdzv-token-file",
    value: "FILE",
    key: "rdzvTokenFile",
    kind: "string",
    topic: "Nodes and rendezvous",
    defaultText: "$DTRAIN_RDZV_TOKEN_FILE, else none",
    help: "file holding the secret; must be readable by its owner only (chmod 600)",
  },
  {
    name: "rdzv-timeout",
    value: "SECONDS",
    key: "rdzvTimeoutS",
    kind: "seconds",
    topic: "Nodes and rendezvous",
    defaultText: "600",
    help: "seconds to wait for every node to join",
  },
  {
    name: "hang-warn",
    value: "SECONDS",
    key: "hangWarnS",
    kind: "seconds",
    topic: "Failures and hangs",
    defaultText: "60",
    help: "seconds a collective may wait before the hang table is printed",
  },
  {
    name: "timeout",
    value: "SECONDS",
    key: "timeoutS",
    kind: "seconds",
    topic: "Failures and hangs",
    defaultText: "1800",
    help: "seconds a collective may wait before the run fails",
  },
  {
    name: "max-restarts",
    value: "K",
    key: "maxRestarts",
    kind: "int",
    min: 0,
    topic: "Failures and hangs",
    defaultText: "0",
    help: "restart every rank this many times after a failure (DTRAIN_RESTART_COUNT)",
  },
  {
    name: "grace",
    value: "SECONDS",
    key: "graceS",
    kind: "seconds",
    topic: "Failures and hangs",
    defaultText: "30",
    help: "seconds ranks get to save and exit after SIGTERM/SIGINT, before SIGKILL",
  },
  {
    name: "run-dir",
    value: "DIR",
    key: "runDir",
    kind: "string",
    topic: "Output",
    defaultText: "runs/<UTC time>-<script>-<hex>",
    help: "directory for per-rank logs and launch.json",
  },
  {
    name: "log-ranks",
    value: "RANKS",
    key: "logRanks",
    kind: "string",
    topic: "Output",
    defaultText: "0 (or $DTRAIN_LOG_RANKS)",
    help: "ranks whose stdout is shown: 0, all, or a list like 0,3; stderr is always shown",
  },
];

const DEFAULTS: Omit<LaunchOptions, "script" | "scriptArgs" | "logRanks"> = {
  nproc: 1,
  threads: null,
  nnodes: 1,
  nodeRank: 0,
  masterAddr: "127.0.0.1",
  masterPort: null,
  rdzvToken: null,
  rdzvTokenFile: null,
  rdzvTimeoutS: 600,
  hangWarnS: 60,
  timeoutS: 1800,
  maxRestarts: 0,
  graceS: 30,
  runDir: null,
  device: "auto",
  resume: null,
  oversubscribe: false,
  noCheck: false,
  allowConfigChange: false,
};

function parseValue(spec: OptionSpec, raw: string): number | string {
  if (spec.kind === "string") {
    if (raw === "") throw new RangeError(`--${spec.name} needs a value`);
    return raw;
  }
  const v = Number(raw);
  if (spec.kind === "int" && (!/^\d+$/.test(raw) || v < (spec.min ?? 0))) {
    throw new RangeError(
      `--${spec.name} must be an integer >= ${spec.min ?? 0}, got ${JSON.stringify(raw)}`,
    );
  }
  if (spec.kind === "seconds" && (raw.trim() === "" || !Number.isFinite(v) || v <= 0)) {
    throw new RangeError(
      `--${spec.name} must be a number of seconds > 0, got ${JSON.stringify(raw)}`,
    );
  }
  return v;
}

/** Checks a --log-ranks value: "0", "all", or a comma list of ranks. */
export function checkLogRanks(value: string): string {
  if (value === "all" || /^\d+(,\d+)*$/.test(value)) return value;
  throw new RangeError(
    `--log-ranks must be "all" or a comma list of ranks like 0,3, got ${JSON.stringify(value)}`,
  );
}

/**
 * Parses launcher arguments: options, then the script path, then the
 * script's own arguments, which are passed through untouched. Returns
 * "help" when --help (or -h) comes before the script.
 *
 * @example
 * ```ts
 * parseLaunchArgs(["--nproc", "2", "train.ts", "--lr", "0.1"]);
 * // → { nproc: 2, script: "train.ts", scriptArgs: ["--lr", "0.1"], … }
 * ```
 */
export function parseLaunchArgs(
  argv: readonly string[],
  env: (name: string) => string | undefined = (n) => Deno.env.get(n),
): LaunchOptions | "help" {
  const config = {
    ...Object.fromEntries(
      LAUNCH_OPTIONS.map((o) => [o.name, { type: o.kind === "flag" ? "boolean" : "string" }]),
    ) as Record<string, { type: "string" | "boolean" }>,
    help: { type: "boolean" as const, short: "h" },
  };
  // First pass, lenient, only to find where the script path is.
  const { tokens } = parseArgs({
    args: [...argv],
    options: config,
    strict: false,
    allowPositionals: true,
    tokens: true,
  });
  const first = tokens.find((t) => t.kind === "positional" || t.kind === "option-terminator");
  let scriptAt = argv.length;
  if (first?.kind === "positional") scriptAt = first.index;
  else if (first?.kind === "option-terminator") scriptAt = first.index + 1;
  const own = argv.slice(0, first?.kind === "option-terminator" ? first.index : scriptAt);
  const script = argv[scriptAt];
  if (own.includes("--help") || own.includes("-h")) return "help";
  if (script === undefined) {
    throw new RangeError("No script given: usage is `dtrain [options] script.ts [script args…]`");
  }

  let values: Record<string, string | boolean | undefined>;
  try {
    ({ values } = parseArgs({ args: own, options: config, strict: true, allowPositionals: false }));
  } catch (e) {
    throw new RangeError((e as Error).message.replace(/\. To specify a positional.*$/s, ""));
  }
  const out: LaunchOptions = {
    ...DEFAULTS,
    script,
    scriptArgs: argv.slice(scriptAt + 1),
    logRanks: env("DTRAIN_LOG_RANKS") || "0",
    noCheck: env("DTRAIN_NO_CHECK") === "1",
    rdzvTokenFile: env("DTRAIN_RDZV_TOKEN_FILE") || null,
  };
  for (const spec of LAUNCH_OPTIONS) {
    const raw = values[spec.name];
    if (spec.kind === "flag") {
      if (raw === true) (out as unknown as Record<string, unknown>)[spec.key] = true;
    } else if (typeof raw === "string") {
      (out as unknown as Record<string, unknown>)[spec.key] = parseValue(spec, raw);
    }
  }
  out.logRanks = checkLogRanks(out.logRanks);
  // $DTRAIN_RDZV_TOKEN_FILE is a default: an explicit --rdzv-token replaces it
  if (values["rdzv-token"] !== undefined && values["rdzv-token-file"] === undefined) {
    out.rdzvTokenFile = null;
  }
  const cluster = detectClusterEnv(env);
  if (cluster !== null) {
    const given = new Set(
      LAUNCH_OPTIONS.filter((o) => values[o.name] !== undefined).map((o) => o.name),
    );
    Object.assign(out, applyClusterEnv(cluster, out, given));
    out.cluster = describeClusterEnv(cluster);
  }
  if (out.nodeRank >= out.nnodes) {
    throw new RangeError(`--node-rank ${out.nodeRank} must be below --nnodes ${out.nnodes}`);
  }
  if (out.masterPort !== null && out.masterPort > 65535) {
    throw new RangeError(`--master-port ${out.masterPort} is not a TCP port (0 … 65535)`);
  }
  if (!["auto", "cpu", "cuda", "cuda-emu"].includes(out.device)) {
    throw new RangeError(`--device ${out.device} is not one of auto, cpu, cuda, cuda-emu`);
  }
  if (out.rdzvToken !== null && out.rdzvTokenFile !== null) {
    throw new RangeError("Give --rdzv-token or --rdzv-token-file, not both");
  }
  if (out.nnodes > 1 && out.rdzvToken === null && out.rdzvTokenFile === null) {
    throw new RangeError(
      "--nnodes > 1 needs the run's shared secret on every node: --rdzv-token-file FILE or " +
        "$DTRAIN_RDZV_TOKEN_FILE (create it once with " +
        "`head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n' > FILE && chmod 600 FILE` and copy it to each node)",
    );
  }
  return out;
}

/** The launcher's --help text, grouped by topic, with defaults. */
export function launchHelp(): string {
  const lines = [
    "Usage: dtrain [run] [options] script.ts [script args…]",
    "",
    "Starts --nproc rank processes of script.ts with the torchrun environment (RANK, LOCAL_RANK,",
    "WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT, DTRAIN_*). Options stop at the",
    'script path; what follows is passed to the script. The script imports the library as "dtrain".',
  ];
  for (const topic of TOPICS) {
    lines.push("", `${topic}:`);
    for (const o of LAUNCH_OPTIONS.filter((x) => x.topic === topic)) {
      const flag = `  --${o.name}${o.value ? ` ${o.value}` : ""}`;
      lines.push(`${flag.padEnd(34)}${o.help} (default: ${o.defaultText})`);
    }
  }
  lines.push(
    "",
    "Exit status: 0 when every rank exited 0; 124 when a timeout ended the run (--timeout,",
    "--rdzv-timeout, or a rank's own collective or barrier timeout); 128+N after the launcher got",
    "signal N (SIGINT, SIGTERM, SIGHUP, SIGQUIT, … all give the ranks --grace to save); 2 for a",
    "bad command line, a launch refused before any rank ran, or an error of dtrain itself;",
    "otherwise the code of the rank that failed first.",
  );
  return lines.join("\n");
}
