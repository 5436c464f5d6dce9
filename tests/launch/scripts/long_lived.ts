/**
 * Test rank script: lives longer than the 10 s after which Deno's idle
 * worker threads exit (a rank whose PDEATHSIG were tied to such a thread
 * would be killed), then exits 0. Args: <seconds>.
 */
const seconds = Number(Deno.args[0] ?? "11.5");
await new Promise((r) => setTimeout(r, seconds * 1000));
console.log(`rank ${Deno.env.get("RANK")} lived ${seconds} s`);
