/**
 * The CUDA kernel library (build/libdtrain_cuda.so, built from kernels/cuda):
 * the kernel ABI of ffi/symbols.ts plus the dt_cuda_* extras that only this
 * library has (devices, streams, events, versions, cuBLASLt loading), its
 * opening (after the driver, which may live outside the loader's path), and
 * thin typed wrappers over the extras.
 */
import { basename } from "node:path";
import { CUDA_PENDING_SYMBOLS, KERNEL_SYMBOLS } from "./symbols.ts";
import { cBytes, cString, type NativeLibrary, openLibrary } from "./native.ts";
import { type CheckedCalls, checkedCalls } from "./calls.ts";

const P = "pointer" as const;
const B = "buffer" as const;
const I32 = "i32" as const;
const I64 = "i64" as const;
const STATUS = { result: I32 } as const;

/** Symbols of libdtrain_cuda.so that the CPU library does not export. */
export const CUDA_EXTRA_SYMBOLS = {
  /** (int32* out): visible GPUs; fails with the driver's text when there is none. */
  dt_cuda_device_count: { parameters: [B], ...STATUS },
  /** (device): chooses this process's GPU before any other GPU call; cannot change later. */
  dt_cuda_set_device: { parameters: [I32], ...STATUS },
  /** (): the library's GPU, -1 before the first call that needed one. */
  dt_cuda_get_device: { parameters: [], result: I32 },
  /** (device, char* name, name_len, int64* out[6]): major, minor, SMs, memory, L2, bus width. */
  dt_cuda_device_info: { parameters: [I32, B, I64, B], ...STATUS },
  /** (int32* out[2]): driver and runtime versions (13000 = 13.0). */
  dt_cuda_versions: { parameters: [B], ...STATUS },
  /** (int64* out[2]): free and total bytes of the library's GPU. */
  dt_cuda_mem_info: { parameters: [B], ...STATUS },
  /** (void** out): the compute stream (what a NULL stream argument means). */
  dt_cuda_compute_stream: { parameters: [B], ...STATUS },
  /** (void** out): a new non-blocking stream. */
  dt_cuda_stream_create: { parameters: [B], ...STATUS },
  dt_cuda_stream_destroy: { parameters: [P], ...STATUS },
  /** (void** out): an event without timing. */
  dt_cuda_event_create: { parameters: [B], ...STATUS },
  dt_cuda_event_destroy: { parameters: [P], ...STATUS },
  /** (event, stream) */
  dt_cuda_event_record: { parameters: [P, P], ...STATUS },
  /** (stream, event): the stream's later work waits for the event (on the GPU). */
  dt_cuda_stream_wait_event: { parameters: [P, P], ...STATUS },
  /** (event, int32* done) */
  dt_cuda_event_query: { parameters: [P, B], ...STATUS },
  dt_cuda_event_synchronize: { parameters: [P], ...STATUS },
  /** (bytes): page-locked host memory, NULL + error text on failure. */
  dt_cuda_host_alloc: { parameters: [I64], result: P },
  dt_cuda_host_free: { parameters: [P], ...STATUS },
  /** (const char* path or NULL, int64* version): opens cuBLASLt, creates its handle and workspace. */
  dt_cuda_load_cublaslt: { parameters: [B, B], ...STATUS },
  /** (0 or 1): let f32 GEMMs use TF32 tensor cores. */
  dt_cuda_gemm_allow_tf32: { parameters: [I32], ...STATUS },
  /** (int64* out[3]): kernel launches, cuBLASLt matmuls, memsets and device copies queued so far. */
  dt_cuda_work_count: { parameters: [B], ...STATUS },
} as const satisfies Deno.ForeignLibraryInterface;

/** The extras that return a value, not a dt_status (called through named methods below). */
const CUDA_VALUE_EXTRAS = ["dt_cuda_get_device", "dt_cuda_host_alloc"] as const;

/** The dt_status extras: every other entry of the table, so a new one is declared once. */
type CudaStatusExtra = Exclude<
  keyof typeof CUDA_EXTRA_SYMBOLS,
  (typeof CUDA_VALUE_EXTRAS)[number]
>;
const CUDA_STATUS_EXTRAS = Object.keys(CUDA_EXTRA_SYMBOLS).filter((name) =>
  !(CUDA_VALUE_EXTRAS as readonly string[]).includes(name)
) as CudaStatusExtra[];

