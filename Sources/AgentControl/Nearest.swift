// A misspelt command or option is answered with the nearest name agentctl knows, as the
// Python plugin answers a misspelt marker option.

enum Nearest {
    /// `; did you mean 'NAME'?` for the name of `names` nearest to `given`, or "" when none is near.
    static func suggestion(_ given: String, among names: [String]) -> String {
        name(given, among: names).map { "; did you mean '\($0)'?" } ?? ""
    }

    /// The name of `names` nearest to `given`: compared without case, `-` and `_` (so the
    /// socket's `registerForPushNotifications` finds `register-for-push`), within an edit
    /// distance of a third of the name (at least 2), or holding the other whole (at least four
    /// letters of it); the smallest distance wins, the first listed on a tie. Nil when none is near.
    static func name(_ given: String, among names: [String]) -> String? {
        let g = normalized(given)
        guard !g.isEmpty else { return nil }
        var best: (name: String, distance: Int)?
        for name in names {
            let n = normalized(name)
            let d = distance(g, n)
            let near = d <= max(2, min(g.count, n.count) / 3)
                || (min(g.count, n.count) >= 4 && (contains(g, n) || contains(n, g)))
            if near, best == nil || d < best!.distance { best = (name, d) }
        }
        return best?.name
    }

    static func normalized(_ text: String) -> [Character] {
        Array(text.lowercased().filter { $0 != "-" && $0 != "_" })
    }

    static func contains(_ whole: [Character], _ part: [Character]) -> Bool {
        guard part.count <= whole.count else { return false }
        return (0...(whole.count - part.count)).contains { whole[$0..<($0 + part.count)].elementsEqual(part) }
    }

    /// The optimal string alignment distance: insertions, deletions, substitutions and swaps
    /// of two neighbours (`stauts` is one from `status`).
    static func distance(_ a: [Character], _ b: [Character]) -> Int {
        if a.isEmpty { return b.count }
        if b.isEmpty { return a.count }
        var d = [[Int]](repeating: [Int](repeating: 0, count: b.count + 1), count: a.count + 1)
        for i in 0...a.count { d[i][0] = i }
        for j in 0...b.count { d[0][j] = j }
        for i in 1...a.count {
            for j in 1...b.count {
                let cost = a[i - 1] == b[j - 1] ? 0 : 1
                d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost)
                if i > 1, j > 1, a[i - 1] == b[j - 2], a[i - 2] == b[j - 1] {
                    d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1)
                }
            }
        }
        return d[a.count][b.count]
    }
}
