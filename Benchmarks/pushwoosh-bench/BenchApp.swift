import AgentCore
import Foundation

/// The benchmark's application: the example app's flags plus generated ones, `flagCount`
/// served flags in all, put on an emulator with `PUT /admin/apps/CODE`. The bench loads it
/// itself; `pushwoosh-bench put-app` loads it for Benchmarks/hot-functions.
enum BenchApp {
    static let code = "BENCH-01000"

    /// Puts the app on the emulator at `port`; returns the number of flags it has.
    static func put(port: UInt16, appsFile: String, flagCount: Int) throws -> Int {
        let example = try JSONReader.parse(Array(FileManager.default.contents(atPath: appsFile) ?? Data()))
        var flags = example["flags"]?.arrayValue ?? []
        let served = flags.filter { $0["archived"]?.boolValue != true }.count
        for n in 0..<max(0, flagCount - served) {
            let key = String(format: "bench_flag_%04d", n)
            flags.append([
                "key": .string(key),
                "properties": ["color": ["type": "string", "default": "blue"], "limit": ["type": "number", "default": 3],
                               "express": ["type": "boolean", "default": false]],
                "rules": [["id": .string("r_\(key)"), "enabled": true, "when": ["rolloutPercent": 50],
                           "properties": ["color": "green", "limit": 5]]],
            ])
        }
        let app: JSONValue = ["code": .string(code), "featureFlagsInPlan": true, "flags": .array(flags)]
        let answer = try HTTP.request(port: port, method: "PUT", path: "/admin/apps/\(code)", body: JSONWriter.encode(app))
        guard answer.status / 100 == 2 else { throw BenchError("PUT /admin/apps: HTTP \(answer.status) \(answer.body)") }
        return flags.count
    }

    /// `pushwoosh-bench put-app --port PORT [--flags N] [--apps FILE]`.
    static func command(_ arguments: [String]) -> Int32 {
        let usage = "usage: pushwoosh-bench put-app --port PORT [--flags N] [--apps FILE]"
        var port: UInt16?
        var flagCount = 1000
        var appsFile = "config/flags.example.json"
        var k = 0
        while k + 1 < arguments.count {
            switch arguments[k] {
            case "--port": port = UInt16(arguments[k + 1])
            case "--flags": flagCount = Int(arguments[k + 1]) ?? -1
            case "--apps": appsFile = arguments[k + 1]
            default: k = arguments.count
            }
            k += 2
        }
        guard let port, flagCount >= 0, k == arguments.count else {
            printErr(usage)
            return 2
        }
        do {
            let count = try put(port: port, appsFile: appsFile, flagCount: flagCount)
            print("\(code): \(count) flags")
            return 0
        } catch {
            printErr("put-app: \(error)")
            return 1
        }
    }
}
