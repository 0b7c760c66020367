import AgentCore
import AgentPosix
import AgentTestSupport
import AgentWire
import Foundation
import Glibc
import HarnessSupport
import Testing
@testable import AgentDaemon
import ToolSupport

/// The socket server in-process (docs/socket-api.md B): the real event loop, `ControlServer` and the
/// agent on one thread of this process, each client on a socketpair, the server reached
/// through its own `accept` with the peer credentials a test chooses. No daemon process and
/// no sleeps: every read below waits for bytes with a time-out.
final class InProcessServer {
    let loop: EventLoop
    /// The clients' ends, in the order given (each read bounded by 5 s).
    private(set) var clients: [LineClient] = []
    private let thread: Thread
    private let done = DispatchSemaphore(value: 0)

    /// One client per entry of `peers`: nil is the credentials the kernel gives (this
    /// process's user: control access), a value stands for another caller.
    init(peers: [PeerCredentials?], settings: SocketSettings = SocketSettings(path: "/unused"),
         flags: [FeatureFlag] = [FeatureFlag(key: "new_checkout", isEnabled: true, ruleId: "r1", properties: ["n": 3])]) throws {
        let loop = try EventLoop()
        self.loop = loop
        var serverEnds: [(Int32, PeerCredentials?)] = []
        for peer in peers {
            var fds: [Int32] = [0, 0]
            guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &fds) == 0 else {
                throw PosixError(errno: errno, call: "socketpair")
            }
            clients.append(LineClient(descriptor: fds[0], timeout: 5))
            serverEnds.append((fds[1], peer))
        }
        let done = self.done
        let ends = serverEnds
        thread = Thread {
            let clock = DeviceClock(base: SystemClock(), mode: .system)
            let host = AgentOnLoop(loop: loop, clock: clock, settings: VirtualLoop.defaultSettings(),
                                   transport: AnswersOnTheLoop(loop: loop, flags: flags), store: MemoryStore())
            let agent = host.agent!
            let server = ControlServer(loop: loop, host: host, settings: settings, log: Log(minimum: .error))
            for (fd, peer) in ends {
                if let peer { server.accept(FileDescriptor(fd), credentials: peer) } else { server.accept(FileDescriptor(fd)) }
            }
            agent.start(StoreLoad(state: nil))
            try? loop.run()
            server.closeAll()
            done.signal()
        }
        thread.start()
    }

    deinit {
        loop.stop()
        done.wait()
    }

    func send(_ client: Int, _ text: String) { clients[client].send(text) }

    /// The next `count` lines from `client` (fewer if it closes or 5 s pass), parsed.
    func lines(_ client: Int, _ count: Int = 1) -> [JSONValue] {
        var out: [JSONValue] = []
        while out.count < count, let line = clients[client].readLineBytes() {
            out.append((try? JSONReader.parse(line)) ?? .string("unparsable"))
        }
        return out
    }

    /// True when the server closed `client`'s connection within 5 s (after what it sent).
    func closedByServer(_ client: Int) -> Bool {
        while clients[client].readLineBytes() != nil {}
        return clients[client].readsEOF()
    }

    func request(_ id: Int, _ method: SocketMethod, _ params: [String: JSONValue] = [:]) -> String {
        String(decoding: RPCEncoder.request(id: .number(Double(id)), method: method, params: params), as: UTF8.self)
    }
}

/// The flags request answered on the loop at once, as the emulator would; every other call OK.
final class AnswersOnTheLoop: HTTPTransport {
    let loop: EventLoop
    let flags: [FeatureFlag]
    init(loop: EventLoop, flags: [FeatureFlag]) {
        self.loop = loop
        self.flags = flags
    }

    func send(_ request: HTTPRequest, completion: @escaping (HTTPOutcome) -> Void) {
        let outcome = request.method == .getFeatureFlags ? ScriptedTransport.flags(flags) : ScriptedTransport.ok()
        loop.deferToEndOfIteration { completion(outcome) }
    }
}

