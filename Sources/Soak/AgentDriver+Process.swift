import AgentCore
import Foundation
import Glibc

/// The agent's process: restarts (each a look at the stored flags before and after, ST-1) and
/// the stop at the end of the run.
extension AgentDriver {
    /// Stops the process with `sig` (checking a clean, announced exit on SIGTERM), waits a
    /// moment, starts it again.
    func restart() {
        let sig: Int32 = rng.chance(0.5) ? SIGTERM : SIGKILL
        // ST-1: what the stored flags are before the stop, to compare with the new process's.
        let before = observeStatus()
        let t0 = now()
        ctx.recorder.busy(index, since: t0)
        defer { ctx.recorder.busy(index, since: nil) }
        client = nil
        stop(with: sig, recordedAs: sig, since: t0)
        // Down for a moment (sometimes long enough to let flags age on disk).
        usleep(UInt32(rng.unit() * 2_000_000))
        ctx.recorder.count(agent: index, sig == SIGTERM ? "sigterm" : "sigkill")
        // The run may have ended meanwhile (seed 864767728: a start after the deadline raced the
        // runner's wind-down); then the agent stays down and the driver finishes.
        guard !runEnding else { return }
        if start(), let after = observeStatus(), let before {
            ctx.recorder.state.withLock { $0.cacheProbes.append(CacheProbe(agent: index, before: before, after: after)) }
        }
        if client != nil { goActive() }
        scheduleRestart()
    }

    func scheduleRestart() {
        nextRestart = ctx.options.restartEvery > 0 ? now() + rng.exponential(mean: ctx.options.restartEvery) : .infinity
    }

    /// The end of the run: SIGTERM, and the same checks as for a restart.
    func shutdown() {
        client = nil
        guard pid > 0, ctx.exits.isUp(pid) else { return }
        stop(with: SIGTERM, recordedAs: 0, since: now(), when: " at the end of the run")
    }

    /// Sends `sig` through the lab and checks the stop. SIGTERM: a clean exit (code 0, as the
    /// lab's DEVICE record says) within 1.5 s, announced with STOPPING=1, and SIGKILL after 5 s
    /// if it is still running; SIGKILL: that the process went. The stop is recorded as
    /// `.stopped(signal: recorded)` (0: the run's end); `when` ends each violation's words.
    func stop(with sig: Int32, recordedAs recorded: Int32, since t0: Time, when: String = "") {
        ctx.exits.expect(pid)
        do { try ctx.lab.signal(index, sig) } catch {
            if ctx.exits.isUp(pid) { violation("stop", "the lab did not send \(signalName(sig))\(when): \(error)") }
        }
        ctx.recorder.action(AgentAction(agent: index, kind: .stopped(signal: recorded), start: t0, end: t0))
        let endedAt = ctx.exits.waitEnd(pid, timeout: 5)
        guard sig == SIGTERM else {
            if endedAt == nil { violation("stop", "still running 5 s after SIGKILL\(when)") }
            return
        }
        if endedAt == nil {
            violation("stop", "still running 5 s after SIGTERM\(when)", evidence: logTail(10))
            try? ctx.lab.signal(index, SIGKILL)
            _ = ctx.exits.waitEnd(pid, timeout: 5)
        } else if let record = try? ctx.lab.record(index), record.exited, record.exitCode != 0 {
            violation("stop", "\(record.ended) after SIGTERM\(when) (expected exit code 0)", evidence: logTail(15))
        } else if let at = endedAt, at - t0 > 1.5 {
            violation("stop", "took \(String(format: "%.2f", at - t0)) s to exit after SIGTERM\(when) (docs/configuration.md C: within a second)")
        }
        usleep(20_000)
        ctx.lab.readNotifications(index, into: ctx.notify)
        if endedAt != nil, ctx.notify.received(index, line: "STOPPING=1", since: t0) == nil {
            violation("stop", "no STOPPING=1 after SIGTERM\(when)")
        }
    }
}
