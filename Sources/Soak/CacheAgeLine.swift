import AgentCore

/// The cache age of one device through the whole run, for the report's line: pure, from what
/// the device said and did. Each observation with flags dates them (received = time − age);
/// the age rises a second per second from there, drops to 0 at a newer receipt, and ends at
/// an observation without flags (at the discard the device announced before it, else at
/// receipt + lifetime, else at that observation). After the last observation the device's
/// successful flags requests renew it, up to the run's end or the lifetime.
public enum CacheAgeLine {
    /// Runs of (time, age) points; a gap between runs is a time without flags.
    public static func runs(ages: [(Time, Double?)], renewals: [Time], discards: [Time], end: Time, lifetime: Double) -> [[(Time, Double)]] {
        var out: [[(Time, Double)]] = []
        var run: [(Time, Double)] = []
        var received: Time?
        var lastSeen = -Double.infinity
        func close() {
            if !run.isEmpty { out.append(run) }
            run = []
        }
        /// The line from the current receipt up to `t` (ending it at the lifetime if that comes first).
        func rise(to t: Time) {
            guard let r = received else { return }
            if t > r + lifetime {
                run.append((r + lifetime, lifetime))
                close()
                received = nil
            } else {
                run.append((t, t - r))
            }
        }
        /// New flags received at `r`.
        func renew(at r: Time) {
            if received != nil { rise(to: r) }
            if received != nil { run.append((r, 0)) } else { close(); run = [(r, 0)] }
            received = r
        }
        for (t, age) in ages.sorted(by: { $0.0 < $1.0 }) {
            if let age {
                let r = t - age
                if let current = received, abs(r - current) < 1 {
                    rise(to: t)
                } else if let current = received, r < current {
                    // Older flags than before (not expected): a new run from here.
                    close()
                    received = r
                    run = [(t, age)]
                } else {
                    renew(at: max(r, lastSeen))
                    rise(to: t)
                }
            } else if received != nil {
                let gone = discards.first { $0 > lastSeen && $0 <= t } ?? t
                rise(to: gone)
                close()
                received = nil
            }
            lastSeen = t
        }
        for r in renewals.sorted() where r > lastSeen && r <= end {
            if let d = discards.first(where: { $0 > lastSeen && $0 < r }), received != nil {
                rise(to: d)
                close()
                received = nil
            }
            renew(at: r)
            lastSeen = r
        }
        if received != nil {
            if let d = discards.first(where: { $0 > lastSeen && $0 <= end }) { rise(to: d) } else { rise(to: end) }
        }
        close()
        return out.filter { $0.count > 0 }
    }
}
