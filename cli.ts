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

/**
 * The launcher verb. `expect` (from `dtrain rerun`) is what the launcher must
 * find before it starts the ranks: the script rerun verified.
 */
async function runLauncher(
  args: string[],
  expect?: { scriptSha256: string },
): Promise<number> {
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
  if (expect) parsed.expectScriptSha256 = expect.scriptSha256;
  try {
    return await launch(parsed, args);
  } catch (e) {
    if (e instanceof UsageError) {
      console.error(`dtrain: ${e.message}\n(see \`dtrain --help\`)`);
      return ERROR_EXIT_CODE;
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
    summary:
      "staged single-process → DDP migration check of a script (sampler, gradients, state); --exact: the same bits at every world size",
    main: async (args) => (await import("./check/main.ts")).checkMain(args),
  },
  diff: {
    summary: "what differs between two runs, as hypotheses ranked most likely first",
    main: async (args) => (await import("./record_tools/diff.ts")).diffMain(args),
  },
  rerun: {
    summary: "relaunch a recorded run with the same script, config, seed and world size",
    main: async (args) => (await import("./record_tools/rerun.ts")).rerunMain(args, runLauncher),
  },
  report: {
    summary: "write a self-contained HTML (and SVG) report of a run's metrics",
    main: async (args) => (await import("./record_tools/report.ts")).reportMain(args),
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
 * The exit status of a refused command line and of any error a verb did not
 * answer itself: 2 for every verb, never a code that means an answer (diff's
 * 1 "the runs differ", the launcher's rank codes, 124, 128+N).
 */
export const ERROR_EXIT_CODE = 2;

/**
 * Runs the command line; resolves to the process exit code. A verb's
 * usage errors and unexpected errors (a stack overflow included) return 2.
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
    console.error(`dtrain: ${describeError(e)}`);
    return ERROR_EXIT_CODE;
  }
}

function describeError(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

/**
 * An error that escapes every verb's own handling (a rejected promise nobody
 * awaited, an exception in a timer) still ends the command with exit status
 * 2 and one line, instead of Deno's default 1 and a stack.
 */
export function exitOnStrayErrors(): void {
  const fail = (e: unknown) => {
    console.error(`dtrain: unexpected error: ${describeError(e)}`);
    Deno.exit(ERROR_EXIT_CODE);
  };
  globalThis.addEventListener("unhandledrejection", (ev) => {
    ev.preventDefault();
    fail(ev.reason);
  });
  globalThis.addEventListener("error", (ev) => {
    ev.preventDefault();
    fail(ev.error ?? ev.message);
  });
}

if (import.meta.main) {
  exitOnStrayErrors();
  Deno.exit(await main(Deno.args));
}
