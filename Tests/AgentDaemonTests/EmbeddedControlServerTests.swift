import AgentCore
import AgentPosix
import AgentTestSupport
import AgentWire
import FoundationEssentials
import Testing
@testable import AgentDaemon

/// The control server bytes in, bytes out (EmbeddedControlServer): the test owns the loop and
/// turns it; no thread, no sleep, no daemon.
@Suite struct EmbeddedControlServerTests {
    static let nobody = PeerCredentials(pid: 1, uid: 65_534, gid: 65_534)

    /// A server over an agent that has fetched `new_checkout` (on the loop, at start).
    func embedded() throws -> EmbeddedControlServer {
        let loop = try EventLoop()
        let clock = DeviceClock(base: SystemClock(), mode: .system)
        let host = AgentOnLoop(loop: loop, clock: clock, settings: VirtualLoop.defaultSettings(),
                               transport: AnswersOnTheLoop(loop: loop, flags: [FeatureFlag(key: "new_checkout", isEnabled: true, ruleId: "r1")]),
                               store: MemoryStore())
        let server = ControlServer(loop: loop, host: host, settings: SocketSettings(path: "/unused"), log: Log(minimum: .error))
        host.agent.start(StoreLoad(state: nil))
        return EmbeddedControlServer(server: server, loop: loop)
    }

    func lines(_ bytes: [UInt8]) -> [JSONValue] {
        bytes.split(separator: UInt8(ascii: "\n")).map { (try? JSONReader.parse(Array($0))) ?? .string("unparsable") }
    }

