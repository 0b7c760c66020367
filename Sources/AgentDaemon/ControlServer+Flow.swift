import AgentCore
import AgentPosix
import AgentWire

/// How a socket client's bytes are taken in (docs/socket-api.md B.3 limits): lines handed to
/// `handleLine` for a bounded time per turn of the loop (fairness: a client that pipelines
/// thousands of requests does not hold up the others), reading paused while a client's
/// unsent answers pass `outputHighWater` (back-pressure: a client that does not read
/// costs at most that, plus one answer and the rest of one read, whatever the number of such
/// clients: docs/shared-host.md L.2), and `RequestReadTimeout` for requests that do not come.
extension ControlServer {
    /// Unsent answers past which a client is no longer read (32 KiB, on top of what the
    /// kernel's socket buffer holds): small, so that 250 clients that never read cost the
    /// agent a few MiB, not 250 MiB.
    static let outputHighWater = 32 << 10
    /// Unsent output past which a connection is closed: notifications to a subscriber that
    /// does not read, or answers that finish later (a refresh) on top of the bound.
    static let outputLimit = 4 << 20
    /// Seconds of work for one client in one turn of the loop (checked every 16 lines, from the
    /// 16th on: a read of one or a few lines never asks the clock).
    static let turnBudget = 0.000_5
    /// Bytes of an unfinished request line every client may hold (16 KiB: any ordinary request).
    static let ownLineAllowance = 16 << 10
    /// Bytes of unfinished lines beyond their own allowance that all clients together may hold
    /// (8 MiB: a few batches near the 1 MiB line limit at once). A client that would need more
    /// is not read until some is given back (a line completed, a client gone); its bytes wait in
    /// the socket, and RequestReadTimeout still runs. So 250 clients that each drip a 1 MiB
    /// line cost the agent about 20 MiB, not 250.
    static let sharedLineBudget = 8 << 20

    func received(_ bytes: UnsafeRawBufferPointer, from client: Client) {
        var handled = 0
        var until = 0.0  // set on the first check
        readTime = nil
        client.framing = true
        client.framer.processWhile(bytes) { frame in take(frame, from: client, count: &handled, until: &until) }
        client.framing = false
        afterInput(client, handled: handled)
    }

    /// The lines held back: one more turn's worth.
    private func resumeHeld(_ client: Client) {
        client.resumeScheduled = false
        guard client.connection.isOpen, client.framer.hasHeldLines else { return }
        var handled = 0
        var until = 0.0  // set on the first check
        readTime = nil
        client.framing = true
        client.framer.resume { frame in take(frame, from: client, count: &handled, until: &until) }
        client.framing = false
        afterInput(client, handled: handled)
    }

    /// Hands one frame on; whether the framer may hand out another now.
    private func take(_ frame: LineFramer.Frame, from client: Client, count: inout Int, until: inout Double) -> Bool {
        switch frame {
        case .line(let line):
            handleLine(line, from: client)
            count += 1
            // The clock is read every 16 lines (a fast-path answer takes about a microsecond).
            if count & 15 == 0 {
                let now = loop.now
                if until == 0 { until = now + Self.turnBudget } else if now > until { return false }
            }
            return client.connection.pendingOutputBytes < Self.outputHighWater
        case .lineTooLong:
            let limit = LineFramer.defaultMaximumLineLength  // the framer is busy framing: not read here
            metrics?.rpcError(RPCError.lineTooLong(maximum: limit).code)
            client.connection.send(RPCEncoder.error(id: .null, .lineTooLong(maximum: limit)))
            client.connection.closeAfterFlush()
            warnings.warn("connection closed: line too long", ["pid": client.credentials?.pid, "limit": limit])
            return false
        }
    }

