import AgentCore
import AgentPosix
import AgentWire
import Foundation
import Glibc
import HarnessSupport
import Launcher
import Testing
@testable import AgentControl

/// `fleet advance-clock` against real agents (Clock=controlled) and a real emulator: its lab
/// (`--lab DIR`) moves them (each instance attached under its name and let go again), all or
/// none; an emulator without a lab is a usage error (docs/device-clock.md J).
@Suite(.serialized) struct FleetAdvanceClockLabTests {
    /// Two agents with controlled clocks, their sockets `device-0.sock` and `device-1.sock` in
    /// one directory, pointed at `emulator`: instances as systemd runs them (not the lab's), each
    /// started by the one launcher and ready (READY=1, its first refresh done).
    final class Agents {
        let dir = TempDir()
        var agents: [AgentLauncher] = []

        init(_ emulator: EmulatorProcess, count: Int = 2) throws {
            for i in 0..<count {
                let name = "device-\(i)"
                let config = """
                    [Agent]
                    ApplicationCode=ABCDE-12345
                    ServerURL=\(emulator.serverURL)
                    Socket=\(dir.file(name + ".sock"))
                    StateDirectory=\(dir.file(name + "-state"))
                    RequestTimeout=5s
                    [Device]
                    Clock=controlled
                    """
                try config.write(toFile: dir.file(name + ".conf"), atomically: true, encoding: .utf8)
                let agent = try AgentLauncher(.init(agentd: Binaries.agentd, arguments: ["--config", dir.file(name + ".conf")],
                                                    environment: ["PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"],
                                                    notifyPath: dir.file(name + ".notify"), logPath: dir.file(name + ".log")))
                agents.append(agent)
                guard agent.waitForReady(timeout: 15) != nil else { throw FixtureError("\(name): no READY=1: \(agent.tail(5))") }
            }
            // Ready once each answers status with its first refresh done.
            let deadline = monotonicSeconds() + 15
            for i in 0..<count {
                while monotonicSeconds() < deadline {
                    let run = try runCapturing(Binaries.agentctl, ["--socket", dir.file("device-\(i).sock"), "--json", "status"])
                    if run.status == 0, run.out.contains("\"lastRefreshAt\":\"") { break }
                    usleep(50_000)
                }
            }
        }

        deinit {
            for agent in agents { agent.stop(signal: SIGKILL) }
        }
    }

    /// `fleet ARGS --emulator URL`, with the lab's token file (`--admin-token`) unless `withToken`
    /// is false or ARGS name one.
    func agentctl(_ agents: Agents, _ emulator: EmulatorProcess, _ args: [String], withToken: Bool = true) throws -> CapturedRun {
        let token = withToken && !args.contains("--admin-token") ? emulator.tokenFile.map { ["--admin-token", $0] } ?? [] : []
        return try runCapturing(Binaries.agentctl, ["fleet", "--socket-dir", agents.dir.path] + args + ["--emulator", emulator.baseURL] + token)
    }

    func emulatorOffset(_ emulator: EmulatorProcess) -> Double {
        let (_, body) = emulator.admin("GET", "/admin/clock")
        return (try? JSONReader.parse(Array(body.utf8)))?["offsetSeconds"]?.numberValue ?? -1
    }

    func labDevices(_ emulator: EmulatorProcess) -> [String] {
        let (_, body) = emulator.admin("GET", "/lab/devices")
        let devices = (try? JSONReader.parse(Array(body.utf8)))?["devices"]?.arrayValue ?? []
        return devices.compactMap { $0["name"]?.stringValue }.sorted()
    }

