import AgentCore
import AgentPosix
import AgentSystemd
import Glibc

/// The optional HTTP interface (docs/http.md F) as the daemon runs it: its listening socket
/// (`Listen=`, or the socket systemd passed as `http`), the token, the loop-driven server
/// and the routes.
final class HTTPService {
    private let server: LoopHTTPServer
    let interface: HTTPInterface
    private var settings: HTTPSettings
    /// What the last reading of `TokenFile=` found worth a warning (a token readable by others).
    private(set) var tokenWarning: String?
    private var listenFD: Int32
    /// For a `Listen=` path: the socket file, removed on stop.
    private var unixListener: UnixListener?
    /// Where it listens, for the log.
    let address: String

    var connectionCount: Int { server.connectionCount }

    /// Binds `Listen=` (or adopts `inheritedFD`) and reads the token; serving starts with `start`.
    init(loop: EventLoop, host: AgentOnLoop, metrics: Metrics, settings: HTTPSettings, socket: SocketSettings,
         inheritedFD: Int32?, onRefused: @escaping () -> Void, onRequestTimeout: @escaping () -> Void,
         metricsText: @escaping () -> String) throws(HTTPServiceError) {
        self.settings = settings
        let (token, warning) = try Self.readToken(settings.tokenFile)
        tokenWarning = warning
        if let inheritedFD {
            guard SystemdNotifier.isListeningStreamSocket(inheritedFD) else {
                throw HTTPServiceError("the socket passed as \"http\" (fd \(inheritedFD)) is not a listening stream socket")
            }
            _ = fcntl(inheritedFD, F_SETFL, fcntl(inheritedFD, F_GETFL) | O_NONBLOCK)
            listenFD = inheritedFD
            address = "fd \(inheritedFD) (socket activation)"
        } else {
            switch settings.listen {
            case nil:
                throw HTTPServiceError("no Listen= address")
            case .unix(let path):
                let listener: UnixListener
                do {
                    listener = try UnixListener(path: path, mode: mode_t(socket.mode), group: socket.group)
                } catch {
                    throw HTTPServiceError("Listen=\(path): \(error)")
                }
                unixListener = listener
                listenFD = fcntl(listener.fd, F_DUPFD_CLOEXEC, 3)  // libmicrohttpd closes its copy
                address = path
            case .ipv4Loopback(let port):
                (listenFD, address) = try Self.bindLoopback(ipv6: false, port: port)
            case .ipv6Loopback(let port):
                (listenFD, address) = try Self.bindLoopback(ipv6: true, port: port)
            }
        }
        interface = HTTPInterface(host: host, metrics: metrics, token: token, metricsText: metricsText)
        let interface = self.interface
        let limits = LoopHTTPServer.Limits(connections: settings.maxConnections, idle: settings.idleTimeout,
                                           requestRead: socket.requestReadTimeout)
        server = LoopHTTPServer(loop: loop, limits: limits, onRefused: onRefused, onRequestTimeout: onRequestTimeout) {
            interface.respond($0, reply: $1)
        }
    }

    func start() throws(HTTPServiceError) {
        let fd = listenFD
        listenFD = -1
        try server.start(listenFD: fd)
    }

    /// SIGHUP: the token file is read again and `RequestReadTimeout=` applies (the address
    /// and `MaxConnections=` need a restart). Returns what deserves a warning: a token
    /// readable by others, or `TokenFile=` gone from the configuration (requests are no
    /// longer checked).
    func reload(_ fresh: HTTPSettings, socket: SocketSettings) throws(HTTPServiceError) -> [String] {
        let (token, warning) = try Self.readToken(fresh.tokenFile)
        var warnings = warning.map { [$0] } ?? []
        if let old = settings.tokenFile, fresh.tokenFile == nil {
            warnings.append("TokenFile=\(old) removed from the configuration: the HTTP interface no longer requires a token; every local client may call it")
        }
        interface.token = token
        settings.tokenFile = fresh.tokenFile
        tokenWarning = warning
        server.limits.requestRead = socket.requestReadTimeout
        return warnings
    }

