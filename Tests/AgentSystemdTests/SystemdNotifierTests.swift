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
