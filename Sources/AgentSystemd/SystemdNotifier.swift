import AgentPosix
import CSystemd
import Glibc

/// What sending a notification did.
public enum NotifyOutcome: Sendable, Equatable {
    /// Delivered to the service manager.
    case sent
    /// `NOTIFY_SOCKET` is not set: not running under systemd (or not
    /// `Type=notify`). Not an error.
    case notConfigured
    /// The receiver's queue is full (it is not reading, e.g. a service manager busy
    /// with a `daemon-reload`): nothing was sent; try again later.
    case wouldBlock
    /// Sending failed with this errno.
    case failed(Int32)
}

/// The service side of systemd's notification protocol (`sd_notify(3)`): datagrams of
/// `KEY=value` lines to the `AF_UNIX` socket named by `NOTIFY_SOCKET` (a path, or
/// `@name` for an abstract socket).
///
/// Sending never blocks. libsystemd's `sd_notify` sends on a blocking socket, and a
/// datagram socket whose receiver's queue is full (`net.unix.max_dgram_qlen`, 10 on
/// Debian; measured: the 12th unread datagram blocks) blocks the sender until the
/// receiver reads: a single-threaded daemon would stop serving its socket, its timers
/// and even `SIGTERM` (a soak runner that stopped reading its notify sockets
/// hung an agent). This sender uses a non-blocking socket and reports `.wouldBlock`
/// instead; `NotificationBacklog` keeps what must still be said.
public final class SystemdNotifier {
    /// The socket named by `NOTIFY_SOCKET`, or nil.
    public let socketPath: String?
    private let fd: Int32

    /// Reads `NOTIFY_SOCKET` (without unsetting it).
    public convenience init() {
        self.init(socketPath: getenv("NOTIFY_SOCKET").map { String(cString: $0) })
    }

    /// Sends to `socketPath` (nil or empty: nowhere, every call is `.notConfigured`).
    public init(socketPath: String?) {
        self.socketPath = socketPath.flatMap { $0.isEmpty ? nil : $0 }
        fd = self.socketPath == nil
            ? -1 : socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
    }

    deinit {
        if fd >= 0 { close(fd) }
    }

    /// `READY=1` (and `STATUS=` when given): startup is complete, or a
    /// reload is finished.
    @discardableResult
    public func ready(status: String? = nil) -> NotifyOutcome {
        send(SystemdMessage.ready(status: status))
    }

    /// `STATUS=…`: one line for `systemctl status`.
    @discardableResult
    public func status(_ text: String) -> NotifyOutcome {
        send(SystemdMessage.status(text))
    }

    /// `WATCHDOG=1`.
    @discardableResult
    public func watchdog() -> NotifyOutcome {
        send(SystemdMessage.watchdog())
    }

    /// `RELOADING=1` with `MONOTONIC_USEC=` (now, `CLOCK_MONOTONIC`), in one
    /// datagram, as `Type=notify-reload` (systemd ≥ 253) requires; older
    /// versions ignore the timestamp. Send `ready()` when the reload is done.
    @discardableResult
    public func reloading(status: String? = nil) -> NotifyOutcome {
        send(SystemdMessage.reloading(monotonicMicroseconds: Self.monotonicMicroseconds(), status: status))
    }

    /// `STOPPING=1`: shutdown has begun.
    @discardableResult
    public func stopping(status: String? = nil) -> NotifyOutcome {
        send(SystemdMessage.stopping(status: status))
    }