    func stop() {
        server.stop()
        if listenFD >= 0 { Glibc.close(listenFD) }
        listenFD = -1
        unixListener?.close()
        unixListener = nil
    }

    // MARK: - Pieces

    /// The token: the file's content without trailing whitespace. Never logged. A file
    /// others may write to (anyone could choose the token) is refused; one others may read
    /// (the token protects nothing from them) is read, with a warning to log.
    static func readToken(_ path: String?) throws(HTTPServiceError) -> (token: [UInt8]?, warning: String?) {
        guard let path else { return (nil, nil) }
        var info = stat()
        guard stat(path, &info) == 0 else {
            throw HTTPServiceError("TokenFile=\(path): cannot read it: \(String(cString: strerror(errno)))")
        }
        let octal = String(info.st_mode & 0o7777, radix: 8)
        let mode = "mode " + String(repeating: "0", count: max(0, 4 - octal.count)) + octal
        if info.st_mode & S_IWOTH != 0 || (info.st_mode & S_IWGRP != 0 && info.st_gid != getegid()) {
            throw HTTPServiceError("TokenFile=\(path): writable by others (\(mode)): anyone could set the token; chmod 0600 (or 0640 with the agent's group)")
        }
        guard var bytes = ProcessMetrics.readFile(path) else {
            throw HTTPServiceError("TokenFile=\(path): cannot read it: \(String(cString: strerror(errno)))")
        }
        while let last = bytes.last, last == 0x0A || last == 0x0D || last == 0x20 || last == 0x09 { bytes.removeLast() }
        guard !bytes.isEmpty else { throw HTTPServiceError("TokenFile=\(path): the file is empty") }
        let warning = info.st_mode & S_IROTH != 0
            ? "TokenFile=\(path) is readable by every local user (\(mode)): the token keeps no local client out; chmod 0600 (or 0640 with the agent's group)"
            : nil
        return (bytes, warning)
    }

    /// A listening TCP socket on 127.0.0.1 or ::1 (nonblocking, close-on-exec,
    /// TCP_NODELAY inherited by accepted sockets).
    static func bindLoopback(ipv6: Bool, port: UInt16) throws(HTTPServiceError) -> (Int32, String) {
        let family = ipv6 ? AF_INET6 : AF_INET
        let fd = socket(family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        let shown = ipv6 ? "[::1]:\(port)" : "127.0.0.1:\(port)"
        guard fd >= 0 else { throw HTTPServiceError("Listen=\(shown): socket: \(String(cString: strerror(errno)))") }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        var bound: Int32
        if ipv6 {
            setsockopt(fd, Int32(IPPROTO_IPV6), IPV6_V6ONLY, &one, socklen_t(MemoryLayout<Int32>.size))
            var addr = sockaddr_in6()
            addr.sin6_family = sa_family_t(AF_INET6)
            addr.sin6_port = port.bigEndian
            addr.sin6_addr = in6addr_loopback
            bound = withUnsafePointer(to: &addr) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in6>.size)) }
            }
        } else {
            var addr = sockaddr_in()
            addr.sin_family = sa_family_t(AF_INET)
            addr.sin_port = port.bigEndian
            addr.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
            bound = withUnsafePointer(to: &addr) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
        }
        if bound == 0 { bound = listen(fd, 128) }
        guard bound == 0 else {
            let message = String(cString: strerror(errno))
            Glibc.close(fd)
            throw HTTPServiceError("Listen=\(shown): \(message)")
        }
        // The bound port (Listen=…:0 picks one).
        var storage = sockaddr_in6()
        var length = socklen_t(MemoryLayout<sockaddr_in6>.size)
        _ = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        let actual = UInt16(bigEndian: storage.sin6_port)  // sin_port and sin6_port share the offset
        return (fd, ipv6 ? "[::1]:\(actual)" : "127.0.0.1:\(actual)")
    }
}
