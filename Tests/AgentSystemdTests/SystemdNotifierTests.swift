@testable import AgentSystemd
import Glibc
import Testing

@Suite struct SystemdMessageTests {
    @Test func readyWithAndWithoutStatus() {
        #expect(SystemdMessage.ready() == "READY=1")
        #expect(SystemdMessage.ready(status: "12 flags, 3 min old, last refresh ok")
                == "READY=1\nSTATUS=12 flags, 3 min old, last refresh ok")
    }

    @Test func statusWatchdogStopping() {
        #expect(SystemdMessage.status("serving cached flags") == "STATUS=serving cached flags")
        #expect(SystemdMessage.watchdog() == "WATCHDOG=1")
        #expect(SystemdMessage.stopping() == "STOPPING=1")
        #expect(SystemdMessage.stopping(status: "stopping") == "STOPPING=1\nSTATUS=stopping")
    }

    @Test func reloadingCarriesTheMonotonicTimestampInTheSameMessage() {
        #expect(SystemdMessage.reloading(monotonicMicroseconds: 123_456_789)
                == "RELOADING=1\nMONOTONIC_USEC=123456789")
        #expect(SystemdMessage.reloading(monotonicMicroseconds: 5, status: "reloading configuration")
                == "RELOADING=1\nMONOTONIC_USEC=5\nSTATUS=reloading configuration")
    }

    @Test(arguments: [
        ("last refresh failed:\nREADY=1", "STATUS=last refresh failed: READY=1"),
        ("a\r\nb", "STATUS=a  b"),
        ("tab\there", "STATUS=tab here"),
        ("nul\u{0}byte", "STATUS=nul byte"),
        ("ünïcode ✓ stays", "STATUS=ünïcode ✓ stays"),
    ])
    func statusTextCannotInjectAssignments(text: String, expected: String) {
        let message = SystemdMessage.status(text)
        #expect(message == expected)
        #expect(!message.contains("\n"))
    }

    @Test func composeJoinsAssignmentsInOrder() {
        #expect(SystemdMessage.compose([("A", "1"), ("B", "x\ny")]) == "A=1\nB=x y")
        #expect(SystemdMessage.compose([]) == "")
    }
}

@Suite struct SystemdNotifierTests {
    @Test func monotonicMicrosecondsFollowsClockMonotonic() {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        let before = UInt64(ts.tv_sec) * 1_000_000 + UInt64(ts.tv_nsec) / 1_000
        let value = SystemdNotifier.monotonicMicroseconds()
        #expect(value >= before)
        #expect(value - before < 1_000_000)
    }

    /// Outside systemd (no NOTIFY_SOCKET) nothing is sent and nothing fails.
    /// Delivery to a real NOTIFY_SOCKET is tested by the daemon's
    /// integration tests: the variable must not be set in this process,
    /// whose tests run in parallel.
    @Test(.enabled(if: getenv("NOTIFY_SOCKET") == nil))
    func withoutNotifySocketNothingIsSent() {
        let notifier = SystemdNotifier()
        #expect(notifier.ready(status: "x") == .notConfigured)
        #expect(notifier.status("x") == .notConfigured)
        #expect(notifier.watchdog() == .notConfigured)
        #expect(notifier.reloading() == .notConfigured)
        #expect(notifier.stopping() == .notConfigured)
    }

    @Test(.enabled(if: getenv("WATCHDOG_USEC") == nil))
    func watchdogIsOffOutsideSystemd() {
        #expect(SystemdNotifier.watchdogInterval() == nil)
    }

    @Test func aPlainSocketIsNotAListeningUnixStreamSocket() {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        #expect(!SystemdNotifier.isListeningUnixStreamSocket(fd))
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)  // autobind to an abstract name
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sa_family_t>.size))
            }
        }
        #expect(bound == 0)
        #expect(listen(fd, 1) == 0)
        #expect(SystemdNotifier.isListeningUnixStreamSocket(fd))
    }
}

