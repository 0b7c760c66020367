import AgentCore
import AgentPosix
import AgentWire
import Glibc
import Testing
import ToolSupport

/// docs/socket-api.md B.3: a connection the agent refuses gets the reason (`-32000`, id null),
/// and may be closed before the client has written its request. The client reads that answer
/// before it reports its failed write.
@Suite struct LineClientRefusalTests {
    static let refusal = #"{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"too many connections (MaxConnections=1)"}}"# + "\n"

    /// A client whose peer wrote `written` and closed, before the client wrote anything.
    func refusedClient() -> LineClient {
        var fds: [Int32] = [0, 0]
        precondition(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds) == 0)
        try? BlockingSocket.sendAll(fds[0], Array(Self.refusal.utf8))
        close(fds[0])
        return LineClient(descriptor: fds[1], timeout: 2)
    }

    @Test("call(method:): the refusal is the answer, not the failed write (Broken pipe)")
    func callReadsTheRefusal() throws {
        let client = refusedClient()
        let response = try client.call(method: .status, params: [:])
        guard case .failure(let error) = response.outcome else {
            Issue.record("a refusal read as \(response)")
            return
        }
        #expect(error.code == -32000)
        #expect(error.message == "too many connections (MaxConnections=1)")
        #expect(response.id == .null)
    }

    @Test("call(_:): the refusal is said (`failed: …-32000…`), not \"the other end is gone\"")
    func resultCallSaysTheRefusal() {
        do {
            let result = try refusedClient().call(SocketMethod.status)
            Issue.record("a refusal read as the result \(result)")
        } catch {
            #expect(error.description.contains("-32000") && error.description.contains("too many connections"), "\(error)")
        }
    }

    @Test("request(_:): the refusal is the answer")
    func requestReadsTheRefusal() {
        let answer = refusedClient().request(.status)
        #expect(answer?["error"]?["code"] == -32000)
    }

    @Test("Nothing came: the failed write is the reason")
    func nothingCameIsTheWrite() {
        var fds: [Int32] = [0, 0]
        precondition(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds) == 0)
        close(fds[0])
        let client = LineClient(descriptor: fds[1], timeout: 2)
        #expect(throws: LineClient.CallError.write(PosixError(errno: EPIPE, call: "send"))) {
            try client.call(method: .status, params: [:])
        }
    }
}
