// A lab test in JavaScript with nothing but Node's built-ins (node:test, fetch, child_process):
// what a team whose tests are not in Python writes from docs/lab.md alone. `make test` runs it
// (scripts/lab-test-node BIN_DIR). It starts the lab on a free port, reads its token, and
// checks: a kill reaches three devices at their next periodic refresh; an outage of one device
// leaves the others refreshing; flags kept past 24 h expire (served at 23 h 59 min, gone at
// 24 h 01 min); a restart with SIGKILL comes back on the stored flags.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, openSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";

const bin = process.env.PUSHWOOSH_BIN;
if (!bin) throw new Error("PUSHWOOSH_BIN: the directory of pushwoosh-emulator and pushwoosh-agentd");
const root = resolve(new URL(".", import.meta.url).pathname, "..");

let emulator, base, token, dir;

// Starts the lab and resolves once it has said where its token is and where it listens.
function startLab() {
  dir = mkdtempSync(join(tmpdir(), "lab-node-"));
  emulator = spawn(join(bin, "pushwoosh-emulator"),
    ["--listen", "127.0.0.1:0", "--apps", join(root, "config/flags.example.json"), "--lab", join(dir, "lab")],
    { stdio: ["ignore", "pipe", openSync(join(dir, "emulator.log"), "w")] });
  return new Promise((ok, fail) => {
    let tokenFile;
    const lines = createInterface({ input: emulator.stdout });
    lines.on("line", (line) => {
      if (line.startsWith("lab token: ")) tokenFile = line.slice("lab token: ".length);
      if (line.startsWith("listening on ")) {
        base = "http://" + line.slice("listening on ".length);
        token = readFileSync(tokenFile, "utf8").trim();
        ok();
      }
    });
    emulator.on("exit", (code) => fail(new Error(`the emulator exited (${code}) before listening`)));
  });
}

// One lab or admin call: the status and the parsed answer.
async function call(method, path, body) {
  const answer = await fetch(base + path, {
    method,
    headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: answer.status, json: await answer.json() };
}

async function ok(method, path, body) {
  const { status, json } = await call(method, path, body);
  assert.ok(status >= 200 && status < 300, `${method} ${path}: ${status} ${JSON.stringify(json)}`);
  return json;
}

const get = async (name, key) => (await ok("POST", `/lab/devices/${name}/call`, { method: "get", params: { key } })).result;
const device = (name) => ok("GET", `/lab/devices/${name}`);

before(startLab);
after(async () => {
  if (emulator.exitCode === null) {
    const exited = new Promise((done) => emulator.on("exit", done));
    emulator.kill("SIGTERM");
    await exited;
  }
  rmSync(dir, { recursive: true, force: true });
});

test("the lab is locked: 401 without its token", async () => {
  const answer = await fetch(base + "/lab/devices");
  assert.equal(answer.status, 401);
});

test("a kill reaches three devices at their next periodic refresh", async () => {
  const started = await ok("POST", "/lab/devices", { count: 3, name: "qa", config: { Agent: { UserId: "user-{n}" } } });
  assert.deepEqual(started.devices.map((d) => d.name), ["qa-0", "qa-1", "qa-2"]);
  await ok("POST", "/admin/apps/ABCDE-12345/flags/new_checkout/kill");
  const advanced = await ok("POST", "/lab/advance", { until: "nextRefresh" });
  assert.deepEqual(advanced.skipped, []);
  for (const name of ["qa-0", "qa-1", "qa-2"]) {
    assert.ok(advanced.fired[name].some((e) => e.event === "refresh" && e.trigger === "periodic"), name);
    assert.equal((await get(name, "new_checkout")).reason, "DISABLED", name);
  }
});

test("an outage of one device: the others see the unkill, it keeps what it had", async () => {
  const armed = await ok("POST", "/admin/faults", { device: "qa-1", method: "getFeatureFlags", drop: true, forSeconds: 7200 });
  assert.equal(armed.armed.hwid, (await device("qa-1")).hwid);
  await ok("POST", "/admin/apps/ABCDE-12345/flags/new_checkout/unkill");
  await ok("POST", "/lab/advance", { until: "nextRefresh" });
  for (const name of ["qa-0", "qa-2"]) assert.notEqual((await get(name, "new_checkout")).reason, "DISABLED", name);
  assert.equal((await get("qa-1", "new_checkout")).reason, "DISABLED", "qa-1 is offline: its flags are the last it got");
  await ok("DELETE", "/admin/faults");
});

test("flags kept past 24 hours expire: served at 23 h 59 min, gone at 24 h 01 min", async () => {
  await ok("POST", "/lab/devices/qa-2/call", { method: "setAppState", params: { state: "background" } });
  const age = (await device("qa-2")).lastRefreshAgeSeconds;
  await ok("POST", "/lab/advance", { seconds: 24 * 3600 - 60 - age });
  assert.ok((await device("qa-2")).flagsCount > 0, "still served a minute before 24 h");
  await ok("POST", "/lab/advance", { seconds: 120 });
  assert.equal((await device("qa-2")).flagsCount, 0, "none a minute after 24 h");
});

test("a restart with SIGKILL comes back on its stored flags", async () => {
  const before = await device("qa-0");
  await ok("POST", "/admin/faults", { device: "qa-0", method: "getFeatureFlags", drop: true, forSeconds: 3600 });
  const restarted = await ok("POST", "/lab/devices/qa-0/restart", { signal: "KILL" });
  assert.notEqual(restarted.pid, before.pid);
  assert.equal(restarted.hwid, before.hwid);
  assert.ok(restarted.flagsCount > 0, "served from the cache while the server is unreachable");
  assert.equal(restarted.flagsSource, "cache");
  const served = await get("qa-0", "new_checkout");
  assert.equal(served.flag.key, "new_checkout", JSON.stringify(served));
});

test("mistakes are the caller's: a 400 naming the key, nothing started", async () => {
  const { status, json } = await call("POST", "/lab/devices", { name: "bad", config: { Agent: { NoSuchKey: 1 } } });
  assert.equal(status, 400);
  assert.equal(json.path, "config.Agent.NoSuchKey");
  assert.equal((await call("GET", "/lab/devices/bad")).status, 404);
});
