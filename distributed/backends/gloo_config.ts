/**
 * The Gloo group's settings, read from the environment the process group was
 * configured from: where the control store is and the run's token (set by the
 * launcher), the network interface (GLOO_SOCKET_IFNAME, as PyTorch reads it)
 * or address to bind, and whether allReduce goes through shared memory
 * within each node first (DTRAIN_GLOO_HIERARCHY).
 */
import { ENV } from "../control/env.ts";
import type { ResolvedProcessGroupConfig } from "../pg_config.ts";

/** How allReduce is split between shared memory and Gloo. */
export type GlooHierarchy = "auto" | "on" | "off";

/** Everything the Gloo group needs beyond the process-group config. */
export interface GlooSettings {
  storeHost: string;
  storePort: number;
  token: string;
  /** the launch attempt (DTRAIN_RESTART_COUNT), which scopes the store keys */
  attempt: number;
  /** GLOO_SOCKET_IFNAME, or "" */
  iface: string;
  /** DTRAIN_GLOO_HOST, or "": bind to the address that reaches the store */
  bindHost: string;
  hierarchy: GlooHierarchy;
}

/**
 * Reads the Gloo settings; throws naming the variable when one is missing or
 * malformed.
 *
 * @example
 * ```ts
 * const s = glooSettings(resolveProcessGroupConfig());
 * console.log(s.iface || "the interface that reaches the store");
 * ```
 */
export function glooSettings(cfg: ResolvedProcessGroupConfig): GlooSettings {
  const get = cfg.lookup;
  const token = get(ENV.STORE_TOKEN) ?? "";
  if (token === "" || cfg.world.masterPort === 0) {
    throw new Error(
      "The Gloo process group meets its peers through the dtrain launcher's control store, and this process " +
        `has none (${ENV.STORE_TOKEN} or ${ENV.MASTER_PORT} unset): start it with \`dtrain --nnodes N ` +
        "--node-rank R --master-addr A --rdzv-token-file F script.ts` on every machine",
    );
  }
  const attemptRaw = get(ENV.RESTART_COUNT) ?? "0";
  if (!/^\d+$/.test(attemptRaw.trim() || "0")) {
    throw new RangeError(`${ENV.RESTART_COUNT}=${JSON.stringify(attemptRaw)} is not a count`);
  }
  const hierarchy = (get("DTRAIN_GLOO_HIERARCHY") ?? "").trim().toLowerCase() || "auto";
  if (!["auto", "on", "off"].includes(hierarchy)) {
    throw new RangeError(
      `DTRAIN_GLOO_HIERARCHY=${
        JSON.stringify(get("DTRAIN_GLOO_HIERARCHY"))
      }: expected auto, on or off (allReduce through shared memory within each node first)`,
    );
  }
  const iface = (get("GLOO_SOCKET_IFNAME") ?? "").trim();
  if (iface.includes(",")) {
    throw new RangeError(
      `GLOO_SOCKET_IFNAME=${
        JSON.stringify(iface)
      }: dtrain's Gloo group uses one interface; name exactly one`,
    );
  }
  return {
    storeHost: cfg.world.masterAddr,
    storePort: cfg.world.masterPort,
    token,
    attempt: Number(attemptRaw.trim() || "0"),
    iface,
    bindHost: (get("DTRAIN_GLOO_HOST") ?? "").trim(),
    hierarchy: hierarchy as GlooHierarchy,
  };
}
