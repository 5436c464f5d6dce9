/**
 * One Gloo group as libdtrain_gloo.so holds it (all ranks of the job, or one
 * rank per node): joining it through the control store with a membership
 * proof per pair, the native calls with their status checks, and the handle's
 * lifetime. It reports no phases and checks no arguments (distributed/
 * gloo_backend.ts does both); it logs a refused connection, a security event.
 */
import { nodeCrypto } from "../../os/node_builtin.ts";
import {
  GLOO_ERR_REFUSED,
  GLOO_FLAG_DETAIL,
  GLOO_PROOF_BYTES,
  glooAbort,
  glooCalls,
  glooCloseLeaked,
} from "../../ffi/gloo.ts";
import { cBytes, DtNativeError } from "../../ffi/native.ts";
import type { GlooSettings } from "./gloo_config.ts";

const encoder = new TextEncoder();
const decoder = new TextDecoder();
/** A NUL-terminated C string (NULs inside are replaced: C would cut there). */

/** Closes handles whose group was dropped without close(): a backstop only. */
const leaked = new FinalizationRegistry<Deno.PointerObject>((handle) => {
  glooCloseLeaked(handle);
});

/** Who joins one native group and how it is told apart in the store. */
export interface NativeGroupSpec {
  /** store key prefix of this group, unique per attempt and group ("dtrain/a0/user/gloo/1/world/") */
  prefix: string;
  /** the launcher's abort record of this attempt (a peer that lost a connection waits for it) */
  attemptAbortKey: string;
  /** this process's index among the members */
  member: number;
  /** a name per member for messages, e.g. "rank 3 (node 1)" */
  labels: readonly string[];
  /** the identity shown in the store's log */
  identity: string;
  detail: boolean;
  timeoutMs: number;
}

/**
 * The 32-byte proof that member `from` sends to member `to` of the group under
 * `prefix`: an HMAC of the run's token, so only a process of this run can
 * make it, bound to the group, the attempt and the direction, so a proof seen
 * on one connection is worth nothing on any other.
 *
 * @example
 * ```ts
 * pairProof(token, "dtrain/a0/user/gloo/1/world/", 0, 1).length; // 32
 * ```
 */
export function pairProof(token: string, prefix: string, from: number, to: number): Uint8Array {
  return new Uint8Array(
    nodeCrypto().createHmac("sha256", token).update(`dtrain gloo pair\n${prefix}\n${from}->${to}`)
      .digest(),
  );
}

/** A joined native Gloo group. */
export class GlooNativeGroup {
  readonly member: number;
  readonly size: number;
  /** Gloo's description of the TCP device: "tcp, pci=…, iface=eth0, speed=…, addr=[…]" */
  readonly device: string;
  #handle: Deno.PointerObject | null;

  private constructor(handle: Deno.PointerObject, member: number, size: number) {
    this.#handle = handle;
    this.member = member;
    this.size = size;
    const out = new Uint8Array(512);
    glooCalls().dt_gloo_info(handle, out, BigInt(out.length));
    this.device = decoder.decode(out.subarray(0, out.indexOf(0)));
    leaked.register(this, handle, this);
  }

  /** Joins (blocking) once every member has; throws naming those that did not. */
  static open(spec: NativeGroupSpec, s: GlooSettings): GlooNativeGroup {
    const n = spec.labels.length;
    const proofsOut = new Uint8Array(n * GLOO_PROOF_BYTES);
    const proofsIn = new Uint8Array(n * GLOO_PROOF_BYTES);
    for (let p = 0; p < n; p++) {
      if (p === spec.member) continue;
      proofsOut.set(pairProof(s.token, spec.prefix, spec.member, p), p * GLOO_PROOF_BYTES);
      proofsIn.set(pairProof(s.token, spec.prefix, p, spec.member), p * GLOO_PROOF_BYTES);
    }
    const labels = encoder.encode(spec.labels.map((l) => l.replaceAll("\0", " ") + "\0").join(""));
    const out = new BigUint64Array(1);
    try {
      glooCalls().dt_gloo_open(
        cBytes(s.storeHost),
        s.storePort,
        cBytes(s.token),
        cBytes(spec.identity),
        cBytes(spec.prefix),
        cBytes(spec.attemptAbortKey),
        spec.member,
        n,
        labels,
        cBytes(s.iface),
        cBytes(s.bindHost),
        proofsOut,
        proofsIn,
        spec.detail ? GLOO_FLAG_DETAIL : 0,
        BigInt(Math.ceil(spec.timeoutMs)),
        out,
      );
    } catch (e) {
      // A connection that is not the run's is a security event: logged whatever the caller does.
      if (e instanceof DtNativeError && e.status === GLOO_ERR_REFUSED) {
        console.error(`[dtrain] ${e.text}`);
      }
      throw e;
    }
    const handle = Deno.UnsafePointer.create(out[0]!);
    if (handle === null) throw new Error("dt_gloo_open returned success but no handle");
    return new GlooNativeGroup(handle, spec.member, n);
  }

  /** The handle, or a throw when closed. */
  get handle(): Deno.PointerObject {
    if (this.#handle === null) throw new Error("the Gloo group is closed");
    return this.#handle;
  }

  get closed(): boolean {
    return this.#handle === null;
  }

  /** Fails the group for every member with `reason`; never throws. */
  abort(status: number, reason: string): void {
    if (this.#handle === null) return;
    glooAbort(this.#handle, status, cBytes(reason));
  }

  /** Leaves the group (idempotent). */
  close(): void {
    const handle = this.#handle;
    if (handle === null) return;
    this.#handle = null;
    leaked.unregister(this);
    glooCalls().dt_gloo_close(handle);
  }
}
