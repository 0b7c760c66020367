import CSystemd
import Glibc

/// What `sd_notify` did with a message.
public enum NotifyOutcome: Sendable, Equatable {
    /// Delivered to the service manager.
    case sent
    /// `NOTIFY_SOCKET` is not set: not running under systemd (or not
    /// `Type=notify`). Not an error.
    case notConfigured
    /// Sending failed with this errno.
    case failed(Int32)
}

/// The service side of systemd's notification protocol, over libsystemd's
/// `sd_notify`. The socket comes from `NOTIFY_SOCKET` in the environment;
/// `sd_notify` is called with `unset_environment = 0` so every later
/// notification still finds it. Thread-safe (each call sends one datagram).
public struct SystemdNotifier: Sendable {
    public init() {}

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

    /// Sends a composed message (see `SystemdMessage`).
    @discardableResult
    public func send(_ message: String) -> NotifyOutcome {
        let result = sd_notify(0, message)
        if result > 0 { return .sent }
        if result == 0 { return .notConfigured }
        return .failed(-result)
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

    static func monotonicMicroseconds() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) * 1_000_000 + UInt64(ts.tv_nsec) / 1_000
    }
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
