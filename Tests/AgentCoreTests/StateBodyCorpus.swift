import AgentCore
import Foundation

/// Seeded, so a failure names a body that can be made again.
struct SplitMix64: RandomNumberGenerator {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// A JSON text built member by member, so it can hold what `JSONWriter` never writes: a key
/// twice, keys spelled with escapes, whitespace anywhere.
indirect enum RawJSON {
    /// A scalar's text, as written.
    case text(String)
    /// Members with their keys' text between the quotes (escapes as written).
    case object([(key: String, value: RawJSON)])
    case array([RawJSON])

    func render(_ random: inout SplitMix64, spaced: Bool) -> String {
        let gap = { (r: inout SplitMix64) -> String in spaced && Int.random(in: 0..<4, using: &r) == 0 ? [" ", "\n", "\t ", "\r\n"].randomElement(using: &r)! : "" }
        switch self {
        case .text(let t): return gap(&random) + t + gap(&random)
        case .array(let a): return "[" + gap(&random) + a.map { $0.render(&random, spaced: spaced) }.joined(separator: ",") + "]"
        case .object(let o):
            return "{" + gap(&random) + o.map { "\"\($0.key)\"" + gap(&random) + ":" + $0.value.render(&random, spaced: spaced) }.joined(separator: ",") + "}"
        }
    }
}

/// Random state bodies: mostly of the stored shape, with now and then a member of another
/// kind, `null`, missing, twice, spelled with escapes, or unknown.
struct StateBodyGenerator {
    var random: SplitMix64

    init(seed: UInt64) { random = SplitMix64(state: seed) }

    mutating func chance(_ percent: Int) -> Bool { Int.random(in: 0..<100, using: &random) < percent }
    mutating func pick<T>(_ options: [T]) -> T { options.randomElement(using: &random)! }