/// A datagram receiver that reads only when told (a service manager that is busy).
private final class SilentReceiver {
    let fd: Int32
    let name: String
    init() {
        fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        name = "@pushwoosh-notify-test-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        var bytes = Array(name.utf8)
        bytes[0] = 0
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: bytes) }
        let length = socklen_t(MemoryLayout<sa_family_t>.size + bytes.count)
        _ = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) } }
    }
    deinit { close(fd) }
    func read() -> String? {
        var buffer = [UInt8](repeating: 0, count: 4096)
        let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        return n < 0 ? nil : String(decoding: buffer[..<n], as: UTF8.self)
    }
}

@Suite struct NonBlockingNotifyTests {
    /// libsystemd's sd_notify blocks here (measured: the 12th unread datagram with
    /// net.unix.max_dgram_qlen=10); this sender answers `.wouldBlock` at once.
    @Test func aFullReceiverQueueIsWouldBlockNotAWait() {
        let receiver = SilentReceiver()
        let notifier = SystemdNotifier(socketPath: receiver.name)
        var outcomes: [NotifyOutcome] = []
        for _ in 0..<200 { outcomes.append(notifier.watchdog()) }
        #expect(outcomes.first == .sent)
        #expect(outcomes.last == .wouldBlock)
        #expect(outcomes.firstIndex(of: .wouldBlock).map { outcomes[$0...].allSatisfy { $0 == .wouldBlock } } == true)
        #expect(receiver.read() == "WATCHDOG=1")
        #expect(notifier.status("after") == .sent)  // room again after one read
    }

    @Test func abstractAndPathSocketsAndBadNames() {
        let receiver = SilentReceiver()
        #expect(SystemdNotifier(socketPath: receiver.name).ready(status: "x") == .sent)
        #expect(receiver.read() == "READY=1\nSTATUS=x")
        #expect(SystemdNotifier(socketPath: nil).ready() == .notConfigured)
        #expect(SystemdNotifier(socketPath: "").ready() == .notConfigured)
        #expect(SystemdNotifier(socketPath: "relative/path").ready() == .failed(EINVAL))
        #expect(SystemdNotifier(socketPath: "/" + String(repeating: "x", count: 200)).ready() == .failed(EINVAL))
        #expect(SystemdNotifier(socketPath: "/nonexistent/notify.sock").ready() == .failed(ENOENT))
    }
}

@Suite struct NotificationBacklogTests {
    @Test func stateChangesKeepTheirOrderWhileStatusAndWatchdogCoalesce() {
        var b = NotificationBacklog()
        b.append(.status, "STATUS=a")
        b.append(.watchdog, "WATCHDOG=1")
        b.append(.status, "STATUS=b")        // replaces a: no state change between them
        b.append(.watchdog, "WATCHDOG=1")    // one pending ping stands for all
        b.append(.state, "STOPPING=1")
        b.append(.status, "STATUS=c")        // after a state change: kept apart
        #expect(b.entries.map(\.message) == ["STATUS=b", "WATCHDOG=1", "STOPPING=1", "STATUS=c"])
    }

    @Test func flushStopsAtTheFirstWouldBlockAndDropsHardFailures() {
        var b = NotificationBacklog()
        for m in ["READY=1", "STATUS=x", "STOPPING=1"] { b.append(m.hasPrefix("STATUS") ? .status : .state, m) }
        var sent: [String] = []
        var room = 1
        let delivered = b.flush { m in
            guard room > 0 else { return .wouldBlock }
            room -= 1
            sent.append(m)
            return .sent
        }
        #expect(delivered == 1 && sent == ["READY=1"])
        #expect(b.entries.map(\.message) == ["STATUS=x", "STOPPING=1"])
        #expect(b.flush { _ in .failed(ECONNREFUSED) } == 0)
        #expect(b.isEmpty)
    }

    @Test func aLongBacklogKeepsTheNewestStateChanges() {
        var b = NotificationBacklog()
        for i in 0..<(NotificationBacklog.limit + 5) { b.append(.state, "READY=1\nSTATUS=\(i)") }
        #expect(b.entries.count == NotificationBacklog.limit)
        #expect(b.entries.last?.message == "READY=1\nSTATUS=\(NotificationBacklog.limit + 4)")
        #expect(b.entries.first?.message == "READY=1\nSTATUS=5")
    }
}
