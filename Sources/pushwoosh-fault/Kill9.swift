// pushwoosh-fault kill9: SIGKILL the agent during refreshes and check the state on disk (ST-6).

import AgentCore
import AgentPosix
import AgentWire
import Foundation
import Glibc
import HarnessSupport

// MARK: - The state file (HarnessSupport's reader: FileStateStore's own format check)

// MARK: - The kill -9 application: every response is one version, all keys

/// `count` flags whose every field depends on the version `v`, so a file mixing two
/// responses, or holding part of one, cannot pass `check`.
struct VersionedApp {
    let count: Int
    let code = "ABCDE-12345"

    func key(_ i: Int) -> String { String(format: "f%03d", i) }
    func killed(_ i: Int, _ v: Int) -> Bool { (i + v) % 3 == 0 }
    func defaultPad(_ i: Int, _ v: Int) -> String { "d-\(v)-\(i)-" + String(repeating: "x", count: 120 + (v % 37)) }
    func overridePad(_ i: Int, _ v: Int) -> String { "o-\(v)-\(i)-" + String(repeating: "y", count: 90 + (v % 53)) }

    func definition(version v: Int) -> String {
        let flags = (0..<count).map { i -> String in
            """
            {"key":"\(key(i))","killed":\(killed(i, v)),"properties":{"v":{"type":"number","default":\(v)},\
            "pad":{"type":"string","default":"\(defaultPad(i, v))"}},\
            "rules":[{"id":"r_\(v)_\(i)","enabled":true,"when":{},"properties":{"pad":"\(overridePad(i, v))"}}]}
            """
        }
        return #"{"code":"\#(code)","featureFlagsInPlan":true,"flags":["# + flags.joined(separator: ",") + "]}"
    }

    func expected(_ i: Int, _ v: Int) -> FeatureFlag {
        killed(i, v)
            ? FeatureFlag(key: key(i), isEnabled: false, ruleId: "", properties: ["v": .number(Double(v)), "pad": .string(defaultPad(i, v))])
            : FeatureFlag(key: key(i), isEnabled: true, ruleId: "r_\(v)_\(i)", properties: ["v": .number(Double(v)), "pad": .string(overridePad(i, v))])
    }

    /// The version a stored flag carries (its `v` property), -1 when it has none.
    static func version(_ flag: FeatureFlag) -> Int { flag.properties["v"]?.numberValue.map { Int($0) } ?? -1 }

    /// The single version the snapshot holds, or why it is not one complete response.
    func check(_ snapshot: FlagSnapshot) throws -> Int {
        guard !snapshot.partial else { throw Failure("a partial response was stored") }
        guard snapshot.flags.count == count else { throw Failure("\(snapshot.flags.count) flags stored, expected \(count)") }
        guard let first = snapshot.flags[key(0)] else { throw Failure("\(key(0)) missing") }
        let v = Self.version(first)
        var versions: Set<Int> = []
        var wrong: [String] = []
        for i in 0..<count {
            guard let flag = snapshot.flags[key(i)] else { throw Failure("\(key(i)) missing") }
            versions.insert(Self.version(flag))
            if flag != expected(i, v) { wrong.append(key(i)) }
        }
        guard versions.count == 1, wrong.isEmpty else {
            throw Failure("mixed: versions \(versions.sorted()), flags not matching version \(v): \(wrong.prefix(8))")
        }
        return v
    }
}

/// What the refresh loop saw; shared between the loop thread and the killer.
final class LoopRecord: @unchecked Sendable {
    private let lock = NSLock()
    private var starts: [Double] = []
    private var startedVersions: [Int] = []
    private var acknowledged: [Int] = []
    private var errors: [String] = []
    private var finished = false
    private var cacheCheck: String?

    func started(at t: Double, version v: Int) {
        lock.withLock {
            starts.append(t)
            startedVersions.append(v)
        }
    }
    func acked(_ v: Int) { lock.withLock { acknowledged.append(v) } }
    func error(_ e: String) { lock.withLock { errors.append(e) } }
    func finish() { lock.withLock { finished = true } }
    func setCacheCheck(_ s: String) { lock.withLock { cacheCheck = s } }

    func start(_ k: Int) -> Double? { lock.withLock { starts.count >= k ? starts[k - 1] : nil } }
    var isFinished: Bool { lock.withLock { finished } }
    var snapshot: (starts: Int, lastStarted: Int?, acked: [Int], errors: [String], cache: String?) {
        lock.withLock { (starts.count, startedVersions.last, acknowledged, errors, cacheCheck) }
    }
}

/// The version counter shared with the loop thread (the only writer while it runs).
final class VersionCounter: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Int
    init(_ v: Int) { value = v }
    func next() -> Int { lock.withLock { value += 1; return value } }
    var current: Int { lock.withLock { value } }
}

struct Kill9Options {
    var bin = ""
    var work = ""
    var kills = 1000
    var seed: UInt64 = UInt64(time(nil))
    var flags = 40
}

func runKill9(_ o: Kill9Options) -> Int32 {
    let run = Kill9Run(o)
    return run.run()
}
