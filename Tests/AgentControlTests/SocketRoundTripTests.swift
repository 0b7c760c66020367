import AgentCore
import AgentPosix
import AgentWire
import Foundation
import Testing
@testable import AgentControl
#if canImport(Glibc)
import Glibc
import HarnessSupport
#endif

/// A real Unix-socket server for one connection: for each request line it
/// receives, it writes the lines `answer` returns (with `ID` replaced by the
/// request's id; a last line `CLOSE` closes the connection after writing; no
/// lines close it at once). Runs on its own thread; the client is the real one.
final class CannedServer: @unchecked Sendable {
    let path: String
    let directory = TempDir()
    private let listenFD: Int32
    private let answer: @Sendable (JSONValue) -> [String]
    private let done = DispatchSemaphore(value: 0)
    private let lock = NSLock()
    private var _received: [JSONValue] = []

    var received: [JSONValue] { lock.withLock { _received } }

    init(answer: @escaping @Sendable (JSONValue) -> [String]) throws {
        path = directory.file("agent.sock")
        self.answer = answer
        listenFD = try Self.listen(path)
        let thread = Thread { [self] in self.serve() }
        thread.start()
    }

    static func listen(_ path: String) throws -> Int32 {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        var (address, length) = try UnixSocket.address(path)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) }
        }
        guard fd >= 0, bound == 0, Glibc.listen(fd, 4) == 0 else { throw POSIXError(.EADDRINUSE) }
        return fd
    }

    private func serve() {
        defer { done.signal() }
        let conn = accept(listenFD, nil, nil)
        guard conn >= 0 else { return }
        defer { close(conn) }
        var framer = LineFramer()
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = buffer.withUnsafeMutableBytes { recv(conn, $0.baseAddress, $0.count, 0) }
            if n <= 0 { return }
            var requests: [JSONValue] = []
            buffer.withUnsafeBytes { raw in
                framer.process(UnsafeRawBufferPointer(rebasing: raw[..<n])) { frame in
                    if case .line(let line) = frame, let json = try? JSONReader.parse(line) { requests.append(json) }
                }
            }
            for request in requests {
                lock.withLock { _received.append(request) }
                let id = JSONWriter.string(request["id"] ?? .null)
                var lines = answer(request).map { $0.replacingOccurrences(of: "ID", with: id) + "\n" }
                if lines.isEmpty { return }  // close the connection
                let closeAfter = lines.last == "CLOSE\n"
                if closeAfter { lines.removeLast() }
                // Write in two pieces to exercise the client's framing.
                let bytes = Array(lines.joined().utf8)
                let half = bytes.count / 2
                _ = bytes.withUnsafeBytes { send(conn, $0.baseAddress, half, Int32(MSG_NOSIGNAL)) }
                usleep(1000)  // real time on purpose: the halves reach the client in separate reads
                _ = bytes.withUnsafeBytes { send(conn, $0.baseAddress! + half, bytes.count - half, Int32(MSG_NOSIGNAL)) }
                if closeAfter { return }
            }
        }
    }

    /// Waits for the connection to end, then stops listening (the directory goes with the server).
    func finish() {
        _ = done.wait(timeout: .now() + 5)
        close(listenFD)
    }
}

final class CapturedOutput: ControlOutput, @unchecked Sendable {
    private let lock = NSLock()
    private var _out: [String] = []
    private var _err: [String] = []
    var out: [String] { lock.withLock { _out } }
    var err: [String] { lock.withLock { _err } }
    func out(_ line: String) { lock.withLock { _out.append(line) } }
    func err(_ line: String) { lock.withLock { _err.append(line) } }
}

@Suite struct SocketRoundTripTests {
    /// The CLI run with `arguments` against a `CannedServer` that answers every request with
    /// `lines` (none: it closes the connection), found through `--socket` or, with
    /// `viaEnvironment`, `PUSHWOOSH_AGENT_SOCKET`; returned once the connection has ended.
    func agentctl(_ arguments: [String], answering lines: [String], viaEnvironment: Bool = false) throws
        -> (code: Int32, output: CapturedOutput, server: CannedServer) {
        let server = try CannedServer { _ in lines }
        let output = CapturedOutput()
        let code = viaEnvironment
            ? ControlTool.run(arguments: arguments, environment: ["PUSHWOOSH_AGENT_SOCKET": server.path], output: output)
            : ControlTool.run(arguments: ["--socket", server.path] + arguments, environment: [:], output: output)
        server.finish()
        return (code, output, server)
    }

    @Test func isEnabledRoundTrip() throws {
        let (code, output, server) = try agentctl(["is-enabled", "new_checkout", "--default", "false"], answering: [
                // A notification and another id's answer arrive first: both are skipped.
                #"{"jsonrpc":"2.0","method":"featureFlagsDidUpdate","params":{"reason":"refresh","changed":["x"]}}"#,
                #"{"jsonrpc":"2.0","id":999,"result":{"enabled":false}}"#,
                #"{"jsonrpc":"2.0","id":ID,"result":{"enabled":true,"reason":"TARGETING_MATCH","source":"network","ageSeconds":3}}"#,
            ])
        #expect(code == 0)
        #expect(output.out == ["true"])
        #expect(output.err.isEmpty)
        #expect(server.received == [["jsonrpc": "2.0", "id": 1, "method": "isEnabled", "params": ["key": "new_checkout", "default": false]]])
    }