    @Test func anEmulatorWithALabMovesTheFleetAndLetsItGo() throws {
        let lab = TempDir()
        let emulator = try EmulatorProcess(arguments: ["--lab", lab.path])
        defer { emulator.stop() }
        let agents = try Agents(emulator)
        // device-1 is in the lab already (attached by someone else, same socket): it stays.
        let (status, _) = emulator.admin("POST", "/lab/devices", #"{"attach": "\#(agents.dir.file("device-1.sock"))", "name": "device-1"}"#)
        #expect(status == 201)

        let run = try agentctl(agents, emulator, ["advance-clock", "2h"])
        #expect(run.status == 0, "\(run.err)")
        #expect(!run.err.contains("no lab"), "\(run.err)")
        let lines = run.out.split(separator: "\n").map(String.init)
        #expect(lines.first?.hasPrefix("now: ") == true, "\(run.out)")
        #expect(lines.contains { $0.hasPrefix("device-0  ") && $0.hasSuffix("refresh (periodic)") }, "\(run.out)")
        #expect(lines.contains { $0.hasPrefix("device-1  ") && $0.hasSuffix("refresh (periodic)") }, "\(run.out)")
        #expect(lines.last?.contains(" requests sent, ") == true, "\(run.out)")
        #expect(abs(emulatorOffset(emulator) - 7200) < 5)
        #expect(labDevices(emulator) == ["device-1"])  // device-0 let go; device-1 was not ours to

        // --until: the lab's (every device's next periodic refresh), and --json.
        let next = try agentctl(agents, emulator, ["--json", "advance-clock", "--until", "nextRefresh"])
        #expect(next.status == 0, "\(next.err)")
        let answer = try JSONReader.parse(Array(next.out.utf8))
        for name in ["device-0", "device-1"] {
            #expect(answer["fired"]?[name]?.arrayValue?.contains { $0["event"] == "refresh" && $0["trigger"] == "periodic" } == true,
                    "\(next.out)")
        }

        // All or none: a device the lab cannot move (in the background: no periodic refresh) is
        // named, nothing moves, exit 3.
        _ = try runCapturing(Binaries.agentctl, ["--socket", agents.dir.file("device-0.sock"), "set-app-state", "background"])
        let before = emulatorOffset(emulator)
        let skipped = try agentctl(agents, emulator, ["advance-clock", "--until", "nextRefresh"])
        #expect(skipped.status == 3, "\(skipped.out) \(skipped.err)")
        #expect(skipped.err.contains("pushwoosh-agentctl: fleet advance-clock: cannot move device-0: in the background"), "\(skipped.err)")
        #expect(skipped.err.contains("1 of 2 instances cannot be moved; nothing was moved"), "\(skipped.err)")
        #expect(emulatorOffset(emulator) == before)
        #expect(labDevices(emulator) == ["device-1"])
    }

    @Test func aLockedLabTakesTheAdminToken() throws {
        let lab = TempDir(files: ["token": "lab-secret\n"])
        let emulator = try EmulatorProcess(arguments: ["--lab", lab.path, "--admin-token", lab.file("token")])
        defer { emulator.stop() }
        let agents = try Agents(emulator, count: 1)
        let run = try agentctl(agents, emulator, ["advance-clock", "30min", "--admin-token", lab.file("token")])
        #expect(run.status == 0, "\(run.err)")
        #expect(!run.err.contains("no lab"), "\(run.err)")
        let refused = try agentctl(agents, emulator, ["advance-clock", "30min"], withToken: false)
        #expect(refused.status == 4 && refused.err.contains("is locked: give its token with --admin-token FILE"), "\(refused.err)")
    }

    @Test func anEmulatorWithoutALabIsAUsageError() throws {
        let emulator = try EmulatorProcess()
        defer { emulator.stop() }
        let agents = try Agents(emulator, count: 1)
        let run = try agentctl(agents, emulator, ["advance-clock", "2h"])
        #expect(run.status == 2, "\(run.err)")
        #expect(run.err.contains("no lab at \(emulator.baseURL): the lab moves the fleet; start the emulator with --lab DIR"), "\(run.err)")
        #expect(emulatorOffset(emulator) == 0, "nothing moved")
    }

    @Test func aTimeBeforeTheLabsIsRefused() throws {
        let dir = TempDir()
        let emulator = try EmulatorProcess(arguments: ["--lab", dir.path + "/lab"])
        defer { emulator.stop() }
        let agents = try Agents(emulator, count: 1)
        let past = try agentctl(agents, emulator, ["advance-clock", "--until", "2020-01-01T00:00:00Z"])
        #expect(past.status == 2 && past.err.contains("2020-01-01T00:00:00Z is not after the lab's time"), "\(past.err)")
        let next = try agentctl(agents, emulator, ["advance-clock", "--until", "nextTimer"])
        #expect(next.status == 0 && next.out.hasSuffix(", 1 step\n"), "\(next.out) \(next.err)")
    }

    /// Every instance the lab cannot reach is named with its reason (not only the first), the
    /// exit status is 3, and nothing moves.
    @Test func everyInstanceThatCannotMoveIsNamed() throws {
        let lab = TempDir()
        let emulator = try EmulatorProcess(arguments: ["--lab", lab.path + "/lab"])
        defer { emulator.stop() }
        let agents = try Agents(emulator, count: 1)
        for name in ["device-1", "device-2"] {  // sockets nobody listens on
            #expect(FileManager.default.createFile(atPath: agents.dir.file("\(name).sock"), contents: nil))
        }
        let run = try agentctl(agents, emulator, ["--expect", "device-3", "advance-clock", "1h"])
        #expect(run.status == 3, "\(run.err)")
        let err = run.err.split(separator: "\n").map(String.init)
        for name in ["device-1", "device-2", "device-3"] {
            #expect(err.contains { $0.hasPrefix("pushwoosh-agentctl: fleet advance-clock: cannot move \(name): ") }, "\(run.err)")
        }
        #expect(err.last == "pushwoosh-agentctl: fleet advance-clock: 3 of 4 instances cannot be moved; nothing was moved", "\(run.err)")
        #expect(emulatorOffset(emulator) == 0 && labDevices(emulator) == [], "nothing moved, nothing left attached")
    }
}
