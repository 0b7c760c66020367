import AgentCore
import AgentPosix
import AgentWire
import Foundation
#if canImport(Glibc)
import Glibc
import ToolSupport
#endif

// docs/fleet.md E.1: one socket method on every instance of a fleet, in parallel, from one
// thread: non-blocking connects, one request each, and a poll(2) loop that collects the
// answers. Each instance has its own deadline, so one that is down or wedged costs its
// timeout, never the others' time.

/// An instance to ask: its name and socket.
public struct FleetTarget: Sendable, Equatable {
    public var name: String
    public var socketPath: String
    public init(name: String, socketPath: String) {
        self.name = name
        self.socketPath = socketPath
    }
}

/// What one instance answered.
public enum FleetOutcome: Sendable, Equatable {
    case result(JSONValue)
    case error(RPCError)
    /// Not answering: refused, closed, or no answer in time.
    case down(String)
    /// Not there: no socket at its path (stopped, never started, or a wrong name).
    case missing(String)
}

public struct FleetAnswer: Sendable, Equatable {
    public var target: FleetTarget
    public var outcome: FleetOutcome
    /// Seconds from the connect to the answer.
    public var seconds: Double
}

public enum FleetCaller {
    /// Connections open at once at most (each is a descriptor).
    public static let defaultParallelism = 512

    /// Calls `method` with `params` on every target; answers in the targets' order.
    public static func call(_ targets: [FleetTarget], method: SocketMethod, params: [String: JSONValue],
                            timeout: Double, parallelism: Int = defaultParallelism) -> [FleetAnswer] {
        let limit = max(1, min(parallelism, raiseDescriptorLimit() - 16))
        let request = RPCEncoder.request(id: .number(1), method: method, params: params)
        var answers = [FleetAnswer?](repeating: nil, count: targets.count)
        var active: [Exchange] = []
        var next = 0
        while next < targets.count || !active.isEmpty {
            while active.count < limit, next < targets.count {
                let exchange = Exchange(index: next, target: targets[next], request: request, timeout: timeout)
                next += 1
                if let done = exchange.finished {
                    answers[exchange.index] = FleetAnswer(target: exchange.target, outcome: done, seconds: 0)
                } else {
                    active.append(exchange)
                }
            }
            guard !active.isEmpty else { continue }
            let now = monotonicSeconds()
            let nearest = active.map(\.deadline).min()!
            var fds = active.map { pollfd(fd: $0.fd, events: Int16($0.wantsWrite ? POLLOUT : POLLIN), revents: 0) }
            let wait = Int32(max(0, min(1000, ((nearest - now) * 1000).rounded(.up))))
            let n = poll(&fds, nfds_t(fds.count), wait)
            if n < 0 && errno != EINTR { break }
            let after = monotonicSeconds()
            var still: [Exchange] = []
            for (i, exchange) in active.enumerated() {
                if fds[i].revents != 0 { exchange.service(revents: fds[i].revents) }
                if exchange.finished == nil, after >= exchange.deadline {
                    exchange.finish(.down("no answer within \(TimeSpan.seconds(timeout))"))
                }
                if let done = exchange.finished {
                    answers[exchange.index] = FleetAnswer(target: exchange.target, outcome: done, seconds: after - exchange.started)
                } else {
                    still.append(exchange)
                }
            }
            active = still
        }
        return answers.enumerated().map { i, answer in
            answer ?? FleetAnswer(target: targets[i], outcome: .down("not asked"), seconds: 0)
        }
    }

    /// Lifts the soft RLIMIT_NOFILE to the hard one (1,000 instances need 1,000
    /// descriptors; the default soft limit is 1,024); returns the soft limit.
    static func raiseDescriptorLimit() -> Int {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return 1024 }
        if limit.rlim_cur < limit.rlim_max {
            var raised = limit
            raised.rlim_cur = min(limit.rlim_max, 1 << 20)
            if setrlimit(Int32(RLIMIT_NOFILE.rawValue), &raised) == 0 { limit = raised }
        }
        return Int(min(limit.rlim_cur, 1 << 20))
    }
}

