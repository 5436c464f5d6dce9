/**
 * Preloaded (`deno run --preload`) into a run of the user's script that
 * `dtrain check` starts without the launcher: installs the probe the check
 * asked for, before the script's first line. Launched ranks get it from the
 * rank bootstrap (launch/rank_bootstrap.ts) instead.
 */
import { installProbeFromEnv } from "./probe.ts";

installProbeFromEnv();
