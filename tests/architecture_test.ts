/**
 * The layering of the tree (docs/DESIGN.md, "Layers"), checked on the real
 * import graph: Deno's own parser (`deno info --json`) reads every import,
 * `export … from` and dynamic `import("…")` of a string literal in every
 * TypeScript file. The library never imports the tools built on it, each
 * library folder imports only lower layers, each tool only lower tools, no
 * library module registers itself by a bare `import "…"`, no chain of
 * runtime imports comes back to where it started, and the process-group
 * backends are opened only by initProcessGroup and see only the interface
 * above them.
 */
import assert from "node:assert/strict";
import { join, relative } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const REPO = fileURLToPath(new URL("../", import.meta.url)).replace(/\/$/, "");

/**
 * The library's folders by layer: a file may import its own folder and
 * strictly lower layers only. `distributed/control` (store, phases, the
 * launcher-rank contract) sits far below the collectives and DDP of the rest
 * of `distributed/`, above ffi/ (its state page is mapped through libc).
 */
const LIBRARY_LAYERS: readonly (readonly string[])[] = [
  ["os", "io", "profile"],
  ["ffi"],
  ["tensor", "random", "distributed/control"],
  ["nn", "optim", "data"],
  ["amp", "distributed"],
];

/**
 * The tools built on the library, by layer, lowest first (folders, and the
 * command's own file); the library never imports them. A tool imports the
 * library, its own folder and strictly lower tools only: what two tools both
 * need lives in the lower one (the run record's format below the Trainer, the
 * launcher and the verbs; the script type check in check/, below the
 * launcher) or in the library (the single file's manifest in os/).
 */
const TOOL_LAYERS: readonly (readonly string[])[] = [
  ["run_record", "parity"],
  ["train"],
  ["check"],
  ["launch"],
  ["record_tools"],
  ["cli.ts"],
  ["single_file"],
];

/**
 * What the single-file packer may import among the tools: it packs the
 * finished command through its entry, never the launcher's or another tool's
 * parts (the rank bootstrap's preload, launch/rank_main.ts, is the launcher's
 * own entry and checks the extraction itself).
 */
const SINGLE_FILE_REACHES = ["cli.ts"];

/** One import of one module. */
interface Edge {
  from: string;
  to: string;
  /** type-only imports vanish at run time: they never close a circle */
  typeOnly: boolean;
  dynamic: boolean;
  /** 1-based line of the specifier in `from` */
  line: number;
}

/** The library folder of a repository path, or null (tools, tests, scripts, mod.ts, ...). */
function libraryFolder(path: string): string | null {
  const all = LIBRARY_LAYERS.flat().sort((a, b) => b.length - a.length); // longest prefix first
  return all.find((f) => path.startsWith(f + "/")) ?? null;
}

function layerOf(folder: string): number {
  return LIBRARY_LAYERS.findIndex((l) => l.includes(folder));
}

/** The tool (a folder, or cli.ts) of a repository path, or null. */
function toolFolder(path: string): string | null {
  return TOOL_LAYERS.flat().find((t) => path === t || path.startsWith(t + "/")) ?? null;
}

function toolLayerOf(tool: string): number {
  return TOOL_LAYERS.findIndex((l) => l.includes(tool));
}

/** Every import between tools that climbs their order, as a readable line. */
function toolOrderViolations(edges: readonly Edge[]): string[] {
  const out: string[] = [];
  for (const e of edges) {
    const from = toolFolder(e.from), to = toolFolder(e.to);
    if (from === null || to === null || from === to) continue;
    if (toolLayerOf(to) >= toolLayerOf(from)) {
      out.push(
        `${where(e)}: the tool ${from} (layer ${toolLayerOf(from)}) may import only lower tools, ` +
          `${to} is layer ${toolLayerOf(to)}`,
      );
    } else if (from === "single_file" && !SINGLE_FILE_REACHES.includes(to)) {
      out.push(`${where(e)}: single_file/ packs the command through cli.ts, not ${to}'s parts`);
    }
  }
  return out;
}

