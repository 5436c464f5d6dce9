/**
 * The multi-node CPU side for `dtrain doctor`: which process group CPU ranks
 * of the requested run use, whether the Gloo library (and libgloo beside or
 * under it) loads, and the network interface Gloo would bind — the one
 * GLOO_SOCKET_IFNAME names, or else the one that reaches node 0 — as Gloo
 * itself describes the device it opens there.
 */
import { DtNativeError } from "../../ffi/native.ts";
import { GLOO_SYMBOLS, glooCalls, glooVersion } from "../../ffi/gloo.ts";
import { buildHash } from "../../ffi/value_calls.ts";
import { plannedCpuBackend } from "../../distributed/pg_config.ts";
import { type LibraryFacts, probeLibrary } from "./native.ts";

/** What the doctor knows about Gloo on this machine. */
export interface GlooFacts {
  /** the process group of CPU ranks for the requested nodes and ranks */
  backend: "single" | "shm" | "gloo";
  library: LibraryFacts;
  /** the Gloo version libdtrain_gloo.so was built against */
  version: string | null;
  /** GLOO_SOCKET_IFNAME, or null when unset */
  ifname: string | null;
  /** the host the interface is chosen toward when GLOO_SOCKET_IFNAME is unset */
  toward: string;
  /** Gloo's description of the device it opened: "tcp, pci=…, iface=eth0, speed=…, addr=[…]" */
  device: string | null;
  iface: string | null;
  addr: string | null;
  /** the interface's speed, when the kernel reports one */
  speedMbps: number | null;
  /** the address is 127.x or ::1: other machines cannot reach it */
  loopback: boolean;
  /** why no device could be opened */
  error: string | null;
}

/** Reads iface, addr and speed out of Gloo's device description. */
export function parseDevice(text: string): Pick<GlooFacts, "iface" | "addr" | "speedMbps"> {
  const iface = /iface=([^,]*)/.exec(text)?.[1]?.trim() || null;
  const addr = /addr=\[([^\]]*)\]/.exec(text)?.[1] ?? null;
  const speed = Number(/speed=(-?\d+)/.exec(text)?.[1] ?? NaN);
  return { iface, addr, speedMbps: Number.isFinite(speed) && speed > 0 ? speed : null };
}

/**
 * Probes Gloo for a run of `nnodes` x `nproc` CPU ranks whose node 0 is
 * `masterAddr` (null: this machine's host name, as PyTorch falls back to).
 */
export function probeGloo(nnodes: number, nproc: number, masterAddr: string | null): GlooFacts {
  let backend: GlooFacts["backend"];
  try {
    backend = plannedCpuBackend(nnodes, nproc, Deno.env.get("DTRAIN_CPU_BACKEND"));
  } catch {
    backend = nnodes > 1 ? "gloo" : "shm";
  }
  let version: string | null = null;
  const library = probeLibrary("libdtrain_gloo.so", GLOO_SYMBOLS, (lib) => {
    version = glooVersion(lib);
    return { buildHash: buildHash(lib), backend: null };
  });
  const ifname = Deno.env.get("GLOO_SOCKET_IFNAME")?.trim() || null;
  const toward = masterAddr ?? Deno.hostname();
  const facts: GlooFacts = {
    backend,
    library,
    version,
    ifname,
    toward,
    device: null,
    iface: null,
    addr: null,
    speedMbps: null,
    loopback: false,
    error: library.loaded ? null : "the Gloo library does not load",
  };
  if (library.loaded) {
    const enc = new TextEncoder();
    const out = new Uint8Array(512);
    try {
      glooCalls().dt_gloo_probe(
        enc.encode(`${ifname ?? ""}\0`),
        enc.encode(`${toward}\0`),
        out,
        BigInt(out.length),
      );
      facts.device = new TextDecoder().decode(out.subarray(0, out.indexOf(0)));
      Object.assign(facts, parseDevice(facts.device));
      facts.loopback = /^127\.|^::1$/.test(facts.addr ?? "");
    } catch (e) {
      facts.error = e instanceof DtNativeError ? e.text : (e as Error).message;
    }
  }
  return facts;
}
