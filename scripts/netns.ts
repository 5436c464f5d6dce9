/**
 * Two simulated hosts for the multi-node tests and benchmarks: two network namespaces
 * joined by a veth pair (each end named "dtrain0" inside its namespace, with
 * 10.77.0.1 and 10.77.0.2), so traffic between them leaves neither
 * namespace's loopback. Needs root and iproute2; `netnsProblem()` says why
 * not otherwise. `removeHosts()` kills what still runs inside and deletes
 * both namespaces (and with them the veth pair).
 */

/** Two namespaces and how to run a command in each. */
export interface TwoHosts {
  names: readonly [string, string];
  addrs: readonly [string, string];
  /** the veth end's name inside each namespace */
  iface: string;
  /** command prefix that runs a program inside namespace i */
  prefix(i: 0 | 1): string[];
}

function ip(args: string[]): { ok: boolean; out: string } {
  try {
    const r = new Deno.Command("ip", { args, stdout: "piped", stderr: "piped" }).outputSync();
    const out = new TextDecoder().decode(r.success ? r.stdout : r.stderr).trim();
    return { ok: r.success, out };
  } catch (e) {
    return { ok: false, out: (e as Error).message };
  }
}

let counter = 0;

/** Why two namespaces cannot be made here, or null when they can (tried once, then cached). */
export const netnsProblem: () => string | null = (() => {
  let answer: string | null | undefined;
  return () => {
    if (answer !== undefined) return answer;
    if (Deno.uid() !== 0) return answer = "creating network namespaces needs root";
    const probe = `dtrain-probe-${Deno.pid}`;
    const made = ip(["netns", "add", probe]);
    if (!made.ok) return answer = `\`ip netns add\` failed: ${made.out}`;
    ip(["netns", "del", probe]);
    return answer = null;
  };
})();

/** Creates the two namespaces and the veth pair between them; throws saying which step failed. */
export function makeHosts(): TwoHosts {
  const tag = `${Deno.pid % 100000}x${++counter}`;
  const names = [`dtrain-${tag}-a`, `dtrain-${tag}-b`] as const;
  const addrs = ["10.77.0.1", "10.77.0.2"] as const;
  const ends = [`dtv${tag}a`.slice(0, 15), `dtv${tag}b`.slice(0, 15)];
  const hosts: TwoHosts = {
    names,
    addrs,
    iface: "dtrain0",
    prefix: (i) => ["ip", "netns", "exec", names[i]],
  };
  const steps: string[][] = [
    ["netns", "add", names[0]],
    ["netns", "add", names[1]],
    ["link", "add", ends[0]!, "type", "veth", "peer", "name", ends[1]!],
  ];
  for (const i of [0, 1] as const) {
    steps.push(
      ["link", "set", ends[i]!, "netns", names[i]],
      ["-n", names[i], "link", "set", ends[i]!, "name", hosts.iface],
      ["-n", names[i], "addr", "add", `${addrs[i]}/24`, "dev", hosts.iface],
      ["-n", names[i], "link", "set", hosts.iface, "up"],
      ["-n", names[i], "link", "set", "lo", "up"],
    );
  }
  for (const step of steps) {
    const r = ip(step);
    if (!r.ok) {
      removeHosts(hosts);
      ip(["link", "del", ends[0]!]);
      throw new Error(`Cannot set up the two hosts: \`ip ${step.join(" ")}\` failed: ${r.out}`);
    }
  }
  return hosts;
}

/** Bytes sent so far through the veth end of host i. */
export function sentBytes(hosts: TwoHosts, i: 0 | 1): number {
  const r = ip(["-n", hosts.names[i], "-s", "-j", "link", "show", hosts.iface]);
  if (!r.ok) {
    throw new Error(`Cannot read ${hosts.iface}'s counters in ${hosts.names[i]}: ${r.out}`);
  }
  const [link] = JSON.parse(r.out) as { stats64: { tx: { bytes: number } } }[];
  return link!.stats64.tx.bytes;
}

/** Kills whatever still runs inside the namespaces (only this test's processes) and deletes them. */
export function removeHosts(hosts: TwoHosts): void {
  for (const name of hosts.names) {
    const pids = ip(["netns", "pids", name]);
    for (const pid of pids.ok ? pids.out.split(/\s+/).filter(Boolean) : []) {
      try {
        Deno.kill(Number(pid), "SIGKILL");
      } catch { /* already gone */ }
    }
    ip(["netns", "del", name]);
  }
}