const where = (e: Edge) => `${e.from}:${e.line} imports ${e.to}`;

/** Every import that breaks a layer rule, as a readable line. */
function layerViolations(edges: readonly Edge[]): string[] {
  const out: string[] = [];
  for (const e of edges) {
    const from = libraryFolder(e.from);
    if (from === null) continue;
    // An npm package (package.json) sits below every layer: it cannot import the repository.
    if (e.to.startsWith("node_modules/")) continue;
    const tool = toolFolder(e.to);
    if (tool !== null) {
      out.push(`${where(e)}: the library (${from}/) never imports a tool (${tool}/)`);
      continue;
    }
    const to = libraryFolder(e.to);
    if (to === null) {
      out.push(`${where(e)}: the library (${from}/) imports only library folders`);
    } else if (to !== from && layerOf(to) >= layerOf(from)) {
      out.push(
        `${where(e)}: ${from}/ (layer ${layerOf(from)}) may import only lower layers, ` +
          `${to}/ is layer ${layerOf(to)}`,
      );
    }
  }
  return out;
}

/** The circles of runtime imports (type-only edges left out), each as a closed path. */
function runtimeCircles(edges: readonly Edge[]): string[][] {
  const next = new Map<string, string[]>();
  for (const e of edges) {
    if (e.typeOnly) continue;
    next.set(e.from, [...(next.get(e.from) ?? []), e.to]);
  }
  // Tarjan's strongly connected components; each component of 2+ modules (or a self-import) holds a circle.
  const index = new Map<string, number>(), low = new Map<string, number>();
  const stack: string[] = [], onStack = new Set<string>();
  const components: string[][] = [];
  let counter = 0;
  const visit = (v: string) => {
    index.set(v, counter), low.set(v, counter), counter++;
    stack.push(v), onStack.add(v);
    for (const w of next.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) === index.get(v)) {
      const c: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        onStack.delete(w);
        c.push(w);
      } while (w !== v);
      if (c.length > 1 || (next.get(v) ?? []).includes(v)) components.push(c);
    }
  };
  for (const v of next.keys()) if (!index.has(v)) visit(v);
  return components.map((c) => closedPath(c, next));
}

/** One path through a strongly connected component that returns to its start. */
function closedPath(component: string[], next: Map<string, string[]>): string[] {
  const inside = new Set(component);
  const start = [...component].sort()[0]!;
  // Breadth-first search for the shortest way back to start.
  const prev = new Map<string, string>();
  const queue = [start];
  while (queue.length) {
    const v = queue.shift()!;
    for (const w of next.get(v) ?? []) {
      if (!inside.has(w)) continue;
      if (w === start) {
        const path = [start];
        for (let u: string | undefined = v; u !== undefined && u !== start; u = prev.get(u)) {
          path.splice(1, 0, u);
        }
        return [...path, start];
      }
      if (!prev.has(w)) prev.set(w, v), queue.push(w);
    }
  }
  return [start, start];
}

/** Every .ts file of the repository, relative to `root`, outside generated and vendored folders. */
function sourceFiles(root: string): string[] {
  const skip = new Set(["node_modules", "build", "dist", "runs", "kernels", ".git", ".cache"]);
  const out: string[] = [];
  const walk = (dir: string) => {
    for (const e of Deno.readDirSync(dir)) {
      const path = join(dir, e.name);
      if (e.isDirectory && !skip.has(e.name)) walk(path);
      else if (e.isFile && e.name.endsWith(".ts")) out.push(relative(root, path));
    }
  };
  walk(root);
  return out.sort();
}

interface InfoDependency {
  specifier: string;
  code?: { specifier: string; span: { start: { line: number } } };
  type?: { specifier: string; span: { start: { line: number } } };
  isDynamic?: boolean;
}

/**
 * The import edges among `files` (paths relative to `root`), read by Deno's
 * own module graph from a temporary module that imports them all; `bare`
 * receives the imports written as a bare `import "…"`.
 */
