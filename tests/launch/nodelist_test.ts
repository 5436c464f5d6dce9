/**
 * Slurm's host-list grammar: ranges, padding, several groups and items, the
 * first host and count without expansion, clear errors; fuzzed (every input
 * either parses consistently or is a NodelistError, in bounded time).
 */
import assert from "node:assert/strict";
import {
  expandNodelist,
  firstHost,
  hostCount,
  MAX_NODELIST_CHARS,
  NodelistError,
} from "../../launch/nodelist.ts";

Deno.test("host lists expand as Slurm's do; the first host and the count need no expansion", () => {
  const cases: [string, string[]][] = [
    ["gpu01", ["gpu01"]],
    ["gpu[01-04,07]", ["gpu01", "gpu02", "gpu03", "gpu04", "gpu07"]],
    ["a[1-2],b3", ["a1", "a2", "b3"]],
    ["n[8-11]", ["n8", "n9", "n10", "n11"]],
    ["n[098-101]", ["n098", "n099", "n100", "n101"]],
    ["rack[1-2]-n[01-02]", ["rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"]],
    ["x[0]", ["x0"]],
    ["[3-4]node", ["3node", "4node"]],
    ["host-a.example.org,host-b", ["host-a.example.org", "host-b"]],
  ];
  for (const [list, hosts] of cases) {
    assert.deepEqual(expandNodelist(list), hosts, list);
    assert.equal(firstHost(list), hosts[0], list);
    assert.equal(hostCount(list), hosts.length, list);
  }
  // a list of 10^12 hosts is counted and its first host found without expanding it
  assert.equal(hostCount("n[000000-999999]-[000000-999999]"), 1e12);
  assert.equal(firstHost("n[000000-999999]-[000000-999999]"), "n000000-000000");
  assert.throws(
    () => expandNodelist("n[1-100000]"),
    /names 100000 hosts, more than the 65536 expanded/,
  );
});

Deno.test("a malformed host list is a clear error naming the list and the fault", () => {
  const bad: [string, RegExp][] = [
    ["", /is empty/],
    ["gpu[01-04", /a "\[" is not closed/],
    ["gpu01-04]", /"\]" without "\[" at character 9/],
    ["gpu[[1]]", /nested "\[" at character 5/],
    ["gpu[]", /empty brackets/],
    ["gpu[4-1]", /range 4-1 runs backwards/],
    ["gpu[a-b]", /"a-b" in brackets is not a number/],
    ["gpu[1-]", /"1-" in brackets is not a number/],
    ["a,,b", /an empty host name/],
    ["a,", /an empty host name/],
    ["gpu 01", /"gpu 01" holds a character a host name cannot have/],
    ["x".repeat(MAX_NODELIST_CHARS + 1), /longer than 65536 characters/],
  ];
  for (const [list, why] of bad) {
    for (const f of [expandNodelist, firstHost, hostCount]) {
      assert.throws(
        () => f(list),
        (e: Error) => e instanceof NodelistError && why.test(e.message),
        list,
      );
    }
  }
});

Deno.test("host lists fuzzed: parsed consistently or refused with a NodelistError, in bounded time", () => {
  let s = 2024;
  const next = () => (s = (s * 1103515245 + 12345) & 0x7fffffff);
  const alphabet = ["a", "gpu", "0", "1", "07", "9", "-", ",", "[", "]", ".", " ", "_", "x"];
  const started = performance.now();
  let ok = 0, refused = 0;
  for (let i = 0; i < 20_000; i++) {
    const list = Array.from({ length: 1 + (next() % 14) }, () => alphabet[next() % alphabet.length])
      .join("");
    try {
      const hosts = expandNodelist(list, 4096);
      assert.equal(hosts.length, hostCount(list), list);
      assert.equal(hosts[0], firstHost(list), list);
      assert.ok(hosts.every((h) => /^[A-Za-z0-9._-]+$/.test(h)), list);
      ok++;
    } catch (e) {
      if (!(e instanceof NodelistError)) throw new Error(`${JSON.stringify(list)}: ${e}`);
      assert.match(e.message, /^host list "/);
      refused++;
    }
  }
  assert.ok(ok > 1000 && refused > 1000, `${ok} parsed, ${refused} refused`);
  assert.ok(performance.now() - started < 60_000);
});
