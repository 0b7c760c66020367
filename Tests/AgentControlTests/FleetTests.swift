import AgentCore
import AgentWire
import Foundation
import Testing
@testable import AgentControl
#if canImport(Glibc)
import Glibc
import HarnessSupport
#endif

/// docs/fleet.md E.1 `fleet`: arguments, the merged Prometheus text, the table, and the caller
/// against real sockets (a canned agent, a dead socket, one that never answers).
@Suite struct FleetTests {
    func invocation(_ args: [String]) throws -> FleetInvocation {
        guard case .fleet(let f) = try ControlArguments.parse(args, environment: [:]) else {
            throw UsageError("not a fleet invocation")
        }
        return f
    }

    @Test func arguments() throws {
        let s = try invocation(["--json", "fleet", "--socket-dir", "/tmp/x", "status"])
        #expect(s == FleetInvocation(command: FleetCommand("status", .status), source: .socketDirectory("/tmp/x"), json: true, timeout: 10))
        let m = try invocation(["fleet", "--timeout=2.5", "metrics", "--manifest", "/etc/f.conf"])
        #expect(m == FleetInvocation(command: FleetCommand("metrics", .metrics), source: .manifest("/etc/f.conf"), json: false, timeout: 2.5))
        #expect(try invocation(["--timeout", "3", "fleet", "status"]).timeout == 3)
        let c = try invocation(["fleet", "call", "setAppState", #"{"state":"background"}"#])
        #expect(c.command == FleetCommand("call", .setAppState, ["state": "background"]))
        #expect(c.source == .manifest("/etc/pushwoosh-agent/fleet.conf"))
        #expect(try invocation(["fleet", "call", "refresh"]).command == FleetCommand("call", .refresh))
        #expect(try invocation(["fleet", "--socket-dir", "/d", "status", "--expect", "a,b", "--expect=c,a"]).expected == ["a", "b", "c"])
        #expect(try invocation(["fleet", "status"]).expected == [])
        for (bad, message) in [(["fleet", "--expect", "a,,b", "status"], #"--expect takes instance names separated by commas (letters, digits, '-', '_', '.'), got """#),
                               (["fleet", "--expect", "a/b", "status"], #"--expect takes instance names separated by commas (letters, digits, '-', '_', '.'), got "a/b""#),
                               (["fleet", "status", "--expect"], "option --expect needs a value")] {
            #expect(throws: UsageError(message, command: "fleet"), "\(bad)") { try ControlArguments.parse(bad, environment: [:]) }
        }
        guard case .help(let text) = try ControlArguments.parse(["fleet", "--help"], environment: [:]) else {
            Issue.record("no help"); return
        }
        #expect(text.contains("fleet [--manifest FILE | --socket-dir DIR]"))
        for bad in [["fleet"], ["fleet", "frobnicate"], ["fleet", "call"], ["fleet", "call", "nope"],
                    ["fleet", "call", "subscribe"], ["fleet", "call", "get", "[1]"], ["fleet", "status", "extra"],
                    ["fleet", "--socket", "/x", "status"], ["fleet", "--timeout", "0", "status"],
                    ["fleet", "--socket-dir", "/a", "--manifest", "/b", "status"]] {
            #expect(throws: UsageError.self, "\(bad)") { try ControlArguments.parse(bad, environment: [:]) }
        }
    }

    static func answer(_ name: String, _ outcome: FleetOutcome) -> FleetAnswer {
        FleetAnswer(target: FleetTarget(name: name, socketPath: "/run/x/\(name).sock"), outcome: outcome, seconds: 0)
    }

    @Test func metricsGainAnInstanceLabelAndFamiliesOnce() {
        let text = """
            # HELP a_total Things.
            # TYPE a_total counter
            a_total 3
            # HELP b Labelled.
            # TYPE b gauge
            b{kind="x"} 1
            b{} 2
            # HELP h A histogram.
            # TYPE h histogram
            h_bucket{le="1"} 1
            h_sum 0.5
            h_count 1

            """
        let merged = FleetOutput.metrics([Self.answer("d1", .result(["text": .string(text)])),
                                          Self.answer("d2", .result(["text": .string(text)])),
                                          Self.answer("d3", .down("connection refused"))])
        let lines = merged.split(separator: "\n").map(String.init)
        #expect(lines.filter { $0 == "# HELP a_total Things." }.count == 1)
        #expect(lines.filter { $0.hasPrefix("# TYPE ") }.count == 4)
        #expect(Array(lines.prefix(4)) == ["# HELP a_total Things.", "# TYPE a_total counter",
                                           #"a_total{instance="d1"} 3"#, #"a_total{instance="d2"} 3"#])
        #expect(lines.contains(#"b{instance="d2",kind="x"} 1"#))
        #expect(lines.contains(#"b{instance="d1"} 2"#))
        // A histogram's series stay under their family, after its TYPE.
        let typeH = lines.firstIndex(of: "# TYPE h histogram")!
        #expect(lines[(typeH + 1)...].prefix(6) == [#"h_bucket{instance="d1",le="1"} 1"#, #"h_sum{instance="d1"} 0.5"#,
                                                     #"h_count{instance="d1"} 1"#, #"h_bucket{instance="d2",le="1"} 1"#,
                                                     #"h_sum{instance="d2"} 0.5"#, #"h_count{instance="d2"} 1"#])
        #expect(lines.suffix(3) == [#"pushwoosh_agent_fleet_up{instance="d1"} 1"#, #"pushwoosh_agent_fleet_up{instance="d2"} 1"#,
                                    #"pushwoosh_agent_fleet_up{instance="d3"} 0"#])
    }

    @Test func statusTable() {
        let now = Date(timeIntervalSince1970: 1_800_000_100)
        let ready: JSONValue = ["state": "ready", "userId": "user-1", "flagsAgeSeconds": 75, "lastRefreshAt": "2027-01-15T08:00:00Z",
                                "lastRefreshError": .null, "consecutiveFailures": 0]
        let text = FleetOutput.status([Self.answer("device-1", .result(ready)),
                                       Self.answer("device-2", .down("no socket at /run/x/device-2.sock")),
                                       Self.answer("device-3", .error(RPCError(code: -32001, message: "permission denied")))], now: now)
        let lines = text.split(separator: "\n").map(String.init)
        #expect(lines[0].hasPrefix("INSTANCE  STATE"))
        #expect(lines[1].contains("device-1") && lines[1].contains("ready") && lines[1].contains("user-1") && lines[1].contains("1 min"))
        #expect(lines[1].hasSuffix("0"))
        #expect(lines[1].contains("1 min ago"), "\(lines[1])")
        #expect(lines[2].contains("down (no socket at /run/x/device-2.sock)"))
        #expect(lines[3].contains("error -32001: permission denied"))
        #expect(lines[4] == "3 instances: 1 down, 1 error, 1 ready")
        // An expected instance without a socket is missing, and the fleet is not all there.
        let missing = Self.answer("c", .missing("no socket at /run/x/c.sock"))
        let withMissing = FleetOutput.status([Self.answer("a", .result(ready)), missing], now: now).split(separator: "\n").map(String.init)
        #expect(withMissing[2].hasPrefix("c ") && withMissing[2].contains("missing (no socket at /run/x/c.sock)"), "\(withMissing)")
        #expect(withMissing.last == "2 instances: 1 missing, 1 ready")
        #expect(FleetOutput.exit([Self.answer("a", .result(ready)), missing]) == .notRunning)
        #expect(FleetOutput.json([missing]) == #"[{"instance":"c","missing":"no socket at /run/x/c.sock","socket":"/run/x/c.sock"}]"#)
        #expect(FleetOutput.metrics([missing]).contains(#"pushwoosh_agent_fleet_up{instance="c"} 0"#))
        #expect(FleetOutput.exit([Self.answer("a", .result(ready))]) == .success)
        #expect(FleetOutput.exit([Self.answer("a", .result(ready)), Self.answer("b", .error(RPCError(code: 1, message: "x")))]) == .agentError)
        #expect(FleetOutput.exit([Self.answer("a", .error(RPCError(code: 1, message: "x"))), Self.answer("b", .down("x"))]) == .notRunning)
        // fleet call refresh: a failed refresh is an error, as for `pushwoosh-agentctl refresh`.
        let failed = Self.answer("a", .result(RefreshAnswer(error: RefreshError(code: 500, message: "HTTP 500"), sent: true).json))
        #expect(FleetOutput.exit([failed], method: .refresh) == .agentError)
        #expect(FleetOutput.exit([failed], method: .status) == .success)
        #expect(FleetOutput.exit([Self.answer("a", .result(["error": .null, "sent": true]))], method: .refresh) == .success)
        // An answer that is not a refresh result (here without `sent`) is not counted a success.
        #expect(FleetOutput.exit([Self.answer("a", .result(["error": .null]))], method: .refresh) == .agentError)
        // fleet call refresh says sent or not sent, never a bare "ok".
        let calls = FleetOutput.call([
            Self.answer("a", .result(RefreshAnswer(error: nil, sent: true).json)),
            Self.answer("b", .result(RefreshAnswer(error: nil, sent: false, throttledUntil: Date(timeIntervalSince1970: 1_764_669_900)).json)),
            failed,
        ], method: .refresh).split(separator: "\n").map(String.init)
        #expect(calls[0].hasPrefix("a  sent      {"), "\(calls)")
        #expect(calls[1] == "b  not sent  throttle window until 2025-12-02T10:05:00Z", "\(calls)")
        #expect(calls[2] == "a  failed    HTTP 500 (PWFeatureFlagsErrorDomain code 500)", "\(calls)")
        #expect(FleetOutput.call([Self.answer("a", .result(["logged": true]))], method: .logImpression) == #"a  ok  {"logged":true}"#)
    }

    /// Ages are the device's: a controlled clock 3 h ahead of the host reads its last refresh
    /// against its own `now`, not the host's (which said "0 s ago", or less).
    @Test func statusAgesAreInDeviceTime() {
        let host = Date(timeIntervalSince1970: 1_800_000_000)
        let ahead: JSONValue = ["state": "ready", "userId": "u", "flagsAgeSeconds": 10_800, "consecutiveFailures": 0,
                                "lastRefreshAt": .string(SocketTime.string(host)), "now": .string(SocketTime.string(host.addingTimeInterval(10_800)))]
        let older: JSONValue = ["state": "ready", "userId": "u", "flagsAgeSeconds": 60, "consecutiveFailures": 0,
                                "lastRefreshAt": .string(SocketTime.string(host.addingTimeInterval(-60)))]
        let lines = FleetOutput.status([Self.answer("ahead", .result(ahead)), Self.answer("older", .result(older))], now: host)
            .split(separator: "\n").map(String.init)
        #expect(lines[1].contains("3 h ago") && lines[1].contains("  3 h  "), "\(lines)")
        #expect(lines[2].contains("1 min ago"), "\(lines)")  // an agent without `now`: the host's clock
    }

    /// `call --strict`: 5 when some instance answered with the caller's default or did not send
    /// its refresh (once all answered); the standard-error line names each, --strict or not.
    @Test func callStrict() throws {
        #expect(try invocation(["fleet", "call", "isEnabled", #"{"key":"k","default":false}"#, "--strict"]).strict)
        #expect(try invocation(["fleet", "--strict", "call", "refresh"]).strict)
        #expect(try invocation(["fleet", "call", "refresh"]).strict == false)
        #expect(throws: UsageError("--strict is for 'fleet call' (the answers of reads and refresh)", command: "fleet")) {
            try ControlArguments.parse(["fleet", "status", "--strict"], environment: [:])
        }
        #expect(throws: UsageError("option --strict takes no value", command: "fleet")) {
            try ControlArguments.parse(["fleet", "call", "refresh", "--strict=yes"], environment: [:])
        }
        let fine = Self.answer("a", .result(["enabled": true, "reason": "TARGETING_MATCH", "source": "network"]))
        let fallback = Self.answer("b", .result(["enabled": false, "reason": "ERROR", "errorCode": "FLAG_NOT_FOUND",
                                                 "errorMessage": #"no flag "x" in the served flags"#, "source": "network"]))
        #expect(FleetOutput.exit([fine, fallback], method: .isEnabled) == .success)
        #expect(FleetOutput.exit([fine, fallback], method: .isEnabled, strict: true) == .notAsAsked)
        #expect(FleetOutput.exit([fine], method: .isEnabled, strict: true) == .success)
        #expect(FleetOutput.exit([fallback, Self.answer("c", .down("x"))], method: .isEnabled, strict: true) == .notRunning)
        #expect(FleetOutput.notAsAskedWarning([fine, fallback], method: .isEnabled)
            == #"warning: 1 of 2 instances answered with the caller's default: b (FLAG_NOT_FOUND: no flag "x" in the served flags)"#)
        #expect(FleetOutput.notAsAskedWarning([fine], method: .isEnabled) == nil)
        let sent = Self.answer("a", .result(RefreshAnswer(error: nil, sent: true).json))
        let throttled = Self.answer("b", .result(RefreshAnswer(error: nil, sent: false, throttledUntil: Date(timeIntervalSince1970: 1_764_669_900)).json))
        #expect(FleetOutput.exit([sent, throttled], method: .refresh, strict: true) == .notAsAsked)
        #expect(FleetOutput.exit([sent], method: .refresh, strict: true) == .success)
        #expect(FleetOutput.notAsAskedWarning([sent, throttled], method: .refresh)
            == "warning: 1 of 2 instances did not send the refresh: b (throttle window until 2025-12-02T10:05:00Z)")
        // A failed refresh is an error (1), strict or not.
        let failed = Self.answer("c", .result(RefreshAnswer(error: RefreshError(code: 503, message: "HTTP 503"), sent: true).json))
        #expect(FleetOutput.exit([throttled, failed], method: .refresh, strict: true) == .agentError)
    }

    @Test func misspeltFleetWordsNameTheNearest() {
        for (args, message) in [(["fleet", "stauts"], "unknown fleet command 'stauts'; did you mean 'status'? (status, metrics, call or advance-clock)"),
                                (["fleet", "--socket-dri", "/x", "status"], "unknown option --socket-dri for 'fleet'; did you mean '--socket-dir'?")] {
            #expect(throws: UsageError(message, command: "fleet"), "\(args)") { try ControlArguments.parse(args, environment: [:]) }
        }
        do {
            _ = try ControlArguments.parse(["fleet", "call", "refersh"], environment: [:])
            Issue.record("accepted")
        } catch {
            #expect(error.message.hasPrefix("unknown method 'refersh'; did you mean 'refresh'? (one of get, "))
        }
    }

    /// Real sockets: two canned agents answer, a socket file without a listener is refused,
    /// a listener that never accepts costs its timeout, and the others do not wait for it.
    @Test func callerReportsDownInstancesWithoutHanging() throws {
        let a = try CannedServer { request in [#"{"jsonrpc":"2.0","id":ID,"result":{"state":"ready","method":"\#(request["method"]?.stringValue ?? "")"}}"#] }
        let b = try CannedServer { _ in [#"{"jsonrpc":"2.0","method":"featureFlagsDidUpdate","params":{}}"#,
                                         #"{"jsonrpc":"2.0","id":ID,"error":{"code":-32001,"message":"permission denied"}}"#] }
        let dir = a.directory.path
        let dead = dir + "/dead.sock"
        let deadFD = try CannedServer.listen(dead)
        close(deadFD)  // the file stays; nobody listens
        let wedged = dir + "/wedged.sock"
        let wedgedFD = try CannedServer.listen(wedged)  // listens, never accepts
        defer { close(wedgedFD) }
        let targets = [FleetTarget(name: "a", socketPath: a.path), FleetTarget(name: "b", socketPath: b.path),
                       FleetTarget(name: "dead", socketPath: dead), FleetTarget(name: "wedged", socketPath: wedged),
                       FleetTarget(name: "missing", socketPath: dir + "/missing.sock")]
        let start = Date()
        let answers = FleetCaller.call(targets, method: .status, params: [:], timeout: 1)
        let elapsed = Date().timeIntervalSince(start)
        #expect(answers.map(\.target.name) == ["a", "b", "dead", "wedged", "missing"])
        #expect(answers[0].outcome == .result(["state": "ready", "method": "status"]))
        #expect(answers[1].outcome == .error(RPCError(code: -32001, message: "permission denied")))
        #expect(answers[2].outcome == .down("connection refused on \(dead)"))
        #expect(answers[3].outcome == .down("no answer within 1 s"))
        #expect(answers[4].outcome == .missing("no socket at \(dir)/missing.sock"))
        #expect(elapsed >= 0.9 && elapsed < 2.5, "took \(elapsed) s")
        a.finish()
        b.finish()
    }

    @Test func socketDirectoryListing() throws {
        let temporary = TempDir(), dir = temporary.path
        for name in ["device-2.sock", "device-10.sock", "agent.sock", "notes.txt"] {
            #expect(FileManager.default.createFile(atPath: dir + "/" + name, contents: nil))
        }
        #expect(try FleetTargets.resolve(.socketDirectory(dir)).map(\.name) == ["agent", "device-10", "device-2"])
        // --expect: the expected names the directory lacks join the list, at DIR/NAME.sock.
        #expect(try FleetTargets.resolve(.socketDirectory(dir), expecting: ["device-2", "device-3"]).map(\.socketPath)
            == [dir + "/agent.sock", dir + "/device-10.sock", dir + "/device-2.sock", dir + "/device-3.sock"])
        #expect(try FleetTargets.sockets(in: dir, skipping: ["agent"]).map(\.socketPath) == [dir + "/device-10.sock", dir + "/device-2.sock"])
        try "[Fleet]\nDevices=3\nNamePrefix=qa\n".write(toFile: dir + "/fleet.conf", atomically: true, encoding: .utf8)
        #expect(try FleetTargets.resolve(.manifest(dir + "/fleet.conf")).map(\.socketPath)
            == ["/run/pushwoosh-agent/qa1.sock", "/run/pushwoosh-agent/qa2.sock", "/run/pushwoosh-agent/qa3.sock"])
        try "[Fleet]\nDevices=lots\n".write(toFile: dir + "/bad.conf", atomically: true, encoding: .utf8)
        #expect(throws: ClientError(exit: .usage, message: "\(dir)/bad.conf:2: Devices: invalid number \"lots\" (expected a whole number from 0 to 10000)")) {
            try FleetTargets.resolve(.manifest(dir + "/bad.conf"))
        }
    }
}
