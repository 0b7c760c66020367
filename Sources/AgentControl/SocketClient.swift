import AgentCore
import AgentPosix
import AgentWire
import Glibc
import ToolSupport

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

/// agentctl's connection to one agent: AgentPosix's `LineClient`, its failures said as
/// agentctl says them (a message for the user and an exit code).
public final class SocketClient {
    private let client: LineClient
    public let path: String

    /// Connects to `path`; `timeout` bounds every later read (nil: no limit).
    public init(path: String, timeout: Double?) throws(ClientError) {
        self.path = path
        do {
            client = try LineClient(connecting: path, timeout: timeout)
        } catch {
            switch error.code {
            case .pathTooLong:
                throw ClientError(exit: .usage, message: "socket path must be 1 to 107 bytes: \(path)")
            default:
                guard let cause = error.cause else { throw ClientError(exit: .notRunning, message: "\(error)") }
                if cause.call == "connect" { throw ClientError.connectFailed(errno: cause.errno, path: path) }
                throw ClientError(exit: .notRunning, message: "cannot create a socket: \(cause.message)")
            }
        }
    }

    /// Bounds each read (SO_RCVTIMEO); nil waits forever.
    public func setTimeout(_ seconds: Double?) { client.setTimeout(seconds) }

    /// Writes all of `bytes` (MSG_NOSIGNAL: a vanished agent is an error, not SIGPIPE).
    public func write(_ bytes: [UInt8]) throws(ClientError) {
        do { try client.write(bytes) } catch { throw Self.lost(error) }
    }

    /// The next line from the agent, or nil when it closed the connection.
    public func readLine() throws(ClientError) -> [UInt8]? {
        do { return try client.next() } catch { throw read(error) }
    }

    /// Sends one request and waits for the answer with its id; notifications
    /// that arrive meanwhile go to `onNotification`.
    public func call(method: SocketMethod, params: [String: JSONValue],
                     onNotification: (String, JSONValue) -> Void = { _, _ in }) throws(ClientError) -> RPCResponse {
        do {
            return try client.call(method: method, params: params, onNotification: onNotification)
        } catch {
            switch error {
            case .write(let cause): throw Self.lost(cause)
            case .read(let cause): throw read(cause)
            case .closed: throw ClientError(exit: .notRunning, message: "pushwoosh-agentd closed the connection before answering")
            case .malformed(let why): throw ClientError(exit: .agentError, message: "unexpected answer from pushwoosh-agentd: \(why)")
            }
        }
    }

    private func read(_ error: LineClient.ReadError) -> ClientError {
        switch error {
        case .timedOut: ClientError(exit: .notRunning, message: "no answer from pushwoosh-agentd on \(path) in time")
        case .tooLong: ClientError(exit: .agentError, message: "answer from pushwoosh-agentd too long")
        case .system(let cause): Self.lost(cause)
        }
    }

    private static func lost(_ error: PosixError) -> ClientError {
        ClientError(exit: .notRunning, message: "lost the connection to pushwoosh-agentd: \(error.message)")
    }
}
