/**
 * The `dtrain` command: a table of verbs (the launcher is the default verb
 * and `run`), `--help` and `--version`. Adding a verb is one entry in VERBS.
 */
import pkg from "./package.json" with { type: "json" };
import { launch } from "./launch/launcher.ts";
import { launchHelp, parseLaunchArgs, UsageError } from "./launch/options.ts";
import { LaunchTimeout, TIMEOUT_EXIT_CODE } from "./launch/failure_report.ts";
import { LAUNCHER_LOADED, mark } from "./profile/profile.ts";

/** One sub-command of `dtrain`. */
export interface Verb {
  /** one line for `dtrain --help` */
  summary: string;
  /** runs the verb with the arguments after it; resolves to the exit code */
  main(args: string[]): Promise<number>;
}

async function runLauncher(args: string[]): Promise<number> {
  let parsed;
  try {
    parsed = parseLaunchArgs(args);
  } catch (e) {
    console.error(`dtrain: ${(e as Error).message}\n(see \`dtrain --help\`)`);
    return 2;
  }
  if (parsed === "help") {
    console.log(launchHelp());
    return 0;
  }
  if (parsed.cluster) console.error(`dtrain: launcher environment: ${parsed.cluster}`);
  try {
    return await launch(parsed, args);
  } catch (e) {
    if (e instanceof UsageError) {
      console.error(`dtrain: ${e.message}\n(see \`dtrain --help\`)`);
      return 2;
    }
    if (!(e instanceof LaunchTimeout)) throw e;
    console.error(`dtrain: ${e.message}`);
    return TIMEOUT_EXIT_CODE;
  }
}

/** Every verb; the first word of the command line picks one, else the default. */
export const VERBS: Record<string, Verb> = {
  run: {
    summary: "start N rank processes of a training script (the default verb)",
    main: runLauncher,
  },
  check: {
    summary: "staged single-process → DDP migration check of a script (sampler, gradients, state)",
    main: async (args) => (await import("./check/main.ts")).checkMain(args),
  },
  diff: {
    summary: "what differs between two runs, as hypotheses ranked most likely first",
    main: async (args) => (await import("./run/diff.ts")).diffMain(args),
  },
  rerun: {
    summary: "relaunch a recorded run with the same script, config, seed and world size",
    main: async (args) => (await import("./run/rerun.ts")).rerunMain(args, runLauncher),
  },
  report: {
    summary: "write a self-contained HTML (and SVG) report of a run's metrics",
    main: async (args) => (await import("./run/report.ts")).reportMain(args),
  },
  doctor: {
    summary: "check this machine for a run: versions, native libraries, /dev/shm, GPUs, limits",
    main: async (args) => (await import("./launch/doctor/main.ts")).doctorMain(args),
  },
  prepare: {
    summary: "text to nanoGPT's train.bin and val.bin (uint16 token ids), GPT-2 BPE or bytes",
    main: async (args) => (await import("./data/prepare_main.ts")).prepareMain(args),
  },
  exec: {
    summary:
      "run a script as one plain process with this dtrain's Deno and libraries (no launcher)",
    main: async (args) => {
      try {
        return await (await import("./launch/exec.ts")).execMain(args);
      } catch (e) {
        if (!(e instanceof UsageError)) throw e;
        console.error(`dtrain: ${e.message}`);
        return 2;
      }
    },
  },
};

const DEFAULT_VERB = "run";

/** `dtrain --help`: the verbs, then the default verb's options. */
export function generalHelp(): string {
  const verbs = Object.entries(VERBS).map(([name, v]) => `  ${name.padEnd(10)}${v.summary}`);
  return [
    `dtrain ${pkg.version}: a distributed trainer on Deno`,
    "",
    "Verbs:",
    ...verbs,
    "",
    launchHelp(),
  ].join("\n");
}

/**
 * Runs the command line; resolves to the process exit code. A verb's
 * usage errors return 2; any other error is printed and returns 1.
 *
 * @example
 * ```ts
 * Deno.exit(await main(["--nproc", "2", "train.ts", "--lr", "0.1"]));
 * ```
 */
export async function main(argv: string[]): Promise<number> {
  mark(LAUNCHER_LOADED); // DTRAIN_PROFILE=1: the ranks' reports split the launcher's time here
  const first = argv[0];
  if (first === "--version" || first === "-V") {
    console.log(`dtrain ${pkg.version} (deno ${Deno.version.deno})`);
    return 0;
  }
  if (first === undefined || first === "--help" || first === "-h" || first === "help") {
    console.log(generalHelp());
    return first === undefined ? 2 : 0;
  }
  const named = first !== undefined && Object.hasOwn(VERBS, first);
  const verb = VERBS[named ? first : DEFAULT_VERB]!;
  try {
    return await verb.main(named ? argv.slice(1) : argv);
  } catch (e) {
    console.error(`dtrain: ${(e as Error).message}`);
    return 1;
  }
}

if (import.meta.main) Deno.exit(await main(Deno.args));
