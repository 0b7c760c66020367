import AgentCore
import AgentWire
import Glibc

/// `pushwoosh-bench selfcheck`: a differential check of the socket API's fast path
/// (`RPCFastPath`) against the general path (`RPCMessage.parse` + `RPCEncoder`): every line
/// the fast path recognizes must mean the same request, and its answers must be the same
/// bytes. Runs in a second or two; `make bench` runs it first.
enum SelfCheck {
    static func run() -> Int32 {
        var failures: [String] = []
        var recognized = 0
        let lines = seeds()
        var generator = SplitMix(seed: 0x5EED)
        var checked = 0
        func check(_ line: [UInt8]) {
            checked += 1
            let fast = line.withUnsafeBytes { RPCFastPath.scan($0) }
            guard let fast else { return }
            recognized += 1
            let slow = RPCMessage.parse(line)
            guard case .single(.success(let request)) = slow, request.id == fast.id else {
                failures.append("fast path accepted what the general path does not: \(String(decoding: line, as: UTF8.self))")
                return
            }
            let expected: RPCParams
            switch fast.method {
            case .isEnabled(let fallback):
                expected = RPCParams(["key": .string(fast.key), "default": .bool(fallback)])
                if request.method != "isEnabled" { failures.append("method differs: \(String(decoding: line, as: UTF8.self))") }
            case .get:
                expected = RPCParams(["key": .string(fast.key)])
                if request.method != "get" { failures.append("method differs: \(String(decoding: line, as: UTF8.self))") }
            }
            if request.params != expected {
                failures.append("params differ: \(String(decoding: line, as: UTF8.self))")
            }
        }
        for line in lines { check(Array(line.utf8)) }
        // Mutations of the seeds: deleted, replaced and inserted bytes.
        let alphabet = Array(#"{}[]":,. -0123456789etrufalsnd\\u00e9x"#.utf8) + [0x00, 0x0D, 0x09, 0xC3, 0xA9, 0xFF]
        for _ in 0..<200_000 {
            var line = Array(lines[Int(generator.next() % UInt64(lines.count))].utf8)
            for _ in 0...(generator.next() % 3) {
                let at = Int(generator.next() % UInt64(line.count + 1))
                let byte = alphabet[Int(generator.next() % UInt64(alphabet.count))]
                switch generator.next() % 3 {
                case 0: if at < line.count { line.remove(at: at) }
                case 1: if at < line.count { line[at] = byte }
                default: line.insert(byte, at: at)
                }
            }
            check(line)
        }

        // Answers: the general path's JSON (as Methods builds it) against the fast writer.
        let flags = [
            nil,
            FeatureFlag(key: "new_checkout", isEnabled: true, ruleId: "r_1", properties: [
                "button_color": "green", "max_items": 5, "express": true, "layout": ["columns": 2, "x": [1, 2.5, "é\n\"q\""]],
            ]),
            FeatureFlag(key: "k\"ey", isEnabled: false, ruleId: "", properties: [:]),
        ]
        let provenances = [
            Provenance(reason: .targetingMatch, source: .network, ageSeconds: 12.34567),
            Provenance(reason: .default, source: .cache, ageSeconds: 0),
            Provenance(reason: .error, errorCode: .flagNotFound, source: .cache, ageSeconds: 86_399.9996),
            Provenance(reason: .error, errorCode: .providerNotReady, source: .none, ageSeconds: nil),
            Provenance(reason: .disabled, source: .network, ageSeconds: 1e-9),
        ]
        let ids: [RPCID] = [.number(1), .number(-42), .number(123_456_789_012_345), .string("a-b"), .string("")]
        var answers = 0
        for id in ids {
            for p in provenances {
                for enabled in [true, false] {
                    var result = provenance(p)
                    result["enabled"] = .bool(enabled)
                    var w = JSONWriter()
                    RPCFastPath.writeIsEnabled(id: id, enabled: enabled, provenance: p, into: &w)
                    compare(w.bytes, RPCEncoder.line(RPCResponse(id: id, result: .object(result))), &failures)
                    answers += 1
                }
                for flag in flags {
                    var result = provenance(p)
                    result["flag"] = flag.map { f in
                        ["key": .string(f.key), "isEnabled": .bool(f.isEnabled), "ruleId": .string(f.ruleId),
                         "properties": .object(f.properties)]
                    } ?? .null
                    var w = JSONWriter()
                    RPCFastPath.writeGet(id: id, flag: flag, provenance: p, into: &w)
                    compare(w.bytes, RPCEncoder.line(RPCResponse(id: id, result: .object(result))), &failures)
                    answers += 1
                }
            }
        }
        // ageSeconds: the fast writer's own number formatting against writeNumber's.
        for n in 0..<300_000 {
            let magnitude = [1e-4, 1e-2, 1, 100, 1e4, 1e6, 1e9, 1e13][n % 8]
            let age = Double(generator.next() % 1_000_000) / 1_000_000 * magnitude
            let p = Provenance(reason: .targetingMatch, source: .cache, ageSeconds: age)
            var w = JSONWriter()
            RPCFastPath.writeIsEnabled(id: .number(1), enabled: true, provenance: p, into: &w)
            var result = provenance(p)
            result["enabled"] = true
            compare(w.bytes, RPCEncoder.line(RPCResponse(id: .number(1), result: .object(result))), &failures)
            answers += 1
        }
        // writeInteger against String(_:).
        for n in 0..<100_000 {
            let value: Int64 = n < 4 ? [Int64.min, Int64.max, -1, 10][n]
                : Int64(bitPattern: generator.next()) >> (generator.next() % 63)
            var w = JSONWriter()
            w.writeInteger(value)
            compare(w.bytes, Array(String(value).utf8), &failures)
        }
        for failure in failures.prefix(20) { printErr("selfcheck: " + failure) }
        print("selfcheck: \(checked) request lines (\(recognized) taken by the fast path), \(answers) answers compared: "
              + (failures.isEmpty ? "OK" : "\(failures.count) FAILURES"))
        return failures.isEmpty ? 0 : 1
    }

    /// Methods.provenance, as the general path builds it.
    static func provenance(_ p: Provenance) -> [String: JSONValue] {
        var o: [String: JSONValue] = [
            "reason": .string(p.reason.rawValue), "source": .string(p.source.rawValue),
            "ageSeconds": p.ageSeconds.map { .number(($0 * 1000).rounded() / 1000) } ?? .null,
        ]
        if let code = p.errorCode { o["errorCode"] = .string(code.rawValue) }
        return o
    }

    static func compare(_ fast: [UInt8], _ slow: [UInt8], _ failures: inout [String]) {
        if fast != slow {
            failures.append("answer differs:\n  fast \(String(decoding: fast, as: UTF8.self))  slow \(String(decoding: slow, as: UTF8.self))")
        }
    }

    static func seeds() -> [String] {
        [
            #"{"jsonrpc":"2.0","id":1,"method":"isEnabled","params":{"key":"new_checkout","default":false}}"#,
            #"{"jsonrpc":"2.0","id":12345,"method":"isEnabled","params":{"default":true,"key":"new_checkout"}}"#,
            #" { "params" : { "key" : "a" , "default" : true } , "method" : "isEnabled" , "id" : "x" , "jsonrpc" : "2.0" } "#,
            #"{"jsonrpc":"2.0","id":-7,"method":"get","params":{"key":"new_checkout"}}"#,
            #"{"jsonrpc":"2.0","id":0,"method":"get","params":{"key":""}}"#,
            #"{"jsonrpc":"2.0","id":1,"method":"get","params":{"key":"x","default":true}}"#,
            #"{"jsonrpc":"2.0","id":1,"method":"isEnabled","params":{"key":"x"}}"#,
            #"{"jsonrpc":"2.0","method":"isEnabled","params":{"key":"x","default":false}}"#,
            #"{"jsonrpc":"2.0","id":1.5,"method":"get","params":{"key":"x"}}"#,
            #"{"jsonrpc":"2.0","id":1e3,"method":"get","params":{"key":"x"}}"#,
            #"{"jsonrpc":"2.0","id":01,"method":"get","params":{"key":"x"}}"#,
            #"{"jsonrpc":"2.0","id":null,"method":"get","params":{"key":"x"}}"#,
            #"{"jsonrpc":"2.0","id":1,"id":2,"method":"get","params":{"key":"x"}}"#,
            #"{"jsonrpc":"2.0","id":1,"method":"get","params":{"key":"x\u0041"}}"#,
            #"{"jsonrpc":"2.0","id":1,"method":"get","params":{"key":"é"}}"#,
            #"{"jsonrpc":"1.0","id":1,"method":"get","params":{"key":"x"}}"#,
            #"{"jsonrpc":"2.0","id":1,"method":"get","params":{"key":"x"},"extra":1}"#,
            #"{"jsonrpc":"2.0","id":1,"method":"get","params":{"key":"x"}} x"#,
            #"{"jsonrpc":"2.0","id":1,"method":"get","params":{"key":"x"},}"#,
            #"{"jsonrpc":"2.0","id":1,"method":"get","params":{"key":1}}"#,
            #"{"jsonrpc":"2.0","id":1,"method":"status"}"#,
            #"[{"jsonrpc":"2.0","id":1,"method":"get","params":{"key":"x"}}]"#,
            #"{"jsonrpc":"2.0","id":1,"method":"get","params":[]}"#,
            #"{"jsonrpc":"2.0","id":1,"method":"get","params":{}}"#,
            #"{"jsonrpc":"2.0","id":1,"method":"isEnabled","params":{"key":"x","default":null}}"#,
            #"{"jsonrpc":"2.0","id":1,"method":"isEnabled","params":{"key":"x","default":tru}}"#,
            #"{"jsonrpc":"2.0","id":9999999999999999,"method":"get","params":{"key":"x"}}"#,
            #"{"jsonrpc":"2.0","id":-0,"method":"get","params":{"key":"x"}}"#,
        ]
    }
}

/// A small deterministic generator (the check must be reproducible).
struct SplitMix {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
