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
         inheritedFD: Int32?, keepAliveSeconds: Double = OFREPEvents.keepAliveSeconds,
         onRefused: @escaping () -> Void, onEvicted: @escaping () -> Void, onRequestTimeout: @escaping () -> Void,
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
        // Event streams may take half the connections: the rest stay for evaluations and /healthz.
        interface = HTTPInterface(host: host, metrics: metrics, token: token, maxEventStreams: max(1, settings.maxConnections / 2),
                                  keepAliveSeconds: keepAliveSeconds, metricsText: metricsText)
        let interface = self.interface
        let limits = LoopHTTPServer.Limits(connections: settings.maxConnections, idle: settings.idleTimeout,
                                           requestRead: socket.requestReadTimeout)
        server = LoopHTTPServer(loop: loop, limits: limits, onRefused: onRefused, onEvicted: onEvicted, onRequestTimeout: onRequestTimeout) {
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

    /// The served flags may have changed: event streams hear of it if they did.
    func flagsMayHaveChanged() { interface.events.flagsMayHaveChanged() }

    func stop() {
        interface.events.stop()
        server.stop()
        if listenFD >= 0 { Glibc.close(listenFD) }
        listenFD = -1
        unixListener?.close()
        unixListener = nil
    }

    // MARK: - Pieces

    /// The token: the file's content without trailing whitespace. Never logged. Read with
    /// AgentPosix's `TrustedFile` (docs/shared-host.md L.4: no symlink, FIFO or device, at most
    /// 64 KiB); a file others may write to (anyone could choose the token) is refused; one
    /// others may read (the token protects nothing from them) is read, with a warning to log.
    static func readToken(_ path: String?) throws(HTTPServiceError) -> (token: [UInt8]?, warning: String?) {
        guard let path else { return (nil, nil) }
        let file: (bytes: [UInt8], info: stat)
        do {
            file = try TrustedFile.read(path: path, maxBytes: 64 * 1024, refuseWritableByOthers: true)
        } catch {
            switch error.problem {
            case .writableByOthers(let mode):
                throw HTTPServiceError("TokenFile=\(path): writable by others (\(mode)): anyone could set the token; chmod 0600 (or 0640 with the agent's group)")
            case .system:
                throw HTTPServiceError("TokenFile=\(path): cannot read it: \(error.reason)")
            default:
                throw HTTPServiceError("TokenFile=\(path): \(error.reason)")
            }
        }
        var bytes = file.bytes
        let info = file.info
        while let last = bytes.last, last == 0x0A || last == 0x0D || last == 0x20 || last == 0x09 { bytes.removeLast() }
        guard !bytes.isEmpty else { throw HTTPServiceError("TokenFile=\(path): the file is empty") }
        let warning = info.st_mode & S_IROTH != 0
            ? "TokenFile=\(path) is readable by every local user (\(TrustedFileError.modeText(info.st_mode))): the token keeps no local client out; chmod 0600 (or 0640 with the agent's group)"
            : nil
        return (bytes, warning)
    }

    /// A listening TCP socket on 127.0.0.1 or ::1 (AgentPosix's `TCPListener`), and the address
    /// it is bound to as `Listen=` shows it.
    static func bindLoopback(ipv6: Bool, port: UInt16) throws(HTTPServiceError) -> (Int32, String) {
        let shown = ipv6 ? "[::1]:\(port)" : "127.0.0.1:\(port)"
        do {
            let (fd, actual) = try TCPListener.listen(host: ipv6 ? "::1" : "127.0.0.1", port: port, backlog: 128)
            return (fd, ipv6 ? "[::1]:\(actual)" : "127.0.0.1:\(actual)")
        } catch {
            throw HTTPServiceError("Listen=\(shown): \(error.message)")
        }
    }
}
