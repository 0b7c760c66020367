import AgentCore
import AgentPosix
import Foundation
import Glibc
import HarnessSupport
import Testing
import ToolSupport

/// docs/fleet.md E.1: `pushwoosh-agentctl fleet` against real `pushwoosh-agentd` children on one
/// socket directory (no systemd): every one listed, a killed one shown as down, metrics
/// merged, `call` on all of them.
@Suite(.serialized) struct FleetCommandDaemonTests {
    func agentctl(_ arguments: [String]) throws -> CapturedRun {
        try runCapturing(Binaries.agentctl, arguments)
    }

    /// `count` agents named device-1… on one socket directory, each ready and listed as ready
    /// by `fleet --json status`.
    func startFleet(_ count: Int, emulator: EmulatorProcess, sockets: TempDir) throws -> [AgentProcess] {
        let agents = try (1...count).map { n in
            let dir = TempDir()
            let config = AgentProcess.config(server: emulator.serverURL, extra: "UserId=user-\(n)", dir: dir.path)
                .replacingOccurrences(of: "Socket=\(dir.path)/agent.sock", with: "Socket=\(sockets.path)/device-\(n).sock")
            return try AgentProcess(dir: dir, config: config, server: emulator.serverURL)
        }
        for agent in agents { #expect(agent.waitForNotify("READY=1") != nil, "\(agent.stderrText)") }
        #expect(eventually {
            (try? agentctl(["fleet", "--socket-dir", sockets.path, "--json", "status"]).out.components(separatedBy: "\"state\":\"ready\"").count) == count + 1
        })
        return agents
    }

    @Test func fleetOverChildAgents() throws {
        let emulator = try EmulatorProcess()
        let sockets = TempDir()
        let count = 8
        let agents = try startFleet(count, emulator: emulator, sockets: sockets)

        let all = try agentctl(["fleet", "--socket-dir", sockets.path, "status"])
        #expect(all.status == 0, "\(all.out)")
        var lines = all.out.split(separator: "\n").map(String.init)
        #expect(lines.count == count + 2)
        #expect(lines.last == "\(count) instances: \(count) ready")
        for n in 1...count {
            #expect(lines.contains { $0.hasPrefix("device-\(n) ") && $0.contains(" ready ") && $0.contains(" user-\(n) ") }, "\(all.out)")
        }

        // A killed instance: its socket file stays, nobody listens.
        agents[2].signal(SIGKILL)
        agents[2].process.waitUntilExit()
        let one = try agentctl(["fleet", "--socket-dir", sockets.path, "--timeout", "2", "status"])
        #expect(one.status == 3)
        lines = one.out.split(separator: "\n").map(String.init)
        #expect(lines.contains { $0.hasPrefix("device-3 ") && $0.contains("down (connection refused on \(sockets.path)/device-3.sock)") },
                "\(one.out)")
        #expect(lines.last == "\(count) instances: 1 down, \(count - 1) ready")
        #expect(one.seconds < 2, "a refused connection must not cost the timeout: \(one.seconds) s")

        let metrics = try agentctl(["fleet", "--socket-dir", sockets.path, "metrics"])
        let metricLines = metrics.out.split(separator: "\n").map(String.init)
        let helps = metricLines.filter { $0.hasPrefix("# HELP ") }
        #expect(Set(helps).count == helps.count, "a family's HELP twice")
        #expect(metricLines.filter { $0.hasPrefix("pushwoosh_agent_flags{") }.count == count - 1)
        #expect(metricLines.contains(#"pushwoosh_agent_flags{instance="device-1"} 4"#), "\(metrics.out.prefix(2000))")
        #expect(metricLines.contains(#"pushwoosh_agent_fleet_up{instance="device-3"} 0"#))
        #expect(!metricLines.contains { !$0.hasPrefix("#") && !$0.contains("instance=\"device-") }, "a series without its instance label")
        // Prometheus's own linter accepts the merged text (promtool comes with make deps, for ofrep-test).
        if FileManager.default.isExecutableFile(atPath: "/usr/bin/promtool") {
            let promtool = try runCapturing("/usr/bin/promtool", ["check", "metrics"], input: metrics.out)
            #expect(promtool.status == 0, "promtool check metrics: \(promtool.out)\(promtool.err)")
        }

        let refresh = try agentctl(["fleet", "--socket-dir", sockets.path, "--json", "call", "refresh"])
        #expect(refresh.status == 3)
        let answers = try #require(try JSONSerialization.jsonObject(with: Data(refresh.out.utf8)) as? [[String: Any]])
        #expect(answers.count == count)
        #expect(answers.filter { $0["result"] != nil }.count == count - 1)
        #expect(answers.first { $0["instance"] as? String == "device-3" }?["down"] != nil)

        let background = try agentctl(["fleet", "--socket-dir", sockets.path, "call", "setAppState", #"{"state":"background"}"#])
        #expect(background.out.split(separator: "\n").filter { $0.contains("  ok  ") }.count == count - 1, "\(background.out)")
        #expect(try LineClient(path: sockets.path + "/device-1.sock").call("status")["result"]?["appState"] == "background")
        for (i, agent) in agents.enumerated() where i != 2 { #expect(agent.stop().status == 0) }
    }

    @Test("fleet status --expect: a device stopped cleanly (its socket gone) is missing, exit 3; without --expect nothing knew it was expected")
    func aStoppedDeviceIsMissing() throws {
        let emulator = try EmulatorProcess()
        let sockets = TempDir()
        let agents = try startFleet(3, emulator: emulator, sockets: sockets)
        #expect(agents[2].stop().status == 0)  // a clean stop removes its socket
        #expect(!FileManager.default.fileExists(atPath: sockets.path + "/device-3.sock"))

        // What a socket directory alone can say: the two that are there.
        let listed = try agentctl(["fleet", "--socket-dir", sockets.path, "status"])
        #expect(listed.status == 0)
        #expect(listed.out.split(separator: "\n").last == "2 instances: 2 ready", "\(listed.out)")

        let expected = try agentctl(["fleet", "--socket-dir", sockets.path, "status", "--expect", "device-1,device-2,device-3"])
        #expect(expected.status == 3, "\(expected.out)")
        let lines = expected.out.split(separator: "\n").map(String.init)
        #expect(lines.contains { $0.hasPrefix("device-3 ") && $0.contains("missing (no socket at \(sockets.path)/device-3.sock)") }, "\(expected.out)")
        #expect(lines.last == "3 instances: 1 missing, 2 ready", "\(expected.out)")
        let json = try agentctl(["fleet", "--socket-dir", sockets.path, "--json", "--expect", "device-3", "status"])
        #expect(json.status == 3 && json.out.contains(#""missing":"no socket at \#(sockets.path)/device-3.sock""#), "\(json.out)")
        print("FleetCommandDaemonTests: without --expect: \(listed.out.split(separator: "\n").last ?? "") (exit \(listed.status)); with: \(lines.last ?? "") (exit \(expected.status))")
        for agent in agents.prefix(2) { #expect(agent.stop().status == 0) }
    }
}