    static let strings = [#""""#, #""alice""#, #""0E4C3D6A-5B1F-4C2D-9E8F-0A1B2C3D4E5F""#, #""é ключ 🚀""#,
                          #""tab\tnew\nline \"q\" \\ \/""#, #""\u00e9\ud83d\ude80\u0000""#, #""default""#, #""r_1a2b""#,
                          #""https://example.test/json/1.3/""#, #""authorized""#, #""denied""#, #""notDetermined""#, #""bogus""#]
    static let numbers = ["0", "-0", "1", "7", "-3", "1.5", "1800000000.5", "1e3", "-2.5e-3", "123456789012345678901",
                          "9007199254740993", "1e300", "0.1"]
    static let keyNames = ["hwid", "userId", "push", "notificationAuthorization", "registeredUser", "flags",
                           "primerLastShownAt", "baseURL", "clockOffset"]

    /// Any value, up to `depth` levels of nesting.
    mutating func anyValue(depth: Int = 2) -> RawJSON {
        switch Int.random(in: 0..<(depth > 0 ? 7 : 5), using: &random) {
        case 0: return .text("null")
        case 1: return .text(pick(["true", "false"]))
        case 2: return .text(pick(Self.numbers))
        case 3, 4: return .text(pick(Self.strings))
        case 5: return .array((0..<Int.random(in: 0..<4, using: &random)).map { _ in anyValue(depth: depth - 1) })
        default: return .object((0..<Int.random(in: 0..<4, using: &random)).map { _ in (pick(["a", "b", "é", "\\u0061", "k"]), anyValue(depth: depth - 1)) })
        }
    }

    /// A member of kind `right` (its texts), now and then `null` or a value of any kind.
    mutating func value(_ right: [String], wrong percent: Int = 4) -> RawJSON {
        if chance(percent) { return anyValue() }
        if chance(2) { return .text("null") }
        return .text(pick(right))
    }

    /// A key's text: now and then with one character as a `\u` escape.
    mutating func spell(_ key: String) -> String {
        guard chance(8), let first = key.unicodeScalars.first, first.isASCII else { return key }
        return String(format: "\\u%04x", first.value) + String(key.unicodeScalars.dropFirst())
    }

    /// The members of an object: each of `fields` present at `presence` percent, now and
    /// then twice, plus now and then an unknown one, shuffled.
    mutating func members(_ fields: [(String, (inout StateBodyGenerator) -> RawJSON)], presence: Int = 75, usually: String? = nil) -> RawJSON {
        var out: [(key: String, value: RawJSON)] = []
        for (name, make) in fields where chance(name == usually ? 98 : presence) {
            out.append((spell(name), make(&self)))
            if chance(5) { out.append((spell(name), make(&self))) }
        }
        if chance(10) { out.append((pick(["extra", "HWID", "hwid\\u0000", "flag"]), anyValue())) }
        out.shuffle(using: &random)
        return .object(out)
    }

    mutating func flag() -> RawJSON {
        if chance(3) { return anyValue() }
        return members([
            ("key", { g in g.value(Self.strings) }),
            ("isEnabled", { g in g.value(["true", "false"]) }),
            ("ruleId", { g in g.value(Self.strings) }),
            ("properties", { g in g.chance(4) ? g.anyValue() : .object((0..<Int.random(in: 0..<4, using: &g.random)).map { _ in (g.pick(["color", "limit", "é", "n\\u0041me"]), g.anyValue()) }) }),
        ], presence: 97)
    }

    mutating func flags() -> RawJSON {
        if chance(3) { return anyValue() }
        let count = Int.random(in: 0..<6, using: &random)
        let names = ["bench_flag_0001", "new_checkout", "é", "e\\u0301", "\\u00e9", "a\\\"b", "k"]
        return .object((0..<count).map { _ in (pick(names), flag()) })
    }

    mutating func nested(_ fields: [(String, (inout StateBodyGenerator) -> RawJSON)]) -> RawJSON {
        if chance(3) { return anyValue() }
        if chance(3) { return .text("null") }
        return members(fields, presence: 90)
    }

    /// A body: almost always an object of the stored shape.
    mutating func body() -> RawJSON {
        if chance(2) { return anyValue() }
        return members([
            ("hwid", { g in g.value(Self.strings, wrong: 2) }),
            ("userId", { g in g.value(Self.strings) }),
            ("push", { g in g.nested([("token", { g in g.value(Self.strings) }), ("notificationTypes", { g in g.value(["0", "7", "-1", "7", "1.5", "1e300"]) }),
                                      ("registeredAt", { g in g.value(Self.numbers) })]) }),
            ("notificationAuthorization", { g in g.value([#""authorized""#, #""denied""#, #""notDetermined""#, #""bogus""#]) }),
            ("registeredUser", { g in g.nested([("userId", { g in g.value(Self.strings) }), ("at", { g in g.value(Self.numbers) })]) }),
            ("flags", { g in g.nested([("flags", { g in g.flags() }), ("receivedAt", { g in g.value(Self.numbers) }),
                                       ("applicationCode", { g in g.value(Self.strings) }), ("userId", { g in g.value(Self.strings) }),
                                       ("partial", { g in g.value(["true", "false"], wrong: 10) })]) }),
            ("primerLastShownAt", { g in g.value(Self.numbers) }),
            ("baseURL", { g in g.value(Self.strings) }),
            ("clockOffset", { g in g.value(["0", "12.5", "-1", "1e3"]) }),
        ], presence: 60, usually: "hwid")
    }

    mutating func bodyBytes() -> [UInt8] {
        let doc = body()
        let spaced = chance(30)
        return Array(doc.render(&random, spaced: spaced).utf8)
    }

    /// `bytes` with one byte changed, removed or added.
    mutating func mutate(_ bytes: [UInt8]) -> [UInt8] {
        var b = bytes
        let at = Int.random(in: 0..<max(1, b.count), using: &random)
        let byte = pick(Array("\"\\{}[],:nt1-0e. u".utf8) + [0xFF, 0xC3, 0x80, 0x00, 0x1F, UInt8.random(in: 0...255, using: &random)])
        switch Int.random(in: 0..<3, using: &random) {
        case 0 where !b.isEmpty: b[at] = byte
        case 1 where !b.isEmpty: b.remove(at: at)
        default: b.insert(byte, at: min(at, b.count))
        }
        return b
    }
}

extension RawJSON {
    /// `value` as written by `JSONWriter` (keys sorted).
    init(_ value: JSONValue) {
        switch value {
        case .object(let o):
            self = .object(o.keys.sorted().map { key in (String(JSONWriter.string(.string(key)).dropFirst().dropLast()), RawJSON(o[key]!)) })
        case .array(let a): self = .array(a.map(RawJSON.init))
        default: self = .text(JSONWriter.string(value))
        }
    }

    static let others = ["null", "true", "false", "0", "-1", "1.5", "7", #""s""#, #""denied""#, "[]", "{}", #"{"a":1}"#]

    /// Every document made from this one by one change to one member, at any depth: removed,
    /// replaced by a value of each kind, or given a duplicate of each kind before or after it.
    var variants: [RawJSON] {
        switch self {
        case .text: return []
        case .array(let a):
            return a.indices.flatMap { i in a[i].variants.map { v in var b = a; b[i] = v; return RawJSON.array(b) } }
        case .object(let o):
            var out: [RawJSON] = []
            for i in o.indices {
                var removed = o
                removed.remove(at: i)
                out.append(.object(removed))
                for other in Self.others {
                    var replaced = o, before = o, after = o
                    replaced[i].value = .text(other)
                    before.insert((o[i].key, .text(other)), at: i)
                    after.insert((o[i].key, .text(other)), at: i + 1)
                    out += [.object(replaced), .object(before), .object(after)]
                }
                out += o[i].value.variants.map { v in var changed = o; changed[i].value = v; return RawJSON.object(changed) }
            }
            return out
        }
    }
}