    /// Sends one datagram, never waiting.
    @discardableResult
    public func send(_ message: String) -> NotifyOutcome {
        guard let path = socketPath else { return .notConfigured }
        guard fd >= 0 else { return .failed(EBADF) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        var name = Array(path.utf8)
        let abstract = name.first == UInt8(ascii: "@")
        if abstract { name[0] = 0 }
        guard name.count < MemoryLayout.size(ofValue: address.sun_path), name.first == 0 || name.first == UInt8(ascii: "/") else {
            return .failed(EINVAL)
        }
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: name) }
        // An abstract name is exactly its bytes; a path is NUL-terminated (the zeroed rest).
        let length = socklen_t(MemoryLayout<sa_family_t>.size + name.count + (abstract ? 0 : 1))
        var sent: Int
        repeat {
            sent = message.utf8CString.withUnsafeBufferPointer { text in
                withUnsafePointer(to: &address) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                        sendto(fd, text.baseAddress, text.count - 1, Int32(MSG_NOSIGNAL) | Int32(MSG_DONTWAIT), $0, length)
                    }
                }
            }
        } while sent < 0 && errno == EINTR
        if sent >= 0 { return .sent }
        switch errno {
        case EAGAIN, EWOULDBLOCK, ENOBUFS: return .wouldBlock
        case let e: return .failed(e)
        }
    }

    /// The watchdog interval systemd expects pings within (`WatchdogSec=`),
    /// in seconds; nil when the watchdog is off for this process. Ping at
    /// half of it, from the loop that serves requests, so a wedged loop
    /// stops the pings.
    public static func watchdogInterval() -> Double? {
        var microseconds: UInt64 = 0
        guard sd_watchdog_enabled(0, &microseconds) > 0, microseconds > 0 else { return nil }
        return Double(microseconds) / 1_000_000
    }

    /// The descriptors passed by socket activation (`LISTEN_FDS`, for this
    /// process per `LISTEN_PID`): `[3, 4, …]`, or `[]` when none.
    ///
    /// Calls `sd_listen_fds(1)`: it unsets `LISTEN_FDS`, `LISTEN_PID` and
    /// `LISTEN_FDNAMES`, so child processes do not believe the sockets are
    /// theirs; hence call it once, at start, before other threads exist
    /// (`unsetenv` is not thread-safe). The descriptors get `FD_CLOEXEC`.
    public static func listenFDs() -> [Int32] {
        let count = sd_listen_fds(1)
        guard count > 0 else { return [] }
        let first = SD_LISTEN_FDS_START
        return (0..<count).map { Int32(first) + $0 }
    }

    /// Whether `fd` is a listening Unix stream socket (what the agent
    /// accepts from socket activation).
    public static func isListeningUnixStreamSocket(_ fd: Int32) -> Bool {
        sd_is_socket_unix(fd, Int32(SOCK_STREAM.rawValue), 1, nil, 0) > 0
    }

    /// `CLOCK_MONOTONIC` in microseconds (`MONOTONIC_USEC=`).
    public static func monotonicMicroseconds() -> UInt64 { monotonicNanoseconds() / 1_000 }
}

/// The text of notification messages: newline-separated `KEY=value`
/// assignments. Pure, so it is tested without a service manager.
public enum SystemdMessage {
    /// Joins assignments. A value's newlines (and other control characters)
    /// become spaces, so free text such as an error message can never
    /// inject an assignment of its own (e.g. `READY=1`).
    public static func compose(_ assignments: [(key: String, value: String)]) -> String {
        assignments.map { "\($0.key)=\(sanitize($0.value))" }.joined(separator: "\n")
    }

    public static func ready(status: String? = nil) -> String {
        compose([("READY", "1")] + statusAssignment(status))
    }

    public static func status(_ text: String) -> String {
        compose(statusAssignment(text))
    }

    public static func watchdog() -> String {
        compose([("WATCHDOG", "1")])
    }

    public static func reloading(monotonicMicroseconds: UInt64, status: String? = nil) -> String {
        compose([("RELOADING", "1"), ("MONOTONIC_USEC", String(monotonicMicroseconds))] + statusAssignment(status))
    }

    public static func stopping(status: String? = nil) -> String {
        compose([("STOPPING", "1")] + statusAssignment(status))
    }

    private static func statusAssignment(_ text: String?) -> [(key: String, value: String)] {
        guard let text else { return [] }
        return [("STATUS", text)]
    }

    static func sanitize(_ value: String) -> String {
        guard value.unicodeScalars.contains(where: isControl) else { return value }
        var result = String.UnicodeScalarView()
        for scalar in value.unicodeScalars {
            result.append(isControl(scalar) ? " " : scalar)
        }
        return String(result)
    }

    private static func isControl(_ scalar: Unicode.Scalar) -> Bool {
        scalar.value < 0x20 || scalar.value == 0x7F
    }
}