async function importGraph(
  root: string,
  files: readonly string[],
  config?: string,
): Promise<{ edges: Edge[]; bare: Edge[] }> {
  const tmp = Deno.makeTempDirSync({ prefix: "dtrain-import-graph-" });
  try {
    const entry = join(tmp, "all.ts");
    Deno.writeTextFileSync(
      entry,
      files.map((f) => `import ${JSON.stringify(pathToFileURL(join(root, f)).href)};\n`).join(""),
    );
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["info", "--json", ...(config ? ["--config", config] : []), entry],
      cwd: root,
      stdout: "piped",
      stderr: "piped",
    }).output();
    const text = new TextDecoder().decode(out.stdout);
    assert.equal(out.code, 0, `deno info failed: ${new TextDecoder().decode(out.stderr)}`);
    const graph = JSON.parse(text) as {
      modules: { specifier: string; error?: string; dependencies?: InfoDependency[] }[];
    };
    const inRepo = (url: string) =>
      url.startsWith("file:") && !fileURLToPath(url).startsWith(tmp)
        ? relative(root, fileURLToPath(url))
        : null;
    const edges: Edge[] = [], bare: Edge[] = [];
    for (const m of graph.modules) {
      const from = inRepo(m.specifier);
      if (from === null || from.startsWith("..")) continue;
      if (m.error) throw new Error(`deno info cannot read ${from}: ${m.error}`);
      const lines = Deno.readTextFileSync(join(root, from)).split("\n");
      for (const d of m.dependencies ?? []) {
        const target = d.code ?? d.type;
        if (!target) continue;
        const to = inRepo(target.specifier);
        if (to === null || to.startsWith("..")) continue;
        const line = target.span.start.line;
        const edge = { from, to, typeOnly: !d.code, dynamic: d.isDynamic === true, line: line + 1 };
        edges.push(edge);
        if (/^\s*import\s*["']/.test(lines[line] ?? "")) bare.push(edge);
      }
    }
    return { edges, bare };
  } finally {
    Deno.removeSync(tmp, { recursive: true });
  }
}

let repoGraph: Promise<{ edges: Edge[]; bare: Edge[] }> | null = null;
/** The repository's import graph, read once for this file's tests. */
function repositoryGraph(): Promise<{ edges: Edge[]; bare: Edge[] }> {
  repoGraph ??= importGraph(REPO, sourceFiles(REPO), join(REPO, "deno.json"));
  return repoGraph;
}

Deno.test("the library never imports a tool, and each library folder only lower layers", async () => {
  const { edges } = await repositoryGraph();
  assert.ok(edges.length > 500, `only ${edges.length} imports found: the graph was not read`);
  const problems = layerViolations(edges);
  assert.deepEqual(problems, [], `layer rules broken:\n${problems.join("\n")}`);
});

Deno.test("each tool imports only lower tools (the order of TOOL_LAYERS)", async () => {
  const { edges } = await repositoryGraph();
  const problems = toolOrderViolations(edges);
  assert.deepEqual(problems, [], `tool order broken:\n${problems.join("\n")}`);
});

Deno.test("no library module is imported for its side effects alone (no registration by import)", async () => {
  const { bare } = await repositoryGraph();
  const found = bare.filter((e) => libraryFolder(e.to) !== null).map(where);
  assert.deepEqual(found, [], `bare imports of library modules:\n${found.join("\n")}`);
});

Deno.test("no library file reads dtrain check's variables (DTRAIN_CHECK_*)", () => {
  const found = sourceFiles(REPO)
    .filter((f) => libraryFolder(f) !== null)
    .filter((f) => Deno.readTextFileSync(join(REPO, f)).includes("DTRAIN_CHECK_"));
  assert.deepEqual(found, [], "the check sets the library's settings from above instead");
});

Deno.test("no chain of runtime imports comes back to where it started", async () => {
  const { edges } = await repositoryGraph();
  const circles = runtimeCircles(edges);
  assert.deepEqual(
    circles,
    [],
    `import circles:\n${circles.map((c) => c.join(" -> ")).join("\n")}`,
  );
});

