import AgentPosix

/// Warnings any local client can cause at will (a refused connection, a request that never
/// came, an answer too long): the first line at once, then for the same message at most one
/// line every `interval` seconds, saying how many were held back (`repeated=`), so that no
/// client can flood the journal. Loop thread only.
final class RepeatedWarnings {
    let interval: Double
    private let loop: EventLoop
    private let log: Log
    private var seen: [String: (last: Double, held: Int)] = [:]

    init(loop: EventLoop, log: Log, interval: Double = 10) {
        self.loop = loop
        self.log = log
        self.interval = interval
    }

    func warn(_ message: String, _ fields: KeyValuePairs<String, Any?> = [:]) {
        let now = loop.now
        var held = 0
        if let entry = seen[message] {
            guard now - entry.last >= interval else {
                seen[message] = (entry.last, entry.held + 1)
                return
            }
            held = entry.held
        }
        seen[message] = (now, 0)
        guard held > 0 else { return log(.warning, message, fields) }
        var all: [(key: String, value: Any?)] = fields.map { ($0.key, $0.value) }
        all.append((key: "repeated", value: held))
        log(.warning, message, fields: all)
    }
}
