import AgentPosix
import Glibc

/// The receiving end of systemd's notification protocol, for tests and benchmarks: a
/// `SOCK_DGRAM` Unix socket bound at `path`. Point a process's
/// `NOTIFY_SOCKET` at `path` and read what it sends (`READY=1`, `STATUS=…`).
/// Replaces a stale socket file at `path`; removes the socket file when released.
public final class NotifyReceiver: Sendable {
    public let path: String
    private let fd: Int32

    public init(path: String) throws(UnixSocketError) {
        self.path = path
        self.fd = try Self.bindDatagramSocket(path)
    }

    /// A non-blocking `SOCK_DGRAM` Unix socket bound at `path` (a stale socket file there is
    /// replaced); the caller owns the descriptor.
    public static func bindDatagramSocket(_ path: String) throws(UnixSocketError) -> Int32 {
        unlink(path)
        var (address, length) = try UnixSocket.address(path)
        let socket = try UnixSocket.makeSocket(path: path, nonBlocking: true, type: SOCK_DGRAM)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.bind(socket.rawValue, $0, length) }
        }
        if bound == -1 {
            throw UnixSocketError(.system, path: path, cause: PosixError(errno: errno, call: "bind", path: path))
        }
        return socket.take()
    }

    deinit {
        Glibc.close(fd)
        unlink(path)
    }

    /// The next datagram as text, waiting at most `timeout` seconds; nil
    /// when none came.
    public func receive(timeout: Double) -> String? {
        let deadline = monotonicSeconds() + timeout
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = buffer.withUnsafeMutableBytes { Glibc.recv(fd, $0.baseAddress, $0.count, 0) }
            if count >= 0 { return String(decoding: buffer[..<count], as: UTF8.self) }
            guard errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR else { return nil }
            let remaining = deadline - monotonicSeconds()
            if remaining <= 0 { return nil }
            var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            _ = poll(&descriptor, 1, Int32((remaining * 1000).rounded(.up)))
        }
    }

    /// Every datagram until none arrives for `quiet` seconds.
    public func receiveAll(quiet: Double = 0.05) -> [String] {
        var messages: [String] = []
        while let message = receive(timeout: quiet) { messages.append(message) }
        return messages
    }

    /// Drops datagrams already queued.
    public func drain() {
        var buffer = [UInt8](repeating: 0, count: 4096)
        while buffer.withUnsafeMutableBytes({ recv(fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }) > 0 {}
    }

    /// Waits for a datagram with a line equal to `line` (e.g. `READY=1`); returns the
    /// monotonic time it was received and the datagram, or nil after `timeout` or as soon
    /// as `alive` says the sender is gone.
    public func wait(for line: String, timeout: Double, alive: () -> Bool = { true }) -> (at: Double, datagram: String)? {
        let deadline = monotonicSeconds() + timeout
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let remaining = deadline - monotonicSeconds()
            if remaining <= 0 { return nil }
            var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let ready = poll(&pfd, 1, Int32(min(remaining, 0.1) * 1000) + 1)
            if ready <= 0 {
                if !alive() { return nil }
                continue
            }
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
            let at = monotonicSeconds()
            guard n > 0 else { continue }
            let text = String(decoding: buffer[..<n], as: UTF8.self)
            if text.split(separator: "\n").contains(where: { $0 == line }) { return (at, text) }
        }
    }
}
