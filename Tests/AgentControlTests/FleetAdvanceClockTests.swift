import AgentCore
import AgentWire
import Foundation
import Testing
@testable import AgentControl
import HarnessSupport

/// `fleet advance-clock SPAN --emulator URL`: its arguments, and what it refuses before
/// anything moves (the scenarios against real agents and a real emulator are in
/// clients/python/tests/test_lab_clock.py).
@Suite struct FleetAdvanceClockTests {
    func invocation(_ args: [String]) throws -> FleetInvocation {
        guard case .fleet(let f) = try ControlArguments.parse(args, environment: [:]) else { throw UsageError("not a fleet invocation") }
        return f
    }

    func usageMessage(_ args: [String]) -> String? {
        do {
            _ = try ControlArguments.parse(args, environment: [:])
            return nil
        } catch {
            return error.message
        }
    }

    @Test func arguments() throws {
        let a = try invocation(["fleet", "--socket-dir", "/tmp/x", "advance-clock", "2h30min", "--emulator", "http://127.0.0.1:8080"])
        #expect(a.command.advance == FleetAdvance(seconds: 9_000, emulator: "http://127.0.0.1:8080"))
        #expect(try invocation(["fleet", "--emulator=http://localhost:9/", "advance-clock", "90s", "--admin-token", "/etc/t"]).command.advance
            == FleetAdvance(seconds: 90, emulator: "http://localhost:9/", adminTokenFile: "/etc/t"))
    }

    @Test func badInputNamesTheField() {
        let emulator = ["--emulator", "http://127.0.0.1:8080"]
        #expect(usageMessage(["fleet", "advance-clock"] + emulator)?.contains("needs SPAN") == true)
        for span in ["0", "soon", "2 parsecs", "0s"] {
            #expect(usageMessage(["fleet", "advance-clock", span] + emulator)?.contains("\"\(span)\" is not a positive time span") == true, "\(span)")
        }
        #expect(usageMessage(["fleet", "advance-clock", "1h", "2h"] + emulator)?.contains("unexpected argument \"2h\"") == true)
        #expect(usageMessage(["fleet", "advance-clock", "1h"])?.contains("needs --emulator URL") == true)
        for url in ["ftp://127.0.0.1:8080", "127.0.0.1:8080", "http://127.0.0.1", "http://emulator.example:8080", "http://[::1]:8080", ""] {
            let message = usageMessage(["fleet", "advance-clock", "1h", "--emulator", url])
            #expect(message?.contains("--emulator") == true, "\(url): \(message ?? "accepted")")
        }
        #expect(usageMessage(["fleet", "status"] + emulator)?.contains("--emulator is for 'fleet advance-clock'") == true)
        #expect(usageMessage(["fleet", "status", "--admin-token", "/t"])?.contains("--admin-token is for 'fleet advance-clock'") == true)
        #expect(usageMessage(["fleet", "advance-clock", "1h"] + emulator + ["--admin-token"])?.contains("needs a value") == true)
        // --until names itself: a value it does not read, one given with SPAN, none at all, another command's.
        #expect(usageMessage(["fleet", "advance-clock", "--until", "soon"] + emulator)
            == "--until: \"soon\" is not nextRefresh, nextTimer or an ISO 8601 time (e.g. 2026-12-06T09:00:00Z)")
        #expect(usageMessage(["fleet", "advance-clock", "1h", "--until", "nextTimer"] + emulator)?.contains("SPAN or --until, not both") == true)
        #expect(usageMessage(["fleet", "advance-clock"] + emulator + ["--until"])?.contains("option --until needs a value") == true)
        #expect(usageMessage(["fleet", "advance-clock", "--until", ""] + emulator)?.contains("option --until needs a value") == true)
        #expect(usageMessage(["fleet", "status", "--until", "nextTimer"]) == "--until is for 'fleet advance-clock'")
        #expect(usageMessage(["fleet", "advance-clock", "--until", "nextTimer"])?.contains("needs --emulator URL") == true)
    }

    @Test func untilArguments() throws {
        let emulator = ["--emulator", "http://127.0.0.1:8080"]
        #expect(try invocation(["fleet", "advance-clock", "--until", "nextRefresh"] + emulator).command.advance?.until == .nextRefresh)
        #expect(try invocation(["fleet", "advance-clock", "--until=nextTimer"] + emulator).command.advance?.until == .nextTimer)
        #expect(try invocation(["fleet", "advance-clock", "--until", "2026-12-06T09:00:00Z"] + emulator).command.advance?.until
            == .time(Date(timeIntervalSince1970: 1_796_547_600)))
    }

    /// The lab's answer read as the in-process driver's: by name, `skipped` as what did not follow.
    @Test func theLabsAnswerIsRead() throws {
        let answer = try JSONReader.parse(Array(#"""
            {"now": "2026-12-05T12:00:00.000Z", "steps": 3, "requests": 2,
             "fired": {"a": [{"at": "2026-12-05T11:00:00.000Z", "event": "refresh", "trigger": "periodic"}], "b": []},
             "skipped": [{"name": "c", "reason": "does not answer: x"}]}
            """#.utf8))
        let r = FleetAdvanced(try LabAdvanceAnswer(json: answer))
        #expect(r.steps == 3 && r.requests == 2 && r.fired["a"]?.first?.trigger == .periodic && r.fired["b"] == [])
        #expect(r.problems.map(\.name) == ["c"] && r.problems.map(\.reason) == ["does not answer: x"])
        let targets = ["a", "b", "c"].map { FleetTarget(name: $0, socketPath: "/s/\($0).sock") }
        #expect(FleetAdvanceClock.text(r, targets) == """
            now: 2026-12-05T12:00:00Z
            a  2026-12-05T11:00:00Z  refresh (periodic)
            b  -                     nothing fired
            c  -                     nothing fired
            1 timer fired, 2 requests sent, 3 steps
            """)
        #expect(throws: AnswerError.self) { try LabAdvanceAnswer(json: ["now": "soon"]) }
    }

    @Test func noInstancesIsAnErrorAndNothingMoves() throws {
        let temporary = TempDir(), dir = temporary.path
        let output = CapturedOutput()
        // No emulator listens on port 9 either: the instances are checked first.
        let f = try invocation(["fleet", "--socket-dir", dir, "advance-clock", "1h", "--emulator", "http://127.0.0.1:9"])
        #expect(FleetTool.run(f, output: output, now: { Date() }) == .notRunning)
        #expect(output.err.joined(separator: "\n").contains("no instances to move"))
        #expect(output.out.isEmpty)
    }

    @Test func aDownInstanceStopsItBeforeAnythingMoves() throws {
        let temporary = TempDir(), dir = temporary.path
        #expect(FileManager.default.createFile(atPath: dir + "/device-1.sock", contents: nil))  // nobody listens
        let output = CapturedOutput()
        let f = try invocation(["fleet", "--socket-dir", dir, "--timeout", "1", "advance-clock", "1h", "--emulator", "http://127.0.0.1:9"])
        #expect(FleetTool.run(f, output: output, now: { Date() }) == .notRunning)
        // No emulator on port 9: said, and nothing moved (FleetAdvanceClockLabTests: a down instance with a lab).
        #expect(output.err.joined(separator: "\n").contains("does not answer") && output.err.joined(separator: "\n").contains("nothing was moved"),
                "\(output.err)")
        // An admin token file that cannot be used is named before any device is asked.
        for (contents, why) in [(nil, "cannot read the file"), ("", "the file is empty"), ("two words\n", "the token contains white space")] {
            let file = dir + "/token"
            try? FileManager.default.removeItem(atPath: file)
            if let contents { #expect(FileManager.default.createFile(atPath: file, contents: Data(contents.utf8))) }
            let out = CapturedOutput()
            let g = try invocation(["fleet", "--socket-dir", dir, "advance-clock", "1h", "--emulator", "http://127.0.0.1:9", "--admin-token", file])
            #expect(FleetTool.run(g, output: out, now: { Date() }) == .usage)
            #expect(out.err.joined().contains("--admin-token \(file): \(why)"), "\(out.err)")
        }
    }
}