    /// After a read or a resumed turn: the request clock, then whether to read on.
    private func afterInput(_ client: Client, handled: Int) {
        guard client.connection.isOpen else { return }
        let held = client.framer.hasHeldLines
        if held {
            client.awaitingSince = nil  // its requests are here, waiting for their turn
        } else if client.framer.bufferedByteCount > 0 {
            // A line begun: it must be complete within RequestReadTimeout of its first byte.
            if handled > 0 || client.awaitingSince == nil { client.awaitingSince = loop.iterationTime }
            armRequestTimer(client)
        } else if handled > 0 {
            client.awaitingSince = nil  // idle between requests: the idle timeout's business
        }
        let backlog = client.connection.pendingOutputBytes >= Self.outputHighWater
        accountLine(client)
        client.connection.readingPaused = held || backlog || client.waitingForLineBudget
        if held, !backlog, !client.resumeScheduled {
            // Another turn once the others have had theirs: a timer due after this pass of
            // the timers runs after the next poll of every descriptor.
            client.resumeScheduled = true
            // Held strongly for the microsecond until it runs (weak references would give the
            // server and every client a side table, the slow path of each retain and release).
            loop.schedule(after: 0.000_001) { [self, client] in resumeHeld(client) }
        }
    }

    /// The client read its answers (reading was paused): read on, held lines first.
    func outputDrained(_ client: Client) {
        guard !client.framing else { return }  // a flush while lines are being handled: afterInput decides
        if client.framer.hasHeldLines {
            if !client.resumeScheduled { resumeHeld(client) }
        } else {
            client.connection.readingPaused = client.waitingForLineBudget
        }
    }

    // MARK: - Unfinished lines: a shared budget

    /// What `client`'s unfinished line takes from the shared budget now; a client that would
    /// take more than is left waits. Bytes given back let waiting clients read on.
    func accountLine(_ client: Client) {
        let borrowed = max(0, client.framer.bufferedByteCount - Self.ownLineAllowance)
        lineBudgetUsed += borrowed - client.lineBorrowed
        let gaveBack = borrowed < client.lineBorrowed
        client.lineBorrowed = borrowed
        let waiting = client.framer.bufferedByteCount >= Self.ownLineAllowance && lineBudgetUsed >= Self.sharedLineBudget
        if waiting, !client.waitingForLineBudget {
            warnings.warn("connection not read: unfinished lines over their shared budget",
                          ["budget": Self.sharedLineBudget, "partial_bytes": client.framer.bufferedByteCount, "pid": client.credentials?.pid])
        }
        client.waitingForLineBudget = waiting
        if gaveBack { resumeLineBudgetWaiters() }
    }

    /// A client gone: its share of the budget is given back.
    func releaseLineBudget(_ client: Client) {
        lineBudgetUsed -= client.lineBorrowed
        client.lineBorrowed = 0
        client.waitingForLineBudget = false
        resumeLineBudgetWaiters()
    }

    /// Clients that waited for the budget read on while some is left (each takes what it
    /// needs on its next read, and waits again if it runs out).
    private func resumeLineBudgetWaiters() {
        guard lineBudgetUsed < Self.sharedLineBudget else { return }
        for waiting in clients.values where waiting.waitingForLineBudget {
            waiting.waitingForLineBudget = false
            let backlog = waiting.connection.pendingOutputBytes >= Self.outputHighWater
            waiting.connection.readingPaused = waiting.framer.hasHeldLines || backlog
        }
    }

    // MARK: - RequestReadTimeout

    func armRequestTimer(_ client: Client) {
        guard client.requestTimer == nil, let since = client.awaitingSince else { return }
        // Strong references: the timer is cancelled when the client's connection closes (and
        // `closeAll` closes them all), so it holds neither longer than the connection lives.
        client.requestTimer = loop.schedule(at: since + settings.requestReadTimeout) { [self, client] in
            client.requestTimer = nil
            guard client.connection.isOpen, let since = client.awaitingSince else { return }
            let due = since + self.settings.requestReadTimeout
            guard self.loop.now >= due else { return self.armRequestTimer(client) }
            self.metrics?.socketRequestReadTimeouts += 1
            let limit = TimeSpan.format(self.settings.requestReadTimeout)
            let partial = client.framer.bufferedByteCount
            client.connection.send(RPCEncoder.error(id: .null, .invalidRequest("no complete request line within RequestReadTimeout=\(limit)")))
            client.connection.closeAfterFlush()
            self.warnings.warn("connection closed: no request within RequestReadTimeout",
                     ["timeout": limit, "partial_bytes": partial, "pid": client.credentials?.pid])
        }
    }
}
