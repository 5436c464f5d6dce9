/**
 * The doctor's report as text: one section per topic (dtrain, native
 * libraries, cpu, memory, shared memory, multi-node, gpu, limits), then the verdict and
 * one `- fix:` or `- warn:` line per problem.
 */
import type { DoctorFacts } from "./facts.ts";
import { clusterEnvLine } from "../cluster_env.ts";
import type { LibraryFacts } from "./native.ts";
import { ddpShmVerdict, formatBytes, type Verdict } from "./verdict.ts";

/** The section titles, in order (tests look for each). */
export const SECTIONS = [
  "dtrain",
  "native libraries",
  "cpu",
  "memory",
  "shared memory",
  "multi-node",
  "gpu",
  "limits",
] as const;

const row = (label: string, value: string) => `  ${label.padEnd(18)} ${value}`;
const yesNo = (b: boolean) => (b ? "yes" : "no");

function libraryRows(lib: LibraryFacts): string[] {
  const status = lib.loaded ? "loads" : lib.path ? "does not load" : "not found";
  const rows = [row(lib.name, `${lib.purpose}: ${status}`)];
  if (lib.path) rows.push(row("", lib.path));
  if (lib.loaded) {
    const path = lib.backend ? `, code path ${lib.backend}` : "";
    rows.push(row("", `build ${lib.buildHash}${path}`));
  } else if (lib.recordedHash) {
    rows.push(row("", `recorded build ${lib.recordedHash}`));
  }
  if (lib.error) rows.push(row("", lib.error));
  return rows;
}

/** The multi-node section: the CPU process group, Gloo's library and the interface it would bind. */
function glooRows(f: DoctorFacts): string[] {
  const gl = f.gloo;
  const nnodes = f.request.nnodes ?? 1;
  const backend = gl.backend === "gloo"
    ? `gloo across ${nnodes} machines${
      f.request.nproc > 1 && (Deno.env.get("DTRAIN_GLOO_HIERARCHY") ?? "") !== "off"
        ? " (allReduce through shared memory within each machine first)"
        : ""
    }`
    : `${gl.backend} (one machine; gloo with --nnodes > 1)`;
  const chosen = gl.ifname
    ? `GLOO_SOCKET_IFNAME=${gl.ifname}`
    : `the interface that reaches ${gl.toward} (set GLOO_SOCKET_IFNAME to choose)`;
  const speed = gl.speedMbps ? `, ${gl.speedMbps} Mb/s` : "";
  return [
    "multi-node",
    row("launcher env", clusterEnvLine()),
    row("cpu backend", backend),
    row(
      "gloo",
      gl.library.loaded
        ? `Gloo ${gl.version} (${gl.library.path})`
        : `not available: ${gl.library.error}`,
    ),
    row(
      "interface",
      gl.device ? `${gl.iface} ${gl.addr}${speed}, ${chosen}` : `none: ${gl.error}; ${chosen}`,
    ),
  ];
}

function limitText(l: { soft: number | null; hard: number | null } | null, bytes: boolean): string {
  if (!l) return "unknown";
  const f = (v: number | null) => (v === null ? "unlimited" : bytes ? formatBytes(v) : String(v));
  return `${f(l.soft)} (hard ${f(l.hard)})`;
}

/**
 * Renders the report.
 *
 * @example
 * ```ts
 * const facts = gatherFacts({ nproc: 2, device: "auto" });
 * console.log(renderReport(facts, judge(facts)));
 * ```
 */
export function renderReport(f: DoctorFacts, v: Verdict): string {
  const { nproc, device } = f.request;
  const i = f.install;
  const where = i.layout === "single-file"
    ? `single file ${i.singleFile ?? "(path unknown)"}, unpacked in ${i.root}`
    : i.layout === "checkout"
    ? `checkout ${i.root}`
    : "imported from a URL";
  const g = f.gpu;
  const lib = (name: string, path: string | null) => `${name} ${path ?? "not found"}`;
  const settings = Object.entries(g.settings).map(([k, val]) => `${k}=${val}`);
  const space = f.shm.space;
  const ddp = ddpShmVerdict(f);
  const lines = [
    `dtrain doctor: can this machine start \`dtrain --nproc ${nproc}\` (device ${device})?`,
    "",
    "dtrain",
    row("version", `${i.version} (${where})`),
    row(
      "runtime",
      `Deno ${f.versions.deno}, V8 ${f.versions.v8}, TypeScript ${f.versions.typescript}`,
    ),
    "",
    "native libraries",
    row("searched", f.libraries[0]?.searched.join(", ") || "(no folders)"),
    ...[...f.libraries, g.kernels].flatMap(libraryRows),
    "",
    "cpu",
    row("model", f.cpu.model),
    row(
      "features",
      `avx2 ${yesNo(f.cpu.features.avx2)}, fma ${yesNo(f.cpu.features.fma)}, avx512f ${
        yesNo(f.cpu.features.avx512f)
      }`,
    ),
    row("cores", String(f.cpu.cores)),
    "",
    "memory",
    row(
      "total",
      `${formatBytes(f.memory.total)}, ${formatBytes(f.memory.available)} available${
        f.memory.cgroupLimit !== null ? `, cgroup limit ${formatBytes(f.memory.cgroupLimit)}` : ""
      }`,
    ),
    "",
    "shared memory",
    row(
      space.path,
      space.ok
        ? `${formatBytes(space.totalBytes)}, ${formatBytes(space.freeBytes)} free`
        : `unreadable: ${space.error}`,
    ),
    row(
      "needed",
      `${formatBytes(f.shm.needBytes)} for a CPU run of ${nproc} ranks ` +
        `(${nproc} x 2 x ${formatBytes(f.shm.chunkBytes)} buffers + control)`,
    ),
    ...(ddp ? [row("ddp buckets", ddp.text)] : []),
    "",
    ...glooRows(f),
    "",
    "gpu",
    row("usable", g.usable ? "yes" : `no: ${g.summary}`),
    ...(g.usable
      ? [
        row("driver", `CUDA ${g.driverVersion}`),
        row("runtime", `CUDA ${g.runtimeVersion}`),
        row("gpus", `${g.deviceCount} (GPU 0: ${g.deviceName})`),
        ...g.devices.map((d, i) => row(`  GPU ${i}`, d)),
      ]
      : []),
    row(
      "libraries",
      [
        lib("driver", g.libraries.driver),
        lib("cuBLASLt", g.libraries.cublasLt),
        lib("cudart", g.libraries.cudart),
      ].join("; "),
    ),
    row(
      "nccl",
      g.ncclVersion
        ? `${g.ncclVersion} (${g.libraries.nccl})`
        : g.libraries.nccl
        ? `does not load: ${g.ncclError}`
        : "not found",
    ),
    row("searched", g.searched.join(", ")),
    row(
      "settings",
      settings.length ? settings.join(" ") : "(no NCCL_* or CUDA_VISIBLE_DEVICES set)",
    ),
    "",
    "limits",
    row("open files", limitText(f.limits.openFiles, false)),
    row("locked mem", limitText(f.limits.lockedMemoryBytes, true)),
    "",
    v.ready
      ? `verdict: ready for a ${v.gpuRun ? "GPU" : "CPU"} run of ${nproc} rank(s)`
      : `verdict: NOT ready: ${
        v.problems.filter((p) => p.level === "fix").length
      } problem(s) to fix first`,
    ...v.problems.map((p) => `- ${p.level}: ${p.text}`),
  ];
  return lines.join("\n");
}