/** The kernel ABI as this library declares it: CUDA_PENDING_SYMBOLS optional
 *  (null when absent; the ops check before calling). */
const CUDA_KERNEL_SYMBOLS = Object.fromEntries(
  Object.entries(KERNEL_SYMBOLS).map(([name, def]) => [
    name,
    CUDA_PENDING_SYMBOLS.has(name as keyof typeof KERNEL_SYMBOLS)
      ? { ...def, optional: true }
      : def,
  ]),
) as typeof KERNEL_SYMBOLS;

/** The whole symbol table of libdtrain_cuda.so. */
export const CUDA_SYMBOLS = {
  ...CUDA_KERNEL_SYMBOLS,
  ...CUDA_EXTRA_SYMBOLS,
} as const satisfies Deno.ForeignLibraryInterface;
export type CudaSymbols = typeof CUDA_SYMBOLS;

/** The library's file name inside build/ (or DTRAIN_LIB_DIR). */
export const CUDA_LIBRARY_NAME = "libdtrain_cuda.so";

/**
 * The emulated CUDA device's files (kernels/cuda_emu, built by g++): the same
 * symbols as CUDA_LIBRARY_NAME, the cuBLASLt stand-in to pass to
 * dt_cuda_load_cublaslt, and the NCCL stand-in to open in place of libnccl.
 */
export const CUDA_EMU_LIBRARIES = {
  kernels: "libdtrain_cuda_emu.so",
  /** the kernels built for the sanitizers (DTRAIN_EMU_RACECHECK=1, DTRAIN_EMU_MEMCHECK=1; docs/GPU.md) */
  kernelsSanitize: "libdtrain_cuda_emu_sanitize.so",
  cublasLt: "libdtrain_cublaslt_emu.so",
  nccl: "libdtrain_nccl_emu.so",
} as const;

let cuda: NativeLibrary<CudaSymbols> | undefined;
let driver: Deno.DynamicLibrary<Record<string, never>> | undefined;

/**
 * Opens the CUDA kernel library (once per process): libdtrain_cuda.so found
 * by ffi/native.ts, or the file `path` (the emulated device's build).
 * `driverPath`, when given, is opened first, so that the statically linked
 * CUDA runtime finds libcuda.so.1 even where the system loader would not
 * look. A process drives one CUDA library: asking for another file after
 * the first was opened throws.
 */
export function cudaKernels(driverPath?: string | null, path?: string): NativeLibrary<CudaSymbols> {
  if (cuda) {
    if (path !== undefined && path !== cuda.path) {
      throw new Error(
        `Cannot open ${path}: this process already computes with ${cuda.path} (one CUDA library per process)`,
      );
    }
    return cuda;
  }
  if (!driver && driverPath) driver = Deno.dlopen(driverPath, {});
  cuda = path === undefined
    ? openLibrary(CUDA_LIBRARY_NAME, CUDA_SYMBOLS)
    : openLibrary(basename(path), CUDA_SYMBOLS, path);
  return cuda;
}

/** The CUDA kernel library this process opened, or null before the first cudaKernels(). */
export function openedCudaKernels(): NativeLibrary<CudaSymbols> | null {
  return cuda ?? null;
}

/** Reads a pointer written into an 8-byte out-parameter. */
function pointerOut(out: BigUint64Array): Deno.PointerObject {
  const p = Deno.UnsafePointer.create(out[0]!);
  if (p === null) throw new Error("a CUDA call reported success but returned a null handle");
  return p;
}

/** The name and numbers of one GPU. */
export interface CudaDeviceInfo {
  index: number;
  name: string;
  /** compute capability, e.g. [9, 0] */
  capability: [number, number];
  multiprocessors: number;
  totalBytes: number;
  l2Bytes: number;
  busWidthBits: number;
}

/** Typed calls of the dt_cuda_* extras; every status is checked. */
export class CudaRuntime {
  readonly #lib: NativeLibrary<CudaSymbols>;
  readonly #call: CheckedCalls<CudaSymbols, CudaStatusExtra>;

  constructor(lib: NativeLibrary<CudaSymbols>) {
    this.#lib = lib;
    this.#call = checkedCalls(lib, CUDA_SYMBOLS, CUDA_STATUS_EXTRAS);
  }