    @Test func getWithJSON() throws {
        let (code, output, _) = try agentctl(["get", "nope", "--json"],
            answering: [#"{"jsonrpc":"2.0","id":ID,"result":{"flag":null,"reason":"ERROR","errorCode":"FLAG_NOT_FOUND","source":"cache","ageSeconds":10}}"#], viaEnvironment: true)
        #expect(code == 0)
        #expect(output.out == [#"{"ageSeconds":10,"errorCode":"FLAG_NOT_FOUND","flag":null,"reason":"ERROR","source":"cache"}"#])
    }

    @Test func agentErrorExitsOne() throws {
        let (code, output, _) = try agentctl(["status"],
            answering: [#"{"jsonrpc":"2.0","id":ID,"error":{"code":-32602,"message":"missing required parameter 'key'"}}"#])
        #expect(code == 1)
        #expect(output.err == ["pushwoosh-agentd: error -32602: missing required parameter 'key'"])
    }

    @Test func permissionDeniedExitsFour() throws {
        let (code, output, _) = try agentctl(["set-user", "alice"],
            answering: [#"{"jsonrpc":"2.0","id":ID,"error":{"code":-32001,"message":"permission denied: 'setUserId'"}}"#])
        #expect(code == 4)
        #expect(output.err.first?.contains("-32001") == true)
    }

    @Test func failedRefreshExitsOne() throws {
        let (code, output, _) = try agentctl(["refresh"],
            answering: [#"{"jsonrpc":"2.0","id":ID,"result":{"error":{"domain":"PWFeatureFlagsErrorDomain","code":0,"message":"network unreachable"},"sent":true}}"#])
        #expect(code == 1)
        #expect(output.out == ["refresh failed: network unreachable (PWFeatureFlagsErrorDomain code 0)"])
    }

    @Test func watchPrintsNotificationsUntilTheAgentCloses() throws {
        let server = try CannedServer { request in
            guard request["method"] == "subscribe" else { return [] }
            return [
                #"{"jsonrpc":"2.0","id":ID,"result":{}}"#,
                #"{"jsonrpc":"2.0","method":"featureFlagsDidUpdate","params":{"reason":"refresh","changed":["a","b"]}}"#,
                #"{"jsonrpc":"2.0","method":"featureFlagsDidUpdate","params":{"reason":"expired","changed":[]}}"#,
                "CLOSE",
            ]
        }
        let output = CapturedOutput()
        let fixed = Date(timeIntervalSince1970: 0)
        let code = ControlTool.run(arguments: ["--socket", server.path, "--timeout", "2", "watch"], environment: [:], output: output,
                                   now: { fixed }, timeZone: TimeZone(secondsFromGMT: 0)!)
        server.finish()
        #expect(code == 3)
        #expect(output.err.last == "pushwoosh-agentctl: pushwoosh-agentd closed the connection")
        #expect(output.out == ["1970-01-01T00:00:00.000Z refresh: changed a, b", "1970-01-01T00:00:00.000Z expired: no flags changed"])
    }

    @Test func agentClosingBeforeAnsweringExitsThree() throws {
        let (code, output, _) = try agentctl(["status"], answering: [])
        #expect(code == 3)
        #expect(output.err == ["pushwoosh-agentctl: pushwoosh-agentd closed the connection before answering"])
    }

    @Test func notRunning() throws {
        let output = CapturedOutput()
        let missing = "/tmp/pushwoosh-agentctl-test-\(UUID().uuidString.prefix(8)).sock"
        #expect(ControlTool.run(arguments: ["--socket", missing, "status"], environment: [:], output: output) == 3)
        #expect(output.err == ["pushwoosh-agentctl: pushwoosh-agentd is not running (no socket at \(missing))"])

        // A socket file nobody listens on: connection refused.
        let temporary = TempDir(), dir = temporary.path
        let stale = dir + "/agent.sock"
        close(try CannedServer.listen(stale))
        let refused = CapturedOutput()
        #expect(ControlTool.run(arguments: ["--socket", stale, "status"], environment: [:], output: refused) == 3)
        #expect(refused.err == ["pushwoosh-agentctl: pushwoosh-agentd is not running (connection refused on \(stale))"])
    }

    @Test func usageErrorExitsTwoWithoutConnecting() {
        let output = CapturedOutput()
        #expect(ControlTool.run(arguments: ["get"], environment: [:], output: output) == 2)
        #expect(output.err == ["pushwoosh-agentctl: 'get' needs KEY\nTry 'pushwoosh-agentctl get --help'."])
        let help = CapturedOutput()
        #expect(ControlTool.run(arguments: ["status", "--help"], environment: [:], output: help) == 0)
        #expect(help.out.first?.hasPrefix("Usage: pushwoosh-agentctl") == true)
    }
}
