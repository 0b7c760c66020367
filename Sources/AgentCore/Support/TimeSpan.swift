// The one time-span grammar and the one set of span renderings: the configuration
// (docs/configuration.md C.1), pushwoosh-agentctl, the fleet manifest and the soak runner share them.

/// systemd's time span syntax (systemd.time(7)): `90s`, `5min`, `1h 30min`,
/// `1h30min`, `1.5h`, `500ms`, a bare number is seconds. Negative, empty and
/// unknown units are refused.
public enum TimeSpan {
    private static let units: [String: Double] = [
        "us": 1e-6, "usec": 1e-6, "µs": 1e-6,
        "ms": 1e-3, "msec": 1e-3,
        "s": 1, "sec": 1, "second": 1, "seconds": 1,
        "m": 60, "min": 60, "minute": 60, "minutes": 60,
        "h": 3600, "hr": 3600, "hour": 3600, "hours": 3600,
        "d": 86400, "day": 86400, "days": 86400,
        "w": 604_800, "week": 604_800, "weeks": 604_800,
    ]

    /// Seconds, or nil when `text` is not a time span.
    public static func parse(_ text: String) -> Seconds? {
        let chars = Array(text.unicodeScalars)
        var i = 0
        var total: Double = 0
        var parts = 0
        func skipSpaces() { while i < chars.count, chars[i] == " " || chars[i] == "\t" { i += 1 } }
        skipSpaces()
        while i < chars.count {
            // Number: digits with an optional fraction.
            let numberStart = i
            while i < chars.count, ("0"..."9").contains(chars[i]) { i += 1 }
            if i < chars.count, chars[i] == "." {
                i += 1
                let fractionStart = i
                while i < chars.count, ("0"..."9").contains(chars[i]) { i += 1 }
                if i == fractionStart { return nil }  // "1." is not a number
            }
            let numberText = String(String.UnicodeScalarView(chars[numberStart..<i]))
            guard !numberText.isEmpty, numberText != ".", let number = Double(numberText) else { return nil }
            skipSpaces()
            let unitStart = i
            while i < chars.count, chars[i].properties.isAlphabetic { i += 1 }
            let unit = String(String.UnicodeScalarView(chars[unitStart..<i]))
            let factor: Double
            if unit.isEmpty {
                factor = 1
            } else {
                guard let f = units[unit] else { return nil }
                factor = f
            }
            total += number * factor
            parts += 1
            skipSpaces()
        }
        guard parts > 0, total.isFinite else { return nil }
        return total
    }

    /// A short systemd-style rendering: `1h 30min`, `90s` → `1min 30s`, `500ms`.
    public static func format(_ seconds: Seconds) -> String {
        guard seconds.isFinite, seconds > 0 else { return seconds == 0 ? "0" : String(seconds) }
        var rest = seconds
        var parts: [String] = []
        for (name, size) in [("w", 604_800.0), ("d", 86400), ("h", 3600), ("min", 60), ("s", 1)] where rest >= size {
            let n = (rest / size).rounded(.down)
            parts.append("\(Int(n))\(name)")
            rest -= n * size
        }
        if rest >= 0.001 {
            let ms = (rest * 1000).rounded()
            if ms >= 1 { parts.append("\(Int(ms))ms") }
        }
        return parts.isEmpty ? "\(Int((seconds * 1e6).rounded()))us" : parts.joined(separator: " ")
    }

    /// A rough span for people, in whole units: "45 s", "3 min", "2 h", "2 d" (the `STATUS=`
    /// line, agentctl's fleet table); with `parts: 2` the next unit too when it is not 0:
    /// "2 h 5 min", "3 d 4 h" (agentctl's ages; never seconds as the second unit). Negative or NaN is "0 s"; bounded, so it cannot trap.
    public static func rough(_ seconds: Seconds, parts: Int = 1) -> String {
        let s = Int(min(max(0, seconds.isNaN ? 0 : seconds), 1e12).rounded(.down))
        let units = [("d", 86_400), ("h", 3600), ("min", 60), ("s", 1)]
        guard let first = units.firstIndex(where: { s >= $0.1 }) else { return "0 s" }
        var out = ["\(s / units[first].1) \(units[first].0)"]
        // The second unit is never seconds: "5 min", not "5 min 30 s".
        if parts > 1, first + 1 < units.count - 1 {
            let next = units[first + 1]
            let n = s % units[first].1 / next.1
            if n > 0 { out.append("\(n) \(next.0)") }
        }
        return out.joined(separator: " ")
    }

    /// Exact seconds for messages: "10 s", "0.5 s".
    public static func seconds(_ s: Seconds) -> String {
        s == s.rounded() && abs(s) < 1e15 ? "\(Int(s)) s" : "\(s) s"
    }
}
