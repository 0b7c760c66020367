import AgentCore

/// Every flag key and `KEY.P` key of a set of flags, sorted and without repeats, worked out
/// a slice at a time: the keys gathered, runs of `run` keys sorted, then merged pairwise,
/// each step stopping when its deadline passes (a sort of 200,000 keys in one go held the
/// loop about 0.3 s in a debug build).
struct SlicedKeySort {
    static let run = 8_192

    private let flags: [String: FeatureFlag]
    private var flagKeys: [String]?
    private var gathered = 0
    private var keys: [String] = []
    private var runsSorted = 0
    private var width = SlicedKeySort.run
    private var merged: [String] = []
    private var pair = 0, left = 0, right = 0

    init(_ flags: [String: FeatureFlag]) { self.flags = flags }

    /// Works until `deadline` (by `clock`, read every 256 keys); the keys once done.
    mutating func step(until deadline: Double, clock: () -> Double) -> [String]? {
        if flagKeys == nil {
            flagKeys = Array(flags.keys)
            keys.reserveCapacity(flags.count * 2)
        }
        let all = flagKeys ?? []
        while gathered < all.count {
            let key = all[gathered]
            gathered += 1
            keys.append(key)
            if let flag = flags[key] { for name in flag.properties.keys { keys.append(key + "." + name) } }
            if gathered & 255 == 0, clock() > deadline { return nil }
        }
        let n = keys.count
        while runsSorted * Self.run < n {
            let start = runsSorted * Self.run
            keys[start..<min(n, start + Self.run)].sort()
            runsSorted += 1
            if clock() > deadline { return nil }
        }
        while width < n {
            if merged.isEmpty { merged.reserveCapacity(n) }
            while pair < n {
                let middle = min(pair + width, n), end = min(pair + 2 * width, n)
                if left == 0, right == 0 { left = pair; right = middle }
                var count = 0
                while left < middle || right < end {
                    if right >= end || (left < middle && keys[left] <= keys[right]) {
                        merged.append(keys[left])
                        left += 1
                    } else {
                        merged.append(keys[right])
                        right += 1
                    }
                    count += 1
                    if count & 255 == 0, clock() > deadline { return nil }
                }
                pair = end
                left = 0
                right = 0
            }
            swap(&keys, &merged)
            merged.removeAll(keepingCapacity: true)
            width *= 2
            pair = 0
        }
        // "a.b" + "c" and "a" + "b.c" name one key, answered once.
        var unique: [String] = []
        unique.reserveCapacity(n)
        for key in keys where unique.last != key { unique.append(key) }
        return unique
    }
}