/// One instance's connection: connect, write the request, read the answer line.
private final class Exchange {
    let index: Int
    let target: FleetTarget
    let started = monotonicSeconds()
    let deadline: Double
    private(set) var fd: Int32 = -1
    private(set) var finished: FleetOutcome?
    private var connecting = false
    private var pending: [UInt8]
    private var framer = LineFramer(maximumLineLength: LineClient.defaultMaximumLineLength)
    /// Why the request could not be written (the answer is still read: it may have come first).
    private var writeError: String?

    var wantsWrite: Bool { connecting || !pending.isEmpty }

    init(index: Int, target: FleetTarget, request: [UInt8], timeout: Double) {
        self.index = index
        self.target = target
        self.pending = request
        deadline = started + timeout
        var address: (sockaddr_un, socklen_t)
        do {
            address = try UnixSocket.address(target.socketPath)
            fd = try UnixSocket.makeSocket(path: target.socketPath, nonBlocking: true).take()
        } catch {
            finished = .down(error.code == .pathTooLong ? "socket path too long: \(target.socketPath)" : "cannot create a socket: \(error)")
            return
        }
        let length = address.1
        let result = withUnsafePointer(to: &address.0) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, length) }
        }
        if result != 0 {
            if errno == EINPROGRESS {
                connecting = true
            } else if errno == ENOENT || errno == ENOTDIR {
                finish(.missing(Self.describe(connectError: errno, path: target.socketPath)))
            } else {
                finish(.down(Self.describe(connectError: errno, path: target.socketPath)))
            }
        }
    }

    deinit { if fd >= 0 { close(fd) } }

    static func describe(connectError code: Int32, path: String) -> String {
        switch code {
        case ENOENT, ENOTDIR: "no socket at \(path)"
        case ECONNREFUSED: "connection refused on \(path)"
        case EACCES, EPERM: "permission denied on \(path)"
        case EAGAIN: "busy (too many pending connections on \(path))"
        default: "cannot connect to \(path): \(String(cString: strerror(code)))"
        }
    }

    func finish(_ outcome: FleetOutcome) {
        guard finished == nil else { return }
        finished = outcome
        if fd >= 0 {
            close(fd)
            fd = -1
        }
    }

    func service(revents: Int16) {
        guard finished == nil else { return }
        if connecting {
            var code: Int32 = 0
            var length = socklen_t(MemoryLayout<Int32>.size)
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &code, &length)
            if code != 0 { return finish(.down(Self.describe(connectError: code, path: target.socketPath))) }
            connecting = false
        }
        if !pending.isEmpty {
            let n = pending.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard n < 0 else {
                pending.removeFirst(n)
                return
            }
            if errno == EAGAIN || errno == EINTR { return }
            // The agent may have answered and closed before the request was written (a refused
            // connection's -32000): that answer, read next, is the outcome; the failed write
            // only when none came.
            writeError = String(cString: strerror(errno))
            pending = []
        }
        var buffer = [UInt8](repeating: 0, count: 16 * 1024)
        let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        if n < 0 {
            if errno == EAGAIN || errno == EINTR { return }
            return finish(.down("lost the connection: \(writeError ?? String(cString: strerror(errno)))"))
        }
        if n == 0 { return finish(.down(writeError.map { "lost the connection: \($0)" } ?? "closed the connection before answering")) }
        var lines: [[UInt8]] = []
        var tooLong = false
        buffer.withUnsafeBytes { raw in
            framer.process(UnsafeRawBufferPointer(rebasing: raw[..<n])) { frame in
                switch frame {
                case .line(let line): lines.append(Array(line))
                case .lineTooLong: tooLong = true
                }
            }
        }
        if tooLong { return finish(.down("answer too long")) }
        for line in lines {
            guard case .response(let response)? = try? RPCServerMessage.parse(line) else { continue }  // notifications
            switch response.outcome {
            case .success(let value): return finish(.result(value))
            case .failure(let error): return finish(.error(error))
            }
        }
    }
}
