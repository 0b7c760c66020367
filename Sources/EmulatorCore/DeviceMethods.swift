import AgentCore

/// The device API methods the emulator answers (`/json/1.3/{method}`), the only ones a
/// fault can be armed for; anything else is refused rather than silently never matched.
public enum DeviceMethods {
    /// Every method, sorted.
    public static let known: [String] = PushwooshAPI.Method.allCases.map(\.rawValue).sorted()

    /// Whether `name` is a device API method.
    public static func isKnown(_ name: String) -> Bool { PushwooshAPI.Method(rawValue: name) != nil }

    /// `unknown device API method "getFeatureFlag" (did you mean getFeatureFlags? known: …)`.
    public static func unknownMessage(_ name: String) -> String {
        let hint = nearest(name).map { "did you mean \($0)? " } ?? ""
        return "unknown device API method \"\(name)\" (\(hint)known: \(known.joined(separator: ", ")))"
    }

    /// The known method closest to `name` (case-insensitive edit distance at most 3).
    static func nearest(_ name: String) -> String? {
        let lower = Array(name.lowercased())
        var best: (name: String, distance: Int)?
        for candidate in known {
            let d = distance(lower, Array(candidate.lowercased()))
            if d <= 3, d < (best?.distance ?? Int.max) { best = (candidate, d) }
        }
        return best?.name
    }

    /// Levenshtein distance.
    static func distance(_ a: [Character], _ b: [Character]) -> Int {
        if a.isEmpty { return b.count }
        var previous = Array(0...b.count)
        for (i, x) in a.enumerated() {
            var current = [i + 1] + Array(repeating: 0, count: b.count)
            for (j, y) in b.enumerated() {
                current[j + 1] = Swift.min(previous[j + 1] + 1, current[j] + 1, previous[j] + (x == y ? 0 : 1))
            }
            previous = current
        }
        return previous[b.count]
    }
}