    @Test func pipelinedRequestsInOneWriteGetTheirAnswersInOneRead() throws {
        let e = try embedded()
        let c = try e.connect()
        _ = e.read(c)  // the start-up refresh has run on the loop by now
        e.write(c, Array(#"{"jsonrpc":"2.0","id":1,"method":"isEnabled","params":{"key":"new_checkout","default":false}}"#.utf8) + [10]
                   + Array(#"{"jsonrpc":"2.0","id":2,"method":"get","params":{"key":"nope"}}"#.utf8) + [10])
        let answers = lines(e.read(c))
        #expect(answers.count == 2)
        #expect(answers.first?["result"]?["enabled"] == true)
        #expect(answers.last?["id"] == 2 && answers.last?["result"]?["flag"] == .null)
    }

    @Test func aReadOnlyCallerIsRefusedAControlMethodAndNothingChanges() throws {
        let e = try embedded()
        let c = try e.connect(as: Self.nobody)
        e.write(c, Array(#"{"jsonrpc":"2.0","id":7,"method":"setUserId","params":{"userId":"mallory"}}"#.utf8) + [10])
        let answer = lines(e.read(c)).first
        #expect(answer?["error"]?["code"] == -32001)
        #expect(e.server.host.agent.userId != "mallory")
    }

    @Test func aLineSplitAcrossWritesIsOneRequest() throws {
        let e = try embedded()
        let c = try e.connect()
        let line = Array(#"{"jsonrpc":"2.0","id":3,"method":"status"}"#.utf8) + [10]
        e.write(c, Array(line[..<10]))
        #expect(e.read(c).isEmpty)  // half a line: nothing to answer yet
        e.write(c, Array(line[10...]))
        #expect(lines(e.read(c)).first?["result"]?["state"] == "ready")
    }

    /// One reading of each request, through the server: `{"method":"get","method":"metrics"}` is
    /// -32600 naming the key (it ran `metrics`), and a key with a NUL is not the flag it starts
    /// with (`new_checkout\u0000` is not found, never cut to `new_checkout`).
    @Test func aRequestWithADuplicateKeyIsRefusedAndANULKeyIsAnotherKey() throws {
        let e = try embedded()
        let c = try e.connect()
        _ = e.read(c)
        e.write(c, Array(#"{"jsonrpc":"2.0","id":1,"method":"get","method":"metrics","params":{"key":"new_checkout"}}"#.utf8) + [10]
                   + Array(#"{"jsonrpc":"2.0","id":2,"method":"get","params":{"key":"new_checkout\u0000"}}"#.utf8) + [10]
                   + Array(#"{"jsonrpc":"2.0","id":3,"method":"isEnabled","params":{"key":"new_checkout\u001b","default":false}}"#.utf8) + [10])
        let answers = lines(e.read(c))
        #expect(answers.count == 3)
        #expect(answers.first?["error"]?["code"] == -32600)
        #expect(answers.first?["error"]?["message"]?.stringValue?.contains("duplicate key \"method\"") == true, "\(answers)")
        #expect(answers.dropFirst().first?["result"]?["flag"] == .null)
        #expect(answers.dropFirst().first?["result"]?["errorCode"] == "FLAG_NOT_FOUND")
        #expect(answers.last?["result"]?["enabled"] == false)
    }

    /// A server with a controlled device clock whose agent talks to `serverURL` (answers come
    /// from the loop: nothing leaves the process).
    func clockServer(serverURL: String) throws -> EmbeddedControlServer {
        let loop = try EventLoop()
        let clock = DeviceClock(base: SystemClock(), mode: .controlled)
        var settings = VirtualLoop.defaultSettings()
        settings.server.serverURL = serverURL
        let transport = MeteredTransport(AnswersOnTheLoop(loop: loop, flags: []), metrics: Metrics())
        let host = AgentOnLoop(loop: loop, clock: clock, settings: settings, transport: transport, store: MemoryStore())
        let server = ControlServer(loop: loop, host: host, settings: SocketSettings(path: "/unused"), log: Log(minimum: .error))
        server.clockController = DeviceClockController(clock: clock, host: host, transport: transport, loop: loop, log: Log(minimum: .error))
        host.agent.start(StoreLoad(state: nil))
        return EmbeddedControlServer(server: server, loop: loop)
    }

    /// The answer to one `advanceClock` with `params`.
    func advance(_ e: EmbeddedControlServer, _ params: String) throws -> JSONValue? {
        let c = try e.connect()
        e.write(c, Array(#"{"jsonrpc":"2.0","id":1,"method":"advanceClock","params":\#(params)}"#.utf8) + [10])
        for _ in 0..<200 {
            if let answer = lines(e.read(c)).first { return answer }
        }
        return nil
    }

    /// docs/device-clock.md H: more than a day in one `advanceClock` against a server not on this
    /// host (a real Pushwoosh) needs `"allowRemote": true`; a day or less, or a lab's emulator on
    /// loopback, needs nothing. (Before: a year against the real Pushwoosh sent 8,760 requests.)
    @Test func advancingMoreThanADayAgainstARemoteServerNeedsAllowRemote() throws {
        let remote = try clockServer(serverURL: "https://ABCDE-12345.api.pushwoosh.com/json/1.3/")
        let refused = try advance(remote, #"{"seconds":86401}"#)
        #expect(refused?["error"]?["code"] == -32602)
        #expect(refused?["error"]?["data"]?["parameter"] == "allowRemote", "\(String(describing: refused))")
        #expect(refused?["error"]?["message"]?.stringValue?.contains(#"pass "allowRemote": true"#) == true)
        let inTwoDays = Date().addingTimeInterval(2 * 86_400).formatted(.iso8601)
        #expect(try advance(remote, #"{"to":"\#(inTwoDays)"}"#)?["error"]?["data"]?["parameter"] == "allowRemote")
        #expect(try advance(remote, #"{"seconds":86401,"allowRemote":"yes"}"#)?["error"]?["data"]?["parameter"] == "allowRemote")
        #expect(try advance(remote, #"{"seconds":86400}"#)?["result"]?["offsetSeconds"] != nil)
        #expect(try advance(remote, #"{"seconds":86401,"allowRemote":true}"#)?["result"]?["offsetSeconds"] != nil)
        for lab in ["http://127.0.0.1:8080/json/1.3/", "http://localhost:1/json/1.3/", "http://[::1]:1/json/1.3/"] {
            #expect(PushwooshAPI.isLoopback(baseURL: lab), "\(lab)")
        }
        for other in ["https://ABCDE-12345.api.pushwoosh.com/json/1.3/", "http://127.0.0.1.example/json/1.3/", "http://10.0.0.1/json/1.3/"] {
            #expect(!PushwooshAPI.isLoopback(baseURL: other), "\(other)")
        }
        let lab = try clockServer(serverURL: "http://127.0.0.1:9/json/1.3/")
        #expect(try advance(lab, #"{"seconds":90000}"#)?["result"]?["offsetSeconds"] != nil)
    }
}
