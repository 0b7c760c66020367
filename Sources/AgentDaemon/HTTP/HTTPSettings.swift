import AgentConfigFile
import Glibc

/// `[HTTP]` (docs/http.md F): the optional HTTP interface, off unless `Listen=` is set or
/// systemd passes a socket named `http`.
public struct HTTPSettings: Sendable, Equatable {
    /// `Listen=`: where to serve; nil is off.
    public var listen: HTTPListenAddress?
    /// `TokenFile=`: a file holding the token requests must carry; nil: no token.
    public var tokenFile: String?
    /// Seconds an HTTP connection may stay idle before it is closed. Not in the file
    /// (docs/http.md F names two keys); `PUSHWOOSH_AGENT_HTTP_IDLE_TIMEOUT` overrides it for tests.
    public var idleTimeout: UInt32 = 60
    /// `MaxConnections=`: HTTP connections at once, apart from the socket's.
    public var maxConnections: Int = 256
    /// Request bodies larger than this get 413.
    public static let maximumBodyBytes = 64 * 1024

    public init() {}
}

/// A `Listen=` value: loopback only, or a Unix socket path.
public enum HTTPListenAddress: Sendable, Equatable, CustomStringConvertible {
    case ipv4Loopback(port: UInt16)
    case ipv6Loopback(port: UInt16)
    case unix(path: String)

    public var description: String {
        switch self {
        case .ipv4Loopback(let port): "127.0.0.1:\(port)"
        case .ipv6Loopback(let port): "[::1]:\(port)"
        case .unix(let path): path
        }
    }

    /// `127.0.0.1:PORT`, `[::1]:PORT`, `localhost:PORT` (127.0.0.1) or an absolute path.
    /// Port 0 picks a free port (the `ready` log line says which).
    static func parse(_ text: String) throws(ValueError) -> HTTPListenAddress {
        if text.hasPrefix("/") { return .unix(path: try ConfigValue.socketPath(text)) }
        let refusal = ValueError("invalid address \"\(text)\" (expected 127.0.0.1:PORT, [::1]:PORT, localhost:PORT or an absolute socket path; other addresses are refused)")
        guard let colon = text.lastIndex(of: ":") else { throw refusal }
        let host = text[..<colon]
        let portText = text[text.index(after: colon)...]
        guard !portText.isEmpty, portText.allSatisfy({ $0.isASCII && $0.isNumber }), let port = UInt16(portText) else {
            throw ValueError("invalid port in \"\(text)\" (expected 0-65535)")
        }
        switch host {
        case "127.0.0.1", "localhost": return .ipv4Loopback(port: port)
        case "[::1]": return .ipv6Loopback(port: port)
        default: throw refusal
        }
    }
}
