import AgentPosix
import Foundation
import Glibc
@testable import Soak
import Testing

/// Each of the runner's errors names what failed: the option, the process, the file, the agent.
@Suite struct SoakErrorTests {
    func refusal(_ arguments: [String]) -> SoakOptionError? {
        do { _ = try SoakOptions.parse(arguments); return nil } catch { return error }
    }

    @Test("A bad option value: the error names the option and the value as given; exit 2")
    func badOptionValue() throws {
        let speed = try #require(refusal(["--real-timings", "--speed", "0.5"]))
        #expect(speed == SoakOptionError("--speed", .badValue("0.5", expected: "1-1000000")))
        #expect(speed.description == "--speed: expected 1-1000000, found \"0.5\"")
        #expect(speed.exitCode == 2)
        // Checked once every option is read, still named, with the text given.
        let refresh = try #require(refusal(["--refresh", "500ms"]))
        #expect(refresh.option == "--refresh")
        #expect(refresh.description == "--refresh: expected at least 1s, found \"500ms\"")
        #expect(refusal(["--session-gap", "50ms"])?.description == "--session-gap: expected at least 100ms, found \"50ms\"")
        #expect(refusal(["--pace", "0s"])?.description == "--pace: expected a positive time span, found \"0s\"")
        #expect(refusal(["--duration", "soon"])?.description == "--duration: expected a time span like 90s, 10m, 1h, 500ms, found \"soon\"")
        #expect(refusal(["--seed"]) == SoakOptionError("--seed", .missingValue))
    }

    @Test("Timing options with --real-timings are a usage error naming each of them (exit 2), never ignored")
    func timingsWithRealTimings() throws {
        let both = try #require(refusal(["--real-timings", "--refresh", "15s", "--device-days", "1", "--lifetime", "60s"]))
        #expect(both == SoakOptionError("--lifetime", .notWithRealTimings(["--lifetime", "--refresh"])))
        #expect(both.exitCode == 2)
        #expect(both.description.hasPrefix("--lifetime, --refresh cannot be used with --real-timings"), "\(both)")
        for option in ["--session-gap", "--throttle"] {
            #expect(refusal([option, "10s", "--real-timings"]) == SoakOptionError(option, .notWithRealTimings([option])))
        }
        // Without --real-timings they are the run's timings.
        #expect(try SoakOptions.parse(["--lifetime", "60s", "--refresh", "15s"]).timings.lifetime == 60)
    }

    @Test("make soak-real writes the JUnit file")
    func soakRealWritesJUnit() throws {
        let makefile = try String(contentsOfFile: RealRunTests.repository + "/Makefile", encoding: .utf8)
        let recipe = try #require(makefile.components(separatedBy: "\nsoak-real:").last?.split(separator: "\n").dropFirst().first)
        #expect(recipe.contains("--real-timings") && recipe.contains("--junit "), "\(recipe)")
    }

    @Test("An unknown option is named, with the usage; --help is the usage with exit 0")
    func unknownAndHelp() throws {
        let unknown = try #require(refusal(["--agent", "3"]))
        #expect(unknown.description.hasPrefix("unknown option --agent\n\nusage:"))
        #expect(unknown.exitCode == 2)
        let help = try #require(refusal(["--help"]))
        #expect(help.exitCode == 0 && help.description == SoakOptions.usage)
    }

    @Test("A process that cannot start: the error names it, its binary and why")
    func processThatDoesNotStart() throws {
        let runner = SoakRunner(options: try SoakOptions.parse(["--quiet"]))
        let dir = NSTemporaryDirectory() + "soak-error-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        do {
            _ = try runner.startEmulator("/bin/false", apps: "/nonexistent", agentd: "/bin/false", lab: dir + "/lab", environment: [:],
                                         logPath: dir + "/emulator.log")
            Issue.record("/bin/false announced a port")
        } catch {
            #expect(error.binary == "/bin/false" && error.name == "emulator")
            guard case .noPort(_, let exit, _) = error.why else { Issue.record("\(error.why)"); return }
            #expect(exit != nil, "it exited, and the error says so")
            #expect(error.description.hasPrefix("the emulator (/bin/false) did not start: no port announced within 10s (it exited:"),
                    "\(error)")
        }
        runner.emulator.withLock { $0 }?.stop(grace: 0.1)
        let missing = SoakProcessError(name: "agent", binary: "/no/bin/pushwoosh-agentd", .notExecutable)
        #expect(missing.description == "no executable /no/bin/pushwoosh-agentd (use --bin DIR)")
        let spawn = SoakProcessError(name: "agent-1", binary: "/x/agentd", .spawn(PosixError(errno: ENOENT, call: "posix_spawn", path: "/x/agentd")))
        #expect(spawn.description == "cannot start the agent-1 (/x/agentd): posix_spawn: No such file or directory")
    }

    @Test("A file that cannot be written: the error names what it is, the path, the call and errno")
    func fileThatCannotBeWritten() {
        do {
            try writeFileReplacing("/nonexistent-soak-dir/report.html", "<html/>", for: "report.html")
            Issue.record("written")
        } catch {
            #expect(error == SoakFileError("report.html", path: "/nonexistent-soak-dir/report.html", call: "open", errno: ENOENT))
            #expect(error.description == "cannot write report.html: open /nonexistent-soak-dir/report.html: No such file or directory (errno 2)")
        }
        do {
            try makeDirectories("/etc/passwd/soak-report", for: "the report")
            Issue.record("created")
        } catch {
            #expect(error == SoakFileError("the report", path: "/etc/passwd/soak-report", call: "mkdir", errno: ENOTDIR))
        }
    }

    @Test("A failed socket call: the error names the agent, its device and the method")
    func agentCall() {
        let e = AgentCallError(agent: 2, hwid: "1A2B3C4D", method: "get", why: "no answer within 20 s")
        #expect(e.description == "agent 2 (1A2B3C4D): get: no answer within 20 s")
        #expect(AgentCallError(agent: 0, hwid: "", method: "status", why: "x").description == "agent 0: status: x")
    }
}