Deno.test("the checks see static, re-exported and dynamic imports and report each rule", async () => {
  const root = Deno.makeTempDirSync({ prefix: "dtrain-arch-fixture-" });
  try {
    const files: Record<string, string> = {
      "tensor/a.ts": `export const a = () => import("../check/probe.ts");\n`,
      "tensor/b.ts": `export { c } from "../nn/c.ts";\nimport type { T } from "./t.ts";\n` +
        `export type U = T;\n`,
      "tensor/t.ts": `import type { U } from "./b.ts";\nexport type T = U | 1;\n`,
      "nn/c.ts": `import "../tensor/b.ts";\nexport const c = 1;\n`,
      "check/probe.ts": `export const p = 1;\n`,
    };
    for (const [path, text] of Object.entries(files)) {
      Deno.mkdirSync(join(root, path, ".."), { recursive: true });
      Deno.writeTextFileSync(join(root, path), text);
    }
    const { edges, bare } = await importGraph(root, Object.keys(files).sort());
    const dynamic = edges.find((e) => e.from === "tensor/a.ts")!;
    assert.equal(dynamic.dynamic, true);
    assert.deepEqual(layerViolations(edges).sort(), [
      "tensor/a.ts:1 imports check/probe.ts: the library (tensor/) never imports a tool (check/)",
      "tensor/b.ts:1 imports nn/c.ts: tensor/ (layer 2) may import only lower layers, nn/ is layer 3",
    ]);
    assert.deepEqual(bare.map(where), ["nn/c.ts:1 imports tensor/b.ts"]);
    // b -> c is a re-export and c -> b a bare import: a runtime circle. b <-> t is type-only: none.
    assert.deepEqual(runtimeCircles(edges), [["nn/c.ts", "tensor/b.ts", "nn/c.ts"]]);
  } finally {
    Deno.removeSync(root, { recursive: true });
  }
});

Deno.test("the tool order forbids the three climbs it replaced, and allows imports down the order", async () => {
  const root = Deno.makeTempDirSync({ prefix: "dtrain-arch-tools-" });
  try {
    const files: Record<string, string> = {
      // the three climbs: the checker into the launcher's type check, the doctor into the single
      // file's manifest, the single file's rank entry into the launcher's bootstrap
      "check/main.ts": `import { t } from "../launch/type_check.ts";\nexport const m = t;\n`,
      "launch/type_check.ts": `export const t = 1;\n`,
      "launch/doctor.ts": `import { c } from "../single_file/manifest.ts";\n` +
        `import { e } from "../check/env.ts";\nexport const f = c + e;\n`,
      "single_file/manifest.ts": `export const c = 1;\n`,
      "single_file/rank_entry.ts": `await import("../launch/rank_main.ts");\n`,
      "launch/rank_main.ts": `import { r } from "../run_record/format.ts";\nexport const x = r;\n`,
      // allowed: each goes down the order, and the single file's entry starts cli.ts
      "check/env.ts": `import { s } from "../train/engine.ts";\nexport const e = s;\n`,
      "train/engine.ts": `import { r } from "../run_record/format.ts";\nexport const s = r;\n`,
      "run_record/format.ts": `export const r = 1;\n`,
      "record_tools/rerun.ts": `import { x } from "../launch/rank_main.ts";\nexport const y = x;\n`,
      "cli.ts": `export const main = () => import("./record_tools/rerun.ts");\n`,
      "single_file/entry.ts": `import { main } from "../cli.ts";\nawait main();\n`,
    };
    for (const [path, text] of Object.entries(files)) {
      Deno.mkdirSync(join(root, path, ".."), { recursive: true });
      Deno.writeTextFileSync(join(root, path), text);
    }
    const { edges } = await importGraph(root, Object.keys(files).sort());
    assert.deepEqual(toolOrderViolations(edges).sort(), [
      "check/main.ts:1 imports launch/type_check.ts: the tool check (layer 2) may import only " +
      "lower tools, launch is layer 3",
      "launch/doctor.ts:1 imports single_file/manifest.ts: the tool launch (layer 3) may " +
      "import only lower tools, single_file is layer 6",
      "single_file/rank_entry.ts:1 imports launch/rank_main.ts: single_file/ packs the command " +
      "through cli.ts, not launch's parts",
    ]);
  } finally {
    Deno.removeSync(root, { recursive: true });
  }
});

