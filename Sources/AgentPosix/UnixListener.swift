import Glibc

/// A listening Unix stream socket: either created on a path (and removed
/// again on close) or adopted from systemd socket activation (never removed:
/// the path belongs to the `.socket` unit).
///
/// Not thread-safe: create it anywhere, then use it on the loop thread.
public final class UnixListener {
    /// The socket file's path (for an adopted socket, the one it is bound
    /// to, if any).
    public let path: String?
    /// The listening descriptor (nonblocking, close-on-exec).
    public let fd: Int32
    /// Whether the path is unlinked on close: true when this listener created
    /// the socket file.
    public let ownsPath: Bool

    private var descriptor: FileDescriptor?
    private var loop: EventLoop?
    private var pausedTimer: EventLoop.TimerHandle?

    /// Binds and listens on `path`.
    ///
    /// The socket file is created under `umask(0177)` (owner-only from the
    /// first instant), then set to `mode` and, when `group` is given, to that
    /// group. A stale socket file (nobody accepts on it) is replaced; any
    /// other file on the path is refused, as is a live listener. umask is
    /// process-wide: a file another thread creates during `bind` gets at
    /// most mode 0600, i.e. tighter, never looser.
    public init(path: String, mode: mode_t = 0o660, group: String? = nil, backlog: Int32 = 128) throws(UnixSocketError) {
        var (address, length) = try UnixSocket.address(path)
        var groupID: gid_t?
        if let group {
            guard let id = UnixSocket.groupID(named: group) else {
                throw UnixSocketError(.unknownGroup, path: path, detail: group)
            }
            groupID = id
        }
        try Self.removeStaleSocket(path)

        let socket = try UnixSocket.makeSocket(path: path, nonBlocking: true)
        let previousMask = umask(0o177)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.bind(socket.rawValue, $0, length) }
        }
        let bindErrno = errno
        umask(previousMask)
        if bound == -1 {
            if bindErrno == EADDRINUSE {
                // Someone created the path between the check and bind.
                throw UnixSocketError(.alreadyListening, path: path)
            }
            throw UnixSocketError(.system, path: path, cause: PosixError(errno: bindErrno, call: "bind", path: path))
        }
        do {
            try retryingEINTR("chmod", path: path) { chmod(path, mode) }
            if let groupID {
                try retryingEINTR("chown", path: path) { chown(path, uid_t.max, groupID) }
            }
            try retryingEINTR("listen", path: path) { listen(socket.rawValue, backlog) }
        } catch {
            unlink(path)
            throw UnixSocketError(.system, path: path, cause: error)
        }
        self.path = path
        self.fd = socket.rawValue
        self.ownsPath = true
        self.descriptor = consume socket
    }

    /// Adopts a listening socket passed by systemd (`LISTEN_FDS`). Its path,
    /// mode and group are the `.socket` unit's and are left alone, also on
    /// close. Sets `O_NONBLOCK` and `FD_CLOEXEC`.
    public init(adopting rawFD: Int32) throws(UnixSocketError) {
        let descriptor = FileDescriptor(rawFD)
        let name = UnixSocket.boundPath(rawFD) ?? "fd \(rawFD)"
        var accepting: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        guard getsockopt(rawFD, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &length) == 0, accepting == 1 else {
            _ = descriptor.take()  // not ours to close: the caller passed a wrong fd
            throw UnixSocketError(.notListening, path: name)
        }
        do {
            try descriptor.setNonBlockingAndCloseOnExec()
        } catch {
            _ = descriptor.take()
            throw UnixSocketError(.system, path: name, cause: error)
        }
        self.path = UnixSocket.boundPath(rawFD)
        self.fd = rawFD
        self.ownsPath = false
        self.descriptor = consume descriptor
    }

    deinit { close() }

    /// Stops listening: unregisters from the loop, closes the socket, and
    /// removes the socket file if this listener created it.
    public func close() {
        guard descriptor != nil else { return }
        if let loop {
            if let pausedTimer { loop.cancel(pausedTimer) }
            loop.unregister(fd)
        }
        loop = nil
        descriptor = nil
        if ownsPath, let path { unlink(path) }
    }

    /// Accepts one connection: nonblocking and close-on-exec; nil when none
    /// is waiting (or it vanished before being accepted).
    public func accept() throws(PosixError) -> FileDescriptor? {
        while true {
            let client = Glibc.accept(fd, nil, nil)
            if client >= 0 {
                let connection = FileDescriptor(client)
                try connection.setNonBlockingAndCloseOnExec()
                return connection
            }
            switch errno {
            case EINTR: continue
            case EAGAIN, EWOULDBLOCK, ECONNABORTED, EPROTO: return nil
            case let code: throw PosixError(errno: code, call: "accept", path: path)
            }
        }
    }

    /// Accepts connections on `loop` and hands each to `onAccept` (loop
    /// thread). Up to 64 per readiness event, to stay fair to the clients
    /// already connected. When the process is out of descriptors (`EMFILE`,
    /// `ENFILE`) or memory, accepting pauses for `retryDelay` instead of
    /// spinning on a socket that stays readable; `onError` hears about it.
    public func start(
        on loop: EventLoop,
        retryDelay: Double = 0.1,
        onError: @escaping (PosixError) -> Void = { _ in },
        onAccept: @escaping (consuming FileDescriptor) -> Void
    ) throws(PosixError) {
        precondition(self.loop == nil, "listener already started")
        precondition(descriptor != nil, "listener is closed")
        self.loop = loop
        let fd = self.fd
        try loop.register(fd, interest: .read) { [unowned self] _ in
            for _ in 0..<64 {
                do throws(PosixError) {
                    guard let connection = try self.accept() else { return }
                    onAccept(connection)
                } catch {
                    onError(error)
                    // Pause: the socket stays readable until the backlog is
                    // accepted, and there is nothing to accept it with.
                    try? loop.modify(fd, interest: .none)
                    self.pausedTimer = loop.schedule(after: retryDelay) { [weak self] in
                        guard let self, self.descriptor != nil else { return }
                        self.pausedTimer = nil
                        try? loop.modify(fd, interest: .read)
                    }
                    return
                }
                if self.descriptor == nil { return }  // onAccept closed us
            }
        }
    }

    /// Removes `path` if it is a socket nobody accepts on; throws if it is
    /// something else or somebody answers.
    static func removeStaleSocket(_ path: String) throws(UnixSocketError) {
        var info = stat()
        if lstat(path, &info) == -1 {
            if errno == ENOENT { return }
            throw UnixSocketError(.system, path: path, cause: PosixError(errno: errno, call: "lstat", path: path))
        }
        guard info.st_mode & S_IFMT == S_IFSOCK else {
            throw UnixSocketError(.notASocket, path: path)
        }
        // Probe with a nonblocking connect: it never waits, and a full
        // backlog (EAGAIN) still means somebody is listening.
        let probe = try UnixSocket.makeSocket(path: path, nonBlocking: true)
        var (address, length) = try UnixSocket.address(path)
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(probe.rawValue, $0, length) }
        }
        let code = errno
        if result == 0 || code == EAGAIN || code == EINPROGRESS || code == EINTR {
            throw UnixSocketError(.alreadyListening, path: path)
        }
        guard code == ECONNREFUSED else {
            throw UnixSocketError(.system, path: path, cause: PosixError(errno: code, call: "connect", path: path))
        }
        if unlink(path) == -1 && errno != ENOENT {
            throw UnixSocketError(.system, path: path, cause: PosixError(errno: errno, call: "unlink", path: path))
        }
    }
}
