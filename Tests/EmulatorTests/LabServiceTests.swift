import AgentCore
import AgentPosix
import Foundation
import Glibc
import HarnessSupport
import Testing

/// docs/lab.md M against the real binaries: `pushwoosh-emulator --lab DIR` starts,
/// attaches, lists, calls, restarts and stops devices, moves them with one clock, names what it
/// could not move, resets, locks with the admin token, and leaves no device behind.
@Suite(.serialized) struct LabServiceTests {
    struct Lab {
        let dir = TempDir()
        let emulator: EmulatorProcess

        init(arguments: [String] = []) throws {
            emulator = try EmulatorProcess(arguments: ["--lab", dir.path + "/lab"] + arguments)
        }

        func call(_ method: String, _ path: String, _ body: String? = nil) -> (status: Int, json: JSONValue) {
            let (status, text) = emulator.admin(method, path, body)
            return (status, (try? JSONReader.parse(text)) ?? .null)
        }

        func devicePIDs() -> [pid_t] {
            call("GET", "/lab/devices").json["devices"]?.arrayValue?.compactMap { $0["pid"]?.numberValue.map { pid_t($0) } } ?? []
        }
    }

    // M: devices started ready, listed in their own time; until: nextRefresh moves each to
    // its periodic refresh (whatever its RF-12 phase); the kill is then served everywhere.
    @Test func startAdvanceToTheNextRefreshAndCall() throws {
        let lab = try Lab()
        let started = lab.call("POST", "/lab/devices", #"{"count":3,"name":"qa","config":{"Agent":{"UserId":"user-{n}"}}}"#)
        #expect(started.status == 201)
        let devices = started.json["devices"]?.arrayValue ?? []
        #expect(devices.map { $0["name"] } == ["qa-0", "qa-1", "qa-2"])
        #expect(devices.map { $0["userId"] } == ["user-0", "user-1", "user-2"])
        #expect(devices.allSatisfy { $0["state"] == "ready" && $0["clock"] == "controlled" && $0["owned"] == true })
        #expect(lab.emulator.admin("POST", "/admin/apps/ABCDE-12345/flags/new_checkout/kill").0 == 200)
        let advanced = lab.call("POST", "/lab/advance", #"{"until":"nextRefresh"}"#)
        #expect(advanced.status == 200)
        #expect(advanced.json["skipped"] == .array([]))
        for name in ["qa-0", "qa-1", "qa-2"] {
            let fired = advanced.json["fired"]?[name]?.arrayValue ?? []
            #expect(fired.contains { $0["event"] == "refresh" && $0["trigger"] == "periodic" }, "\(name): \(fired)")
            let got = lab.call("POST", "/lab/devices/\(name)/call", #"{"method":"get","params":{"key":"new_checkout"}}"#)
            #expect(got.status == 200)
            #expect(got.json["result"]?["reason"] == "DISABLED", "\(name): \(got.json)")
        }
        // Ages in each device's own time: an hour ahead of the host, refreshed minutes ago.
        for device in lab.call("GET", "/lab/devices").json["devices"]?.arrayValue ?? [] {
            let age = device["lastRefreshAgeSeconds"]?.numberValue ?? -1
            #expect(age >= 0 && age < 600, "\(device)")
        }
        // A socket error is relayed as the device answered it.
        let unknown = lab.call("POST", "/lab/devices/qa-0/call", #"{"method":"noSuchMethod"}"#)
        #expect(unknown.status == 200 && unknown.json["error"]?["code"] == -32601)
    }

    // M: an outage for one device of three (a fault scoped by HWID); `skipped` names a device
    // on the system clock and one moved ahead on its own, with the reason.
    @Test func skippedWithReasons() throws {
        let lab = try Lab()
        #expect(lab.call("POST", "/lab/devices", #"{"count":2,"name":"c"}"#).status == 201)
        #expect(lab.call("POST", "/lab/devices", #"{"name":"wall","clock":"system"}"#).status == 201)
        #expect(lab.call("POST", "/lab/devices/c-1/call", #"{"method":"advanceClock","params":{"seconds":600}}"#).status == 200)
        let advanced = lab.call("POST", "/lab/advance", #"{"seconds":60}"#)
        #expect(advanced.status == 200)
        let skipped = advanced.json["skipped"]?.arrayValue ?? []
        #expect(skipped.count == 2, "\(skipped)")
        #expect(skipped.contains { $0["name"] == "wall" && $0["reason"]?.stringValue?.contains("system") == true })
        #expect(skipped.contains { $0["name"] == "c-1" && $0["reason"]?.stringValue?.contains("ahead of the lab") == true })
        #expect(advanced.json["fired"]?["c-0"] != nil)
        // The same for an advance to a time before the device's.
        let labTime = lab.call("GET", "/admin/clock").json["unixTime"]?.numberValue ?? 0
        let until = Date(timeIntervalSince1970: labTime + 60).formatted(.iso8601)
        let toTime = lab.call("POST", "/lab/advance", #"{"until":"\#(until)","devices":["c-1"]}"#)
        #expect(toTime.status == 200 && toTime.json["skipped"]?.arrayValue?.first?["name"] == "c-1", "\(toTime.json)")
        // A device ahead of the lab but not of where the advance ends waits, then moves with it (J).
        let past = lab.call("POST", "/lab/advance", #"{"seconds":1200,"devices":["c-1"]}"#)
        #expect(past.json["skipped"] == .array([]), "\(past.json)")
        let emulatorOffset = lab.call("GET", "/admin/clock").json["offsetSeconds"]?.numberValue ?? 0
        let deviceOffset = lab.call("POST", "/lab/devices/c-1/call", #"{"method":"clock"}"#).json["result"]?["offsetSeconds"]?.numberValue ?? 0
        #expect(abs(emulatorOffset - deviceOffset) < 0.01, "the emulator at \(emulatorOffset), the device at \(deviceOffset)")
        // Only the named devices move.
        let one = lab.call("POST", "/lab/advance", #"{"until":"nextTimer","devices":["c-0"]}"#)
        #expect(one.status == 200 && one.json["steps"] == 1)
        #expect(one.json["fired"]?.objectValue?.keys.sorted() == ["c-0"])
        #expect(lab.call("POST", "/lab/advance", #"{"seconds":60,"devices":["nope"]}"#).status == 404)
    }

    // M: a restart (TERM or KILL) on the same state keeps the HWID, the User ID and the
    // stored flags; the device's log is read; errors as in D.
    @Test func restartOnTheCacheLogsAndErrors() throws {
        let lab = try Lab()
        let first = lab.call("POST", "/lab/devices", #"{"name":"r","config":{"Agent":{"UserId":"alice"}}}"#).json["devices"]?.arrayValue?.first
        for signal in ["KILL", "TERM"] {
            let restarted = lab.call("POST", "/lab/devices/r/restart", #"{"signal":"\#(signal)"}"#)
            #expect(restarted.status == 200)
            #expect(restarted.json["hwid"] == first?["hwid"] && restarted.json["userId"] == "alice")
            #expect(restarted.json["pid"] != first?["pid"])
            #expect(restarted.json["flagsCount"]?.numberValue ?? 0 > 0)
        }
        let log = lab.call("GET", "/lab/devices/r/log?tail=3")
        #expect(log.status == 200 && log.json["lines"]?.arrayValue?.count == 3)
        #expect(lab.call("POST", "/lab/devices", #"{"name":"r"}"#).status == 409)
        #expect(lab.call("GET", "/lab/devices/zz").status == 404)
        // A configuration the daemon refuses is the caller's mistake (LabLockTests has more); a
        // daemon that does not start is a 502; neither stays in the lab.
        let bad = lab.call("POST", "/lab/devices", #"{"name":"b","config":{"FeatureFlags":{"RefreshInterval":"soon"}}}"#)
        #expect(bad.status == 400 && bad.json["path"] == "config.FeatureFlags.RefreshInterval", "\(bad.json)")
        #expect(lab.call("GET", "/lab/devices/b").status == 404, "a device refused is not in the lab")
        let dead = lab.call("POST", "/lab/devices", #"{"name":"b","agentd":"/bin/false"}"#)
        #expect(dead.status == 502, "a daemon that exits at once: \(dead.json)")
        #expect(dead.json["error"]?.stringValue?.contains("did not start") == true)
        #expect(lab.call("GET", "/lab/devices/b").status == 404, "a device that did not start is not in the lab")
        // Attach: a running device joins without being owned; a dead socket is a 502.
        let socket = lab.call("GET", "/lab/devices/r").json["socket"]?.stringValue ?? ""
        let attached = lab.call("POST", "/lab/devices", #"{"attach":"\#(socket)","name":"again"}"#)
        #expect(attached.status == 201 && attached.json["devices"]?.arrayValue?.first?["owned"] == false && attached.json["devices"]?.arrayValue?.first?["pid"] == .null)
        #expect(lab.call("POST", "/lab/devices", #"{"attach":"/nonexistent.sock","name":"gone"}"#).status == 502)
        #expect(lab.call("POST", "/lab/devices/again/restart").status == 409)
        #expect(lab.call("DELETE", "/lab/devices/again").json["released"] == true)
        // Reset: owned devices end, the emulator goes back to its apps.
        let pids = lab.devicePIDs()
        #expect(lab.call("POST", "/lab/reset").json["stopped"] == 1)
        #expect(!pids.contains(where: { ProcStats.isAlive($0) }))
    }

    // M.1: each notification comes with the time the lab read it (`times`, in step with
    // `notifications`, from `after` on too): a watchdog or a stop is judged by when it came.
    @Test func notificationsSayWhenTheyCame() throws {
        let lab = try Lab()
        let before = Date().timeIntervalSince1970
        #expect(lab.call("POST", "/lab/devices", #"{"name":"w","clock":"system","environment":{"WATCHDOG_USEC":"200000"}}"#).status == 201)
        usleep(700_000)
        let seen = lab.call("GET", "/lab/devices/w/notifications").json
        let after = Date().timeIntervalSince1970
        let texts = seen["notifications"]?.arrayValue?.compactMap(\.stringValue) ?? []
        let iso = ISO8601DateFormatter()
        iso.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        let times = seen["times"]?.arrayValue?.compactMap { $0.stringValue.flatMap(iso.date(from:))?.timeIntervalSince1970 } ?? []
        #expect(texts.contains { $0.contains("READY=1") } && texts.contains { $0.contains("WATCHDOG=1") }, "\(seen)")
        #expect(times.count == texts.count, "one time per notification: \(seen)")
        #expect(times.allSatisfy { $0 >= before - 0.001 && $0 <= after + 0.001 }, "\(times) not within \(before)...\(after)")
        #expect(times == times.sorted(), "in the order they came")
        let ready = try #require(texts.firstIndex { $0.contains("READY=1") })
        let watchdogs = texts.indices.filter { texts[$0].contains("WATCHDOG=1") }
        #expect(watchdogs.allSatisfy { times[$0] >= times[ready] })
        let from = lab.call("GET", "/lab/devices/w/notifications?after=1").json
        #expect(from["times"]?.arrayValue?.count == from["notifications"]?.arrayValue?.count)
        #expect(from["times"]?.arrayValue?.first == seen["times"]?.arrayValue?.dropFirst().first, "after=N skips the first N times as well")
    }

    // M.1: a device in a test's own directory (kept: a second start continues on its state),
    // with variables of its own, its HTTP address, a signal, its notifications, how it ended.
    @Test func aDeviceInATestsDirectorySignalledAndStartedAgain() throws {
        let lab = try Lab()
        let own = lab.dir.path + "/mine"
        let body = #"{"name":"t","clock":"system","directory":"\#(own)","environment":{"PUSHWOOSH_LAB_MARK":"seen"},"#
            + ##""config":{"HTTP":{"Listen":"127.0.0.1:0"}},"extraConfig":"# the end"}"##
        let started = lab.call("POST", "/lab/devices", body)
        #expect(started.status == 201, "\(started.json)")
        let device = started.json["devices"]?.arrayValue?.first ?? .null
        #expect(device["directory"]?.stringValue == own && device["socket"]?.stringValue == own + "/agent.sock")
        #expect(device["http"]?.stringValue?.hasPrefix("127.0.0.1:") == true, "\(device)")
        let pid = Int(device["pid"]?.numberValue ?? 0)
        let environ = (try? String(contentsOfFile: "/proc/\(pid)/environ", encoding: .utf8)) ?? ""
        #expect(environ.split(separator: "\0").contains("PUSHWOOSH_LAB_MARK=seen"))
        #expect((try? String(contentsOfFile: own + "/agent.conf", encoding: .utf8))?.contains("# the end\n") == true)
        let seen = lab.call("GET", "/lab/devices/t/notifications")
        #expect(seen.json["notifications"]?.arrayValue?.contains { $0.stringValue?.contains("READY=1") == true } == true, "\(seen.json)")
        let next = Int(seen.json["next"]?.numberValue ?? 0)
        #expect(lab.call("POST", "/lab/devices/t/signal", #"{"signal":"HUP"}"#).status == 200)
        var reloaded = false
        for _ in 0..<200 where !reloaded {
            let later = lab.call("GET", "/lab/devices/t/notifications?after=\(next)").json["notifications"]?.arrayValue ?? []
            reloaded = later.contains { $0.stringValue?.contains("RELOADING=1") == true }
            if !reloaded { usleep(10_000) }
        }
        #expect(reloaded, "no RELOADING=1 after SIGHUP")
        let hwid = device["hwid"]
        let stopped = lab.call("DELETE", "/lab/devices/t")
        #expect(stopped.json["stopped"] == true && stopped.json["exitCode"] == 0 && stopped.json["exitSignal"] == .null, "\(stopped.json)")
        #expect(FileManager.default.fileExists(atPath: own + "/state"))
        let again = lab.call("POST", "/lab/devices", body)
        #expect(again.status == 201 && again.json["devices"]?.arrayValue?.first?["hwid"] == hwid, "the same state, the same device")
        #expect(lab.call("POST", "/lab/devices/t/signal", #"{"signal":"KILL"}"#).status == 200)
        usleep(200_000)
        let killed = lab.call("GET", "/lab/devices/t").json
        #expect(killed["state"] == "exited" && killed["exitSignal"] == 9 && killed["exitCode"] == .null, "\(killed)")
        #expect(lab.call("POST", "/lab/devices/t/signal", #"{"signal":"HUP"}"#).status == 409)
        // A device pointed at another server keeps it.
        let elsewhere = lab.call("POST", "/lab/devices", #"{"name":"e","clock":"system","config":{"Agent":{"ServerURL":"http://127.0.0.1:9/json/1.3/"}}}"#)
        #expect(elsewhere.status == 201)
        let conf = (try? String(contentsOfFile: lab.dir.path + "/lab/devices/e/agent.conf", encoding: .utf8)) ?? ""
        #expect(conf.contains("ServerURL=http://127.0.0.1:9/json/1.3/\n") && !conf.contains("ServerURL=http://127.0.0.1:\(lab.emulator.port)"), "\(conf)")
    }

    // M: the lab's API is locked by --admin-token; the lab off is a 404 saying so.
    @Test func tokenAndLabOff() throws {
        let dir = TempDir(files: ["token": "lab-secret\n"])
        chmod(dir.file("token"), 0o600)
        let lab = try Lab(arguments: ["--admin-token", dir.file("token")])
        #expect(http("GET", lab.emulator.baseURL + "/lab/devices", nil).0 == 401)
        #expect(http("GET", lab.emulator.baseURL + "/lab/devices", nil, token: "not-it").0 == 401)
        #expect(lab.call("GET", "/lab/devices").status == 200)
        let off = try EmulatorProcess()
        let (status, body) = off.admin("GET", "/lab/devices")
        #expect(status == 404 && body.contains("--lab DIR"))
    }

    // M: no orphans: a lab killed with SIGKILL takes its devices with it.
    @Test func noOrphansAfterSIGKILL() throws {
        let lab = try Lab()
        #expect(lab.call("POST", "/lab/devices", #"{"count":2,"name":"o"}"#).status == 201)
        let pids = lab.devicePIDs()
        #expect(pids.count == 2)
        kill(lab.emulator.pid, SIGKILL)
        let deadline = Date().addingTimeInterval(5)
        while Date() < deadline, pids.contains(where: { ProcStats.isAlive($0) }) { usleep(20_000) }
        #expect(!pids.contains(where: { ProcStats.isAlive($0) }), "devices outlived the lab")
    }
}
