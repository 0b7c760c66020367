import AgentCore
import AgentWire
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Why the CLI could not talk to the agent.
public struct ClientError: Error, Sendable, Equatable, CustomStringConvertible {
    public var exit: ExitCode
    public var message: String

    public init(exit: ExitCode, message: String) {
        self.exit = exit
        self.message = message
    }

    public var description: String { message }

    /// The message and exit code for a failed `connect(2)` on `path`.
    public static func connectFailed(errno code: Int32, path: String) -> ClientError {
        switch code {
        case ENOENT, ENOTDIR:
            ClientError(exit: .notRunning, message: "pushwoosh-agentd is not running (no socket at \(path))")
        case ECONNREFUSED:
            ClientError(exit: .notRunning, message: "pushwoosh-agentd is not running (connection refused on \(path))")
        case EACCES, EPERM:
            ClientError(exit: .permissionDenied, message: "permission denied on \(path): join the socket's group")
        case EAGAIN:
            ClientError(exit: .notRunning, message: "pushwoosh-agentd is busy (too many pending connections on \(path))")
        default:
            ClientError(exit: .notRunning, message: "cannot connect to \(path): \(String(cString: strerror(code)))")
        }
    }
}

/// A small blocking Unix-socket client: connect, write request lines, read answer lines.
public final class SocketClient {
    private let fd: Int32
    public let path: String
    private var framer = LineFramer(maximumLineLength: 64 << 20)
    private var queued: [[UInt8]] = []
    private var nextID = 1

    /// Connects to `path`; `timeout` bounds every later read (nil: no limit).
    public init(path: String, timeout: Double?) throws(ClientError) {
        self.path = path
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        guard !bytes.isEmpty, bytes.count < capacity else {
            throw ClientError(exit: .usage, message: "socket path must be 1 to \(capacity - 1) bytes: \(path)")
        }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else {
            throw ClientError(exit: .notRunning, message: "cannot create a socket: \(String(cString: strerror(errno)))")
        }
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        if result != 0 {
            let code = errno
            close(fd)
            throw ClientError.connectFailed(errno: code, path: path)
        }
        self.fd = fd
        setTimeout(timeout)
    }

    deinit { close(fd) }

    /// Bounds each read (SO_RCVTIMEO); nil waits forever.
    public func setTimeout(_ seconds: Double?) {
        var tv = timeval()
        if let seconds, seconds > 0 {
            tv.tv_sec = Int(seconds)
            tv.tv_usec = Int((seconds - Double(Int(seconds))) * 1_000_000)
        }
        _ = setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
    }

    /// Writes all of `bytes` (MSG_NOSIGNAL: a vanished agent is an error, not SIGPIPE).
    public func write(_ bytes: [UInt8]) throws(ClientError) {
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { raw in
                send(fd, raw.baseAddress! + offset, raw.count - offset, Int32(MSG_NOSIGNAL))
            }
            if n < 0 {
                if errno == EINTR { continue }
                throw ClientError(exit: .notRunning, message: "lost the connection to pushwoosh-agentd: \(String(cString: strerror(errno)))")
            }
            offset += n
        }
    }

    /// The next line from the agent, or nil when it closed the connection.
    public func readLine() throws(ClientError) -> [UInt8]? {
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        while queued.isEmpty {
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n < 0 {
                let code = errno
                if code == EINTR { continue }
                if code == EAGAIN || code == EWOULDBLOCK {
                    throw ClientError(exit: .notRunning, message: "no answer from pushwoosh-agentd on \(path) in time")
                }
                throw ClientError(exit: .notRunning, message: "lost the connection to pushwoosh-agentd: \(String(cString: strerror(code)))")
            }
            if n == 0 { return nil }
            var tooLong = false
            buffer.withUnsafeBytes { raw in
                framer.process(UnsafeRawBufferPointer(rebasing: raw[..<n])) { frame in
                    switch frame {
                    case .line(let line): queued.append(Array(line))
                    case .lineTooLong: tooLong = true
                    }
                }
            }
            if tooLong { throw ClientError(exit: .agentError, message: "answer from pushwoosh-agentd too long") }
        }
        return queued.removeFirst()
    }

    /// Sends one request and waits for the answer with its id; notifications
    /// that arrive meanwhile go to `onNotification`.
    public func call(method: SocketMethod, params: [String: JSONValue],
                     onNotification: (String, JSONValue) -> Void = { _, _ in }) throws(ClientError) -> RPCResponse {
        let id = RPCID.number(Double(nextID))
        nextID += 1
        try write(RPCEncoder.request(id: id, method: method, params: params))
        while true {
            guard let line = try readLine() else {
                throw ClientError(exit: .notRunning, message: "pushwoosh-agentd closed the connection before answering")
            }
            let message: RPCServerMessage
            do {
                message = try RPCServerMessage.parse(line)
            } catch {
                throw ClientError(exit: .agentError, message: "unexpected answer from pushwoosh-agentd: \(error)")
            }
            switch message {
            case .response(let response) where response.id == id:
                return response
            case .response(let response) where response.id == .null:
                // The agent could not read our request (parse error, line too long).
                return response
            case .notification(let method, let params):
                onNotification(method, params)
            case .response, .batch:
                continue
            }
        }
    }
}