@Suite struct ControlServerTests {
    static let nobody = PeerCredentials(pid: 1, uid: 65_534, gid: 65_534)

    /// B.3: reads for everyone; a change of state only with control access, refused naming
    /// the method, and nothing changed.
    @Test func aCallerWithoutControlAccessMayOnlyRead() throws {
        let s = try InProcessServer(peers: [Self.nobody, nil])
        s.send(0, s.request(1, .setUserId, ["userId": "mallory"]) + s.request(2, .isEnabled, ["key": "new_checkout", "default": false]))
        let answers = s.lines(0, 2)
        #expect(answers.first?["error"]?["code"] == -32001)
        #expect(answers.first?["error"]?["message"]?.stringValue?.contains("setUserId") == true)
        #expect(answers.last?["id"] == 2 && answers.last?["result"]?["enabled"] == true)
        s.send(1, s.request(3, .status))
        #expect(s.lines(1).first?["result"]?["userId"] != "mallory")
    }

    /// B: pipelined requests are answered in order; a batch is one array in request order,
    /// without answers for its notifications; a blank line is ignored.
    @Test func pipelinesAndBatches() throws {
        let s = try InProcessServer(peers: [nil])
        s.send(0, s.request(1, .get, ["key": "new_checkout"]) + "\n" + s.request(2, .isEnabled, ["key": "nope", "default": true])
                  + #"[{"jsonrpc":"2.0","id":"a","method":"status"},{"jsonrpc":"2.0","method":"refresh"},{"jsonrpc":"2.0","id":"b","method":"bogus"}]"# + "\n")
        let answers = s.lines(0, 3)
        #expect(answers.count == 3)
        #expect(answers[0]["id"] == 1 && answers[0]["result"]?["flag"]?["key"] == "new_checkout")
        #expect(answers[1]["id"] == 2 && answers[1]["result"]?["errorCode"] == "FLAG_NOT_FOUND")
        let batch = answers[2].arrayValue ?? []
        #expect(batch.map { $0["id"] } == ["a", "b"])
        #expect(batch.last?["error"]?["code"] == -32601)
    }

    /// B.3: a client that closes its writing side still gets every answer, then the close.
    @Test func halfCloseGetsEveryAnswerThenTheClose() throws {
        let s = try InProcessServer(peers: [nil])
        s.send(0, s.request(1, .refresh) + s.request(2, .status))
        shutdown(s.clients[0].fd, Int32(SHUT_WR))
        let answers = s.lines(0, 2)
        #expect(Set(answers.compactMap { $0["id"] }) == [1, 2])
        #expect(answers.first { $0["id"] == 1 }?["result"]?["error"] == .null)
        #expect(s.closedByServer(0))
    }

    /// B.3: MaxConnections: the client over it is told why, then closed; the others served.
    @Test func aClientOverMaxConnectionsIsToldWhyAndClosed() throws {
        var settings = SocketSettings(path: "/unused")
        settings.maxConnections = 1
        let s = try InProcessServer(peers: [Self.nobody, Self.nobody], settings: settings)
        let refused = s.lines(1).first
        #expect(refused?["error"]?["code"] == -32000)
        #expect(refused?["error"]?["message"]?.stringValue?.contains("MaxConnections=1") == true)
        #expect(s.closedByServer(1))
        s.send(0, s.request(1, .status))
        #expect(s.lines(0).first?["id"] == 1)
    }

    /// B: malformed input gets its error and the connection stays usable.
    @Test func badLinesAreAnsweredAndTheConnectionStays() throws {
        let s = try InProcessServer(peers: [nil])
        s.send(0, "{not json\n" + #"{"jsonrpc":"2.0","id":7,"method":"get","params":{"key":"a","colour":"red"}}"# + "\n" + s.request(8, .clock))
        let answers = s.lines(0, 3)
        #expect(answers.map { $0["error"]?["code"] } == [-32700, -32602, -32004])
        #expect(answers[1]["error"]?["data"]?["parameter"] == "colour")
    }
}
