/**
 * The bootstrap of every rank process: ties the rank to its launcher, connects the control store,
 * publishes the rank's phases, turns any uncaught error into a failure notice in the store and
 * exit code 1, and installs `dtrain check`'s probe when the check asks for it. The launcher
 * preloads rank_main.ts, which runs it after the single file's extraction check.
 */
import { currentPhase, phase, setPhaseSink } from "../distributed/control/phase.ts";
import {
  ENV,
  getRankSettings,
  getWorld,
  launcherPid,
  storeToken,
} from "../distributed/control/env.ts";
import { useDevice } from "../tensor/device_choice.ts";
import {
  installRankStore,
  publishFailure,
  reportNumerics,
} from "../distributed/control/rank_runtime.ts";
import { numericsPolicy, onNumericsPolicySet } from "../tensor/numerics_policy.ts";
import { StorePhaseSink } from "../distributed/control/rank_state.ts";
import { StatePage, statePagePath } from "../distributed/control/state_page.ts";
import { StoreClient } from "../distributed/control/store.ts";
import { attemptKeys } from "../distributed/control/store_keys.ts";
import { dieWithParent } from "./pdeathsig.ts";
import { ignoreSignals } from "../ffi/libc.ts";
import { STOP_SIGNALS } from "../os/stop_signals.ts";
import { signalNumber } from "../os/exit_status.ts";
import { CHECK_ENV } from "../check/env.ts";
import { enter, leave } from "../profile/profile.ts";

// Why --preload rather than `await import(script)`: the user's script stays the main module, so
// import.meta.main is true, Deno.args holds only its own arguments, and the process ends when the
// script's work does (a `main()` called without await is not cut short).

/** How long a rank keeps trying to reach the store at start-up. */
const CONNECT_TIMEOUT_MS = 60_000;

function fatal(message: string, code = 1): never {
  console.error(`[dtrain] ${message}`);
  Deno.exit(code);
}

const token = storeToken();
const parent = launcherPid();
if (token === null || parent === null) {
  fatal(
    "launch/rank_main.ts is the rank bootstrap of the dtrain launcher; start scripts with `dtrain --nproc N script.ts`",
    2,
  );
}

let world;
try {
  world = getWorld();
} catch (e) {
  fatal(`rank cannot start: ${(e as Error).message}`, 2);
}
const me = world.rank;

const watch = dieWithParent(parent);
if (!watch.ok) {
  if (watch.parentGone) fatal(`rank ${me}: ${watch.reason}; exiting`);
  console.error(
    `[dtrain] rank ${me}: warning: ${watch.reason}; this rank relies on its store connection to notice a dead launcher`,
  );
}

let client: StoreClient;
const profiled = enter("rendezvous");
try {
  client = await StoreClient.connect({
    host: world.masterAddr,
    port: world.masterPort,
    token,
    timeoutMs: CONNECT_TIMEOUT_MS,
    identity: `rank ${me}`,
  });
} catch (e) {
  fatal(`rank ${me}: ${(e as Error).message}`);
}
leave(profiled);
installRankStore(client);
const keys = attemptKeys(getRankSettings().restartCount);
const host = Deno.hostname();
const start = currentPhase();
const sink = new StorePhaseSink(client, keys.rankState(me), {
  rank: me,
  host,
  pid: Deno.pid,
  phase: start.phase,
  phaseAt: start.sinceMs,
}, world.runDir === null ? null : StatePage.open(statePagePath(world.runDir, me)));
setPhaseSink(sink);
sink.publish();
sink.startHeartbeat();

let failing = false;

/**
 * Stores the failure notice (unless the Trainer already did) and exits 1. The launcher prints the
 * error once, with the rank, from the notice (its summary, and launcher.log); the rank prints it
 * itself only when the notice could not be stored, so it is never printed twice or thrice.
 */
async function fail(err: unknown): Promise<void> {
  if (failing) return;
  failing = true;
  sink.stopHeartbeat();
  if (!await publishFailure(err)) {
    const text = err instanceof Error ? (err.stack || `${err.name}: ${err.message}`) : String(err);
    console.error(`Uncaught error in rank ${me}: ${text}`);
  }
  Deno.exit(1);
}

globalThis.addEventListener("error", (e) => {
  e.preventDefault();
  fail(e.error ?? e.message);
});
globalThis.addEventListener("unhandledrejection", (e) => {
  e.preventDefault();
  fail(e.reason);
});
globalThis.addEventListener("unload", () => {
  if (!failing) sink.exiting();
  ignoreStopSignals();
});

/**
 * The script is over (its unload listeners run after this one): a stop signal arriving from now on
 * has nothing left to stop, so the kernel is told to drop it. Without this the runtime removes
 * the script's own stop listeners while it tears down, and a SIGTERM in that window — the
 * launcher forwarding a stop to this rank after a peer's stop request already ended the loop here
 * — ends the process "killed by SIGTERM", a failure in the launcher's summary for a rank that
 * saved and exited 0.
 */
function ignoreStopSignals(): void {
  const numbers = STOP_SIGNALS.map(signalNumber).filter((n) => n !== null);
  const r = ignoreSignals(numbers);
  if ("error" in r) console.error(`[dtrain] rank ${me}: ${r.error}`);
}

// A store connection that drops under us means the launcher is gone: the
// ranks must not outlive it (this also covers a failed PDEATHSIG).
client.closed.then((info) => {
  if (!info.byClient && !failing) {
    fatal(`rank ${me}: lost the control store (${info.reason}); the launcher is gone, exiting`);
  }
});
client.unrefWhenIdle();

// The rank's device, before the script runs: its tensors live there without a call of its own
// (`useDevice("cpu")` in the script still moves it back). A GPU rank gets GPU LOCAL_RANK.
const device = Deno.env.get(ENV.DEVICE) || "cpu";
if (device !== "cpu") {
  const before = currentPhase().phase;
  phase(`open device ${device}`);
  try {
    useDevice(device);
  } catch (e) {
    await fail(e);
  }
  phase(before);
}

// run.json records the numerics policy of each attempt: the one in force now, then each one set.
onNumericsPolicySet(reportNumerics);
reportNumerics(numericsPolicy());

// `dtrain check` runs the user's script with its probe: the library offers hook points, the probe
// installs itself on them from here (loaded only when asked for).
if (Deno.env.get(CHECK_ENV.OUT)) {
  const { installProbeFromEnv } = await import("../check/probe.ts");
  installProbeFromEnv();
}

// The library the script is about to import, loaded here (once: the script's import finds it
// evaluated), so that a rank's profile shows module loading apart from the script's own work.
const loading = enter("module load");
try {
  await import("../mod.ts");
} catch (e) {
  await fail(e);
}
leave(loading);
