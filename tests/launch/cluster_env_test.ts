/**
 * The launcher under Slurm, Open MPI, MPICH/Hydra and PMIx, with the
 * environment each sets: node rank, node count, rendezvous host and GPUs come
 * without flags, explicit flags win where they may, contradictions are
 * errors (exit 2 from the command line), and a plain shell is untouched.
 */
import assert from "node:assert/strict";
import { type LaunchOptions, parseLaunchArgs } from "../../launch/options.ts";
import { clusterEnvLine, slurmGpus } from "../../launch/cluster_env.ts";

const TOKEN = { DTRAIN_RDZV_TOKEN_FILE: "/dev/null/token" };

/** srun's variables for node `id` of a job on gpu[01-04,07]-style hosts. */
function slurm(id: number, extra: Record<string, string> = {}): Record<string, string> {
  return {
    SLURM_JOB_ID: "4242",
    SLURM_STEP_ID: "0",
    SLURM_NODEID: String(id),
    SLURM_NNODES: "4",
    SLURM_JOB_NODELIST: "gpu[01-03,07]",
    SLURM_NTASKS: "4",
    SLURM_LOCALID: "0",
    SLURM_GPUS_ON_NODE: "8",
    CUDA_VISIBLE_DEVICES: "0,1,2,3,4,5,6,7",
    ...TOKEN,
    ...extra,
  };
}

function parse(args: string[], vars: Record<string, string>): LaunchOptions {
  const r = parseLaunchArgs([...args, "run.ts"], (n) => vars[n]);
  assert.notEqual(r, "help");
  return r as LaunchOptions;
}

Deno.test("srun: node rank, node count, the list's first host and the GPUs, with no flag", () => {
  const o = parse([], slurm(2));
  assert.equal(o.nodeRank, 2);
  assert.equal(o.nnodes, 4);
  assert.equal(o.masterAddr, "gpu01");
  assert.equal(o.nproc, 8);
  assert.equal(o.rdzvTokenFile, "/dev/null/token");
  assert.match(o.cluster!, /^Slurm job 4242 step 0: node 2 of 4, rendezvous host gpu01/);
  // the step's own list and count win over the job's (srun -N2 inside a 4-node allocation)
  const step = parse(
    [],
    slurm(1, {
      SLURM_STEP_NUM_NODES: "2",
      SLURM_STEP_NODELIST: "gpu[03,07]",
      SLURM_STEP_NUM_TASKS: "2",
    }),
  );
  assert.deepEqual([step.nnodes, step.nodeRank, step.masterAddr], [2, 1, "gpu03"]);
});

Deno.test("srun: GPUs from SLURM_GPUS_ON_NODE, SLURM_GPUS_PER_NODE, else CUDA_VISIBLE_DEVICES", () => {
  const gpus = (vars: Record<string, string>) => slurmGpus((n) => vars[n]).gpus;
  assert.equal(gpus({ SLURM_GPUS_ON_NODE: "4", SLURM_GPUS_PER_NODE: "8" }), 4);
  assert.equal(gpus({ SLURM_GPUS_PER_NODE: "a100:4" }), 4);
  assert.equal(gpus({ SLURM_GPUS_PER_NODE: "a100:2,v100:1" }), 3);
  assert.equal(gpus({ SLURM_GPUS_PER_NODE: "gpu:h100:8(IDX:0-7)" }), 8);
  assert.equal(gpus({ CUDA_VISIBLE_DEVICES: "2,3" }), 2);
  assert.equal(gpus({}), null);
  assert.throws(
    () => gpus({ SLURM_GPUS_PER_NODE: "a100:many" }),
    /"a100:many" is not \[type:\]count/,
  );
  const noGpu = parse([], slurm(0, { SLURM_GPUS_ON_NODE: "", CUDA_VISIBLE_DEVICES: "" }));
  assert.equal(noGpu.nproc, 1, "no GPUs given: --nproc keeps its default");
});

Deno.test("explicit flags win where they may; a contradiction is a clear error", () => {
  const o = parse([
    "--nproc",
    "2",
    "--master-addr",
    "gpu01-ib",
    "--master-port",
    "29600",
    "--nnodes",
    "4",
    "--node-rank",
    "3",
  ], slurm(3));
  assert.deepEqual([o.nproc, o.masterAddr, o.masterPort, o.nnodes, o.nodeRank], [
    2,
    "gpu01-ib",
    29600,
    4,
    3,
  ]);
  const bad: [string[], Record<string, string>, RegExp][] = [
    [
      ["--nnodes", "2"],
      slurm(0),
      /--nnodes 2 contradicts Slurm job 4242 step 0, which runs on 4 node\(s\) \(SLURM_NODEID, SLURM_NNODES, SLURM_JOB_NODELIST\)/,
    ],
    [
      ["--node-rank", "0"],
      slurm(1),
      /--node-rank 0 contradicts Slurm job 4242 step 0, which says this is node 1/,
    ],
    [
      [],
      slurm(0, { SLURM_NTASKS: "32" }),
      /srun started 32 tasks on 4 node\(s\); dtrain runs one launcher per node.*--ntasks-per-node=1/,
    ],
    [
      [],
      slurm(0, { SLURM_JOB_NODELIST: "gpu[01-02]" }),
      /SLURM_JOB_NODELIST=gpu\[01-02\] names 2 host\(s\) but SLURM_NNODES=4/,
    ],
    [[], slurm(5), /SLURM_NODEID=5 is not below SLURM_NNODES=4/],
    [
      [],
      slurm(0, { SLURM_JOB_NODELIST: "gpu[01-04" }),
      /host list "gpu\[01-04": a "\[" is not closed/,
    ],
    [[], slurm(0, { SLURM_NNODES: "four" }), /SLURM_NNODES="four" is not an integer >= 1/],
    [
      [],
      { ...slurm(1), DTRAIN_RDZV_TOKEN_FILE: "" },
      /--nnodes > 1 needs the run's shared secret.*DTRAIN_RDZV_TOKEN_FILE/,
    ],
  ];
  for (const [args, vars, why] of bad) assert.throws(() => parse(args, vars), why, args.join(" "));
});

