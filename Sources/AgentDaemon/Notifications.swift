import AgentPosix
import AgentSystemd
import Glibc

/// The daemon's notifications to systemd (docs/configuration.md C: `READY=1`, `STATUS=`, `WATCHDOG=1`,
/// `RELOADING=1`, `STOPPING=1`), sent from the event loop without ever blocking it.
///
/// When the manager's notify socket is full (`.wouldBlock`), what is left to say waits in
/// a `NotificationBacklog` and a timer on the loop retries every `retryInterval` until it
/// is delivered; meanwhile the agent keeps serving. One warning when a backlog starts,
/// one info line when it is delivered.
final class Notifications {
    static let retryInterval = 0.05
    /// At exit, how long the undelivered rest may still take (docs/configuration.md C: a clean exit
    /// within a second of SIGTERM).
    static let exitGrace = 0.25

    private let notifier: SystemdNotifier
    private let loop: EventLoop
    private let log: Log
    private var backlog = NotificationBacklog()
    private var retry: EventLoop.TimerHandle?
    private var backlogSince: Double?
    private var lastFailure: Int32?

    init(notifier: SystemdNotifier = SystemdNotifier(), loop: EventLoop, log: Log) {
        self.notifier = notifier
        self.loop = loop
        self.log = log
    }

    func ready(status: String) { submit(.state, SystemdMessage.ready(status: status)) }
    func status(_ text: String) { submit(.status, SystemdMessage.status(text)) }
    func watchdog() { submit(.watchdog, SystemdMessage.watchdog()) }
    func reloading(status: String) {
        submit(.state, SystemdMessage.reloading(monotonicMicroseconds: SystemdNotifier.monotonicMicroseconds(), status: status))
    }
    func stopping(status: String) { submit(.state, SystemdMessage.stopping(status: status)) }

    var pending: Int { backlog.entries.count }

    private func submit(_ kind: NotificationBacklog.Kind, _ message: String) {
        if backlog.isEmpty {
            let outcome = notifier.send(message)
            guard outcome == .wouldBlock else { return note(outcome) }
            backlogSince = loop.now
            log(.warning, "systemd notify socket full; notifications wait until it reads",
                ["socket": notifier.socketPath, "retry_ms": Int(Self.retryInterval * 1000)])
        }
        backlog.append(kind, message)
        flush()
    }

    /// Sends what waits, in order, until the socket is full again.
    private func sendWaiting() { backlog.flush { [notifier] message in notifier.send(message) } }

    private func flush() {
        sendWaiting()
        if backlog.isEmpty {
            if let retry { loop.cancel(retry) }
            retry = nil
            if let since = backlogSince {
                log(.info, "systemd notifications delivered again", ["waited_ms": Int((loop.now - since) * 1000)])
            }
            backlogSince = nil
        } else if retry == nil {
            retry = loop.schedule(after: Self.retryInterval) { [weak self] in
                self?.retry = nil
                self?.flush()
            }
        }
    }

    private func note(_ outcome: NotifyOutcome) {
        guard case .failed(let code) = outcome else { lastFailure = nil; return }
        guard code != lastFailure else { return }
        lastFailure = code
        log(.warning, "systemd notification not sent", ["socket": notifier.socketPath, "error": String(cString: strerror(code))])
    }

    /// After the loop stopped: tries the rest for up to `exitGrace`, then gives up (the
    /// process exits either way, and systemd sees the exit).
    func finish() {
        guard !backlog.isEmpty else { return }
        let deadline = monotonicSeconds() + Self.exitGrace
        while !backlog.isEmpty, monotonicSeconds() < deadline {
            sendWaiting()
            if !backlog.isEmpty { usleep(10_000) }
        }
        if !backlog.isEmpty {
            log(.warning, "exiting with systemd notifications undelivered", ["count": backlog.entries.count, "socket": notifier.socketPath])
        }
    }
}