  /** Visible GPUs (throws the driver's text when it cannot tell). */
  deviceCount(): number {
    const out = new Int32Array(1);
    this.#call.dt_cuda_device_count(out);
    return out[0]!;
  }

  /** Chooses this process's GPU. */
  setDevice(index: number): void {
    this.#call.dt_cuda_set_device(index);
  }

  /** The GPU's name and numbers. */
  deviceInfo(index: number): CudaDeviceInfo {
    const name = new Uint8Array(256);
    const out = new BigInt64Array(6);
    this.#call.dt_cuda_device_info(index, name, 256n, out);
    const text = new TextDecoder().decode(
      name.subarray(0, name.indexOf(0) < 0 ? 256 : name.indexOf(0)),
    );
    const n = (i: number) => Number(out[i]);
    return {
      index,
      name: text,
      capability: [n(0), n(1)],
      multiprocessors: n(2),
      totalBytes: n(3),
      l2Bytes: n(4),
      busWidthBits: n(5),
    };
  }

  /** Driver and runtime versions as "major.minor". */
  versions(): { driver: string; runtime: string } {
    const out = new Int32Array(2);
    this.#call.dt_cuda_versions(out);
    const fmt = (v: number) => `${Math.floor(v / 1000)}.${Math.floor((v % 1000) / 10)}`;
    return { driver: fmt(out[0]!), runtime: fmt(out[1]!) };
  }

  /** Device work this library has queued since it was loaded (DTRAIN_COUNT_CALLS). */
  workCount(): { launches: number; matmuls: number; copies: number } {
    const out = new BigInt64Array(3);
    this.#call.dt_cuda_work_count(out);
    return { launches: Number(out[0]), matmuls: Number(out[1]), copies: Number(out[2]) };
  }

  /** Free and total bytes of the library's GPU. */
  memInfo(): { freeBytes: number; totalBytes: number } {
    const out = new BigInt64Array(2);
    this.#call.dt_cuda_mem_info(out);
    return { freeBytes: Number(out[0]), totalBytes: Number(out[1]) };
  }

  /** The library's compute stream. */
  computeStream(): Deno.PointerObject {
    const out = new BigUint64Array(1);
    this.#call.dt_cuda_compute_stream(out);
    return pointerOut(out);
  }

  /** A new stream; destroy it with destroyStream. */
  createStream(): Deno.PointerObject {
    const out = new BigUint64Array(1);
    this.#call.dt_cuda_stream_create(out);
    return pointerOut(out);
  }

  destroyStream(stream: Deno.PointerObject): void {
    this.#call.dt_cuda_stream_destroy(stream);
  }

  /** A new event; destroy it with destroyEvent. */
  createEvent(): Deno.PointerObject {
    const out = new BigUint64Array(1);
    this.#call.dt_cuda_event_create(out);
    return pointerOut(out);
  }

  destroyEvent(event: Deno.PointerObject): void {
    this.#call.dt_cuda_event_destroy(event);
  }

  /** Records `event` at the current end of `stream`. */
  record(event: Deno.PointerObject, stream: Deno.PointerValue): void {
    this.#call.dt_cuda_event_record(event, stream);
  }

  /** Makes `stream`'s later work wait for `event` (the host does not wait). */
  streamWait(stream: Deno.PointerValue, event: Deno.PointerObject): void {
    this.#call.dt_cuda_stream_wait_event(stream, event);
  }

  readonly #done = new Int32Array(1);

  /** Whether everything before the event's record has finished. */
  query(event: Deno.PointerObject): boolean {
    this.#call.dt_cuda_event_query(event, this.#done);
    return this.#done[0] === 1;
  }

  /** Opens cuBLASLt (from `path`, or by soname when null); returns its version. */
  loadCublasLt(path: string | null): number {
    const version = new BigInt64Array(1);
    this.#call.dt_cuda_load_cublaslt(path === null ? null : cBytes(path), version);
    return Number(version[0]);
  }

  /** Lets f32 GEMMs use TF32 (faster, about 10 mantissa bits). */
  allowTf32(allow: boolean): void {
    this.#call.dt_cuda_gemm_allow_tf32(allow ? 1 : 0);
  }

  /** The library's text for the last failed call on this thread. */
  lastError(): string {
    return cString(this.#lib.symbols.dt_last_error());
  }
}
