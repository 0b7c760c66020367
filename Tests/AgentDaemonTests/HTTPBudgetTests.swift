import AgentCore
@testable import AgentDaemon
import AgentPosix
import Foundation
import Glibc
import HarnessSupport
import Synchronization
import Testing
import ToolSupport

/// docs/http.md F, "Limits": the HTTP budget against one local user who fills it with event
/// streams and with connections that pipeline evaluations and never read their answers, on
/// an agent without `TokenFile=` (nobody has a token to be let in with). The real agent and
/// emulator.
@Suite(.serialized) struct HTTPBudgetTests {
    let http = HTTPInterfaceTests()
    static let evaluation = Array("POST /ofrep/v1/evaluate/flags/new_checkout HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 14\r\n\r\n{\"context\":{}}".utf8)

    /// Streams up to their half of the budget (and a few more), the other half and more held by
    /// clients that pipeline evaluations and never read, reconnecting whenever the agent closes
    /// one (an attack renewable at will): `/healthz` and an evaluation are each answered within
    /// 1 s in at least 18 of 20 tries. (Before: 0 of 20 each; every new connection was refused,
    /// the pipelining connections being "answered" for as long as they stayed unread.)
    @Test func streamsAndNonReadingPipelinesLeaveRoomForHealthz() throws {
        let port = UInt16(try freePort())
        let (_, agent, endpoint) = try http.start(listen: "127.0.0.1:\(port)", http: "MaxConnections=32")
        let attack = PipelineAttack(port: port, streams: 20, pipelines: 24)
        let thread = Thread { attack.run() }
        thread.start()
        defer { attack.stop() }
        // The budget full: 16 streams (half of 32), the rest pipelines whose answers pile up.
        #expect(eventually(timeout: 10) {
            (metric((try? LineClient(path: agent.socketPath))?.call("metrics")["result"]?["text"]?.stringValue ?? "",
                    "pushwoosh_agent_http_connections") ?? 0) >= 32
        }, "the attack never filled the budget")
        sleep(1)
        func served(_ method: String, _ path: String, body: String?) -> Int {
            var count = 0
            for _ in 0..<20 {
                let started = Date()
                let status = (try? HTTPClient(endpoint, timeout: 1))?.request(method, path, body: body).status
                if status == 200, Date().timeIntervalSince(started) < 1 { count += 1 }
                usleep(100_000)
            }
            return count
        }
        let healthz = served("GET", "/healthz", body: nil)
        let evaluations = served("POST", "/ofrep/v1/evaluate/flags/new_checkout", body: #"{"context":{}}"#)
        let (written, reconnects) = attack.stop()
        print("HTTPBudgetTests: /healthz within 1 s \(healthz)/20, evaluation within 1 s \(evaluations)/20; "
              + "the attack wrote \(written) bytes, reconnected \(reconnects) times")
        #expect(healthz >= 18, "/healthz answered within 1 s in \(healthz) of 20 tries")
        #expect(evaluations >= 18, "an evaluation answered within 1 s in \(evaluations) of 20 tries")
        #expect(written > 1 << 20, "the pipelines wrote only \(written) bytes")
        let text = try LineClient(path: agent.socketPath).call("metrics")["result"]?["text"]?.stringValue ?? ""
        print("HTTPBudgetTests: evicted \(metric(text, "pushwoosh_agent_http_connections_evicted_total") ?? -1), refused \(metric(text, "pushwoosh_agent_http_connections_refused_total") ?? -1)")
        #expect(metric(text, "pushwoosh_agent_http_connections_evicted_total") ?? 0 >= 1)
        #expect(agent.process.isRunning)
    }
}

/// One local user's attack on the HTTP budget, on a thread of its own: `streams` event streams
/// opened and held, `pipelines` connections each writing evaluations as fast as the agent takes
/// them and never reading (with a receive buffer of 4 KiB), and a connection the agent closes
/// is opened again.
final class PipelineAttack: Sendable {
    let port: UInt16
    let streams: Int
    let pipelines: Int
    private let state = Mutex<(stopped: Bool, done: Bool, written: Int, reconnects: Int)>((false, false, 0, 0))

    init(port: UInt16, streams: Int, pipelines: Int) {
        self.port = port
        self.streams = streams
        self.pipelines = pipelines
    }

    func run() {
        var held: [Int32] = []
        for _ in 0..<streams {
            guard let fd = connectTCP(port) else { continue }
            _ = "GET /ofrep/v1/events HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n".withCString {
                send(fd, $0, strlen($0), Int32(MSG_NOSIGNAL))
            }
            held.append(fd)
        }
        // A small receive buffer (set before connecting, so the kernel does not grow it): the
        // answers pile up in the agent's send queue after a few KiB, not 32 MiB.
        func open() -> Int32 {
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            guard fd >= 0 else { return -1 }
            var size: Int32 = 4096
            setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = port.bigEndian
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            guard connected == 0 else {
                close(fd)
                return -1
            }
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            return fd
        }
        let batch = Array(repeating: HTTPBudgetTests.evaluation, count: 200).flatMap { $0 }
        var written = 0, reconnects = 0
        // Whatever the socket takes of a batch; false when the agent closed the connection.
        func write(_ fd: Int32) -> Bool {
            let n = batch.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL) | Int32(MSG_DONTWAIT)) }
            if n > 0 { written += n }
            return n >= 0 || errno == EAGAIN || errno == EWOULDBLOCK
        }
        var fds = (0..<pipelines).map { _ in open() }
        var closedAt = [Double](repeating: 0, count: pipelines)
        while !state.withLock({ $0.stopped }) {
            let now = monotonicSeconds()
            for i in fds.indices {
                if fds[i] >= 0 {
                    if write(fds[i]) { continue }
                    close(fds[i])
                    fds[i] = -1
                    closedAt[i] = now
                }
                // Again after 0.2 s, requests first: never waiting for a request, never evicted for it.
                guard now - closedAt[i] >= 0.2 else { continue }
                fds[i] = open()
                if fds[i] >= 0 { _ = write(fds[i]) }
                reconnects += 1
            }
            usleep(20_000)
        }
        for fd in held + fds where fd >= 0 { close(fd) }
        state.withLock {
            $0.written = written
            $0.reconnects = reconnects
            $0.done = true
        }
    }

    /// Stops the attack (idempotent); what it wrote and how often it opened a connection again.
    @discardableResult
    func stop() -> (written: Int, reconnects: Int) {
        state.withLock { $0.stopped = true }
        while !state.withLock({ $0.done }) { usleep(10_000) }
        return state.withLock { ($0.written, $0.reconnects) }
    }
}