Deno.test("a batch script or a plain shell: Slurm's job variables alone change nothing", () => {
  const batch = slurm(0);
  delete (batch as Record<string, string | undefined>).SLURM_STEP_ID;
  const o = parse([], batch);
  assert.deepEqual([o.nnodes, o.nodeRank, o.masterAddr, o.nproc, o.cluster], [
    1,
    0,
    "127.0.0.1",
    1,
    undefined,
  ]);
  for (const step of ["extern", "batch", "interactive"]) {
    assert.equal(parse([], slurm(1, { SLURM_STEP_ID: step })).nnodes, 1, step);
  }
  const plain = parse([], {});
  assert.equal(plain.cluster, undefined);
  const off = parse([], { ...slurm(2), DTRAIN_CLUSTER_ENV: "off" });
  assert.equal(off.nnodes, 1);
  assert.match(clusterEnvLine(() => undefined), /^none \(a plain shell/);
});

Deno.test("Open MPI, MPICH/Hydra and PMIx: rank and size from their variables, the host from MASTER_ADDR", () => {
  const ompi = parse([], {
    OMPI_COMM_WORLD_RANK: "1",
    OMPI_COMM_WORLD_SIZE: "2",
    OMPI_COMM_WORLD_LOCAL_SIZE: "1",
    MASTER_ADDR: "node-a",
    ...TOKEN,
  });
  assert.deepEqual([ompi.nodeRank, ompi.nnodes, ompi.masterAddr, ompi.nproc], [1, 2, "node-a", 1]);
  assert.match(
    ompi.cluster!,
    /^Open MPI \(mpirun\): node 1 of 2, rendezvous host node-a \(MASTER_ADDR\)/,
  );
  const mpich = parse(["--nproc", "4"], {
    PMI_RANK: "0",
    PMI_SIZE: "3",
    MASTER_ADDR: "10.0.0.5",
    ...TOKEN,
  });
  assert.deepEqual([mpich.nodeRank, mpich.nnodes, mpich.masterAddr, mpich.nproc], [
    0,
    3,
    "10.0.0.5",
    4,
  ]);
  const pmix = parse(["--nnodes", "2"], { PMIX_RANK: "1", MASTER_ADDR: "h0", ...TOKEN });
  assert.deepEqual([pmix.nodeRank, pmix.nnodes], [1, 2]);
  // srun --mpi=pmix sets both: the Slurm step wins
  const both = parse([], { ...slurm(1), PMIX_RANK: "17" });
  assert.equal(both.nodeRank, 1);
  const single = parse([], { OMPI_COMM_WORLD_RANK: "0", OMPI_COMM_WORLD_SIZE: "1" });
  assert.deepEqual([single.nnodes, single.masterAddr], [1, "127.0.0.1"]);
  const bad: [string[], Record<string, string>, RegExp][] = [
    [
      [],
      { OMPI_COMM_WORLD_RANK: "0", OMPI_COMM_WORLD_SIZE: "2", ...TOKEN },
      /Open MPI \(mpirun\) does not say which host runs node 0: set MASTER_ADDR.*or give --master-addr/,
    ],
    [[], {
      OMPI_COMM_WORLD_RANK: "0",
      OMPI_COMM_WORLD_SIZE: "8",
      OMPI_COMM_WORLD_LOCAL_SIZE: "4",
      MASTER_ADDR: "a",
      ...TOKEN,
    }, /started 4 processes on this node \(OMPI_COMM_WORLD_LOCAL_SIZE\).*--map-by ppr:1:node/],
    [
      [],
      { PMIX_RANK: "0" },
      /PMIx gives this node's rank \(PMIX_RANK\) but not the node count: give --nnodes/,
    ],
    [
      ["--nnodes", "3"],
      { PMI_RANK: "0", PMI_SIZE: "2", MASTER_ADDR: "a", ...TOKEN },
      /--nnodes 3 contradicts MPICH\/Hydra \(mpiexec\), which runs on 2 node/,
    ],
  ];
  for (const [args, vars, why] of bad) assert.throws(() => parse(args, vars), why);
});

Deno.test("the command line: a contradiction exits 2 with the reason; doctor names the environment", () => {
  const run = (args: string[], vars: Record<string, string>) => {
    const r = new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", "cli.ts", ...args],
      env: { DTRAIN_CUDA: "0", ...vars },
    }).outputSync();
    return {
      code: r.code,
      out: new TextDecoder().decode(r.stdout),
      err: new TextDecoder().decode(r.stderr),
    };
  };
  const r = run(["--nnodes", "2", "examples/toy_ddp.ts"], slurm(0));
  assert.equal(r.code, 2, r.err);
  assert.match(r.err, /--nnodes 2 contradicts Slurm job 4242 step 0, which runs on 4 node/);
  const d = run(["doctor"], slurm(1, { SLURM_GPUS_ON_NODE: "2" }));
  assert.match(
    d.out,
    /launcher env\s+Slurm job 4242 step 0: node 1 of 4, rendezvous host gpu01 \(the first host of SLURM_JOB_NODELIST\), 2 GPU\(s\) given/,
  );
});