/** The process-group family (docs/DESIGN.md, "Process groups"): the backends' folder. */
const BACKENDS = "distributed/backends/";
/** The one library file that opens backends. */
const BACKEND_OPENER = "distributed/init_process_group.ts";
/** Backend files the rest of the library may import: the interface's buffer types. */
const BACKEND_FILES_SHARED = ["distributed/backends/collective_buffer.ts"];
/** What a backend may import of distributed/ outside its folder (besides control/). */
const BACKENDS_SEE = ["distributed/process_group.ts", "distributed/pg_config.ts"];

/**
 * Every import that breaks the process-group family's shape: a library file
 * reaches a backend only through initProcessGroup, and a backend sees of
 * distributed/ only the interface, the settings and the control plane, never
 * the group's users (DDP, ZeRO, stop signals). Tests and scripts may open a
 * backend directly.
 */
function processGroupFamilyViolations(edges: readonly Edge[]): string[] {
  const out: string[] = [];
  for (const e of edges) {
    if (libraryFolder(e.from) === null) continue;
    const fromBackend = e.from.startsWith(BACKENDS), toBackend = e.to.startsWith(BACKENDS);
    if (
      !fromBackend && toBackend && e.from !== BACKEND_OPENER &&
      !BACKEND_FILES_SHARED.includes(e.to)
    ) {
      out.push(
        `${where(e)}: a backend is reached only through initProcessGroup (${BACKEND_OPENER})`,
      );
    } else if (
      fromBackend && !toBackend && e.to.startsWith("distributed/") &&
      !e.to.startsWith("distributed/control/") && !BACKENDS_SEE.includes(e.to)
    ) {
      out.push(
        `${where(e)}: a backend sees of distributed/ only ${BACKENDS_SEE.join(", ")} and control/`,
      );
    }
  }
  return out;
}

Deno.test("backends are opened only by initProcessGroup and see only the interface above them", async () => {
  const { edges } = await repositoryGraph();
  assert.ok(edges.some((e) => e.from === BACKEND_OPENER && e.to.startsWith(BACKENDS)));
  const problems = processGroupFamilyViolations(edges);
  assert.deepEqual(problems, [], `process-group family broken:\n${problems.join("\n")}`);
});

Deno.test("the process-group family rule reports a library file opening a backend and a backend using DDP", () => {
  const edge = (from: string, to: string): Edge => ({
    from,
    to,
    typeOnly: false,
    dynamic: false,
    line: 1,
  });
  assert.deepEqual(
    processGroupFamilyViolations([
      edge("distributed/ddp.ts", "distributed/backends/shm_backend.ts"),
      edge("distributed/backends/gloo_backend.ts", "distributed/zero.ts"),
      // allowed: the opener, the interface's buffer types, the interface, control/, tests
      edge(BACKEND_OPENER, "distributed/backends/nccl_backend.ts"),
      edge("distributed/process_group.ts", "distributed/backends/collective_buffer.ts"),
      edge("distributed/backends/shm_backend.ts", "distributed/process_group.ts"),
      edge("distributed/backends/shm_backend.ts", "distributed/control/phase.ts"),
      edge("tests/distributed/process_group_test.ts", "distributed/backends/shm_backend.ts"),
    ]),
    [
      "distributed/ddp.ts:1 imports distributed/backends/shm_backend.ts: a backend is reached " +
      "only through initProcessGroup (distributed/init_process_group.ts)",
      "distributed/backends/gloo_backend.ts:1 imports distributed/zero.ts: a backend sees of " +
      "distributed/ only distributed/process_group.ts, distributed/pg_config.ts and control/",
    ],
  );
});
