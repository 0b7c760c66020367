import AgentCore
import Testing
@testable import AgentWire

/// The socket API's fast path (`RPCFastPath`) against the general path (`RPCMessage.parse`
/// + `FlagAnswers` + `RPCEncoder`): every line the fast path recognizes means the same
/// request, and its answers are the same bytes. (This was `pushwoosh-bench selfcheck`.)
@Suite struct FastPathParityTests {
    private static func text(_ line: [UInt8]) -> String { String(decoding: line, as: UTF8.self) }

    /// nil when the fast path declines `line` or means what the general path means; else why not.
    private static func mismatch(_ line: [UInt8]) -> String? {
        guard let fast = line.withUnsafeBytes({ RPCFastPath.scan($0) }) else { return nil }
        guard case .single(.success(let request)) = RPCMessage.parse(line), request.id == fast.id else {
            return "fast path accepted what the general path does not: \(text(line))"
        }
        let expected: (SocketMethod, RPCParams)
        switch fast.method {
        case .isEnabled(let fallback): expected = (.isEnabled, RPCParams(["key": .string(fast.key), "default": .bool(fallback)]))
        case .get: expected = (.get, RPCParams(["key": .string(fast.key)]))
        }
        if request.method != expected.0.rawValue { return "method differs: \(text(line))" }
        if request.params != expected.1 { return "params differ: \(text(line))" }
        return nil
    }

    @Test func requestsMeanWhatTheGeneralPathReads() {
        var failures: [String] = []
        var recognized = 0
        let lines = Self.seeds().map { Array($0.utf8) }
        var shortcuts = 0
        func check(_ line: [UInt8]) {
            let fast = line.withUnsafeBytes { RPCFastPath.scan($0) }
            if fast != nil { recognized += 1 }
            if let failure = Self.mismatch(line) { failures.append(failure) }
            // The shortcut for the usual shape reads what the member-by-member scanner reads.
            let general = line.withUnsafeBytes { RPCFastPath.scanGeneral($0) }
            if fast != general { failures.append("scan and scanGeneral differ: \(Self.text(line))") }
            if fast != nil, line.starts(with: Array(#"{"jsonrpc":"2.0","id":"#.utf8)) { shortcuts += 1 }
        }
        for line in lines { check(line) }
        // Mutations of the seeds: deleted, replaced and inserted bytes.
        var generator = SeededRandom(seed: 0x5EED)
        let alphabet = Array(#"{}[]":,. -0123456789etrufalsnd\\u00e9x"#.utf8) + [0x00, 0x0D, 0x09, 0xC3, 0xA9, 0xFF]
        for _ in 0..<200_000 {
            var line = lines[Int(generator.next() % UInt64(lines.count))]
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
        #expect(failures.prefix(20) == [])
        #expect(recognized > 1_000)
        #expect(shortcuts > 100)
    }

    /// A request with a key twice is never the fast path's: the general path refuses it with
    /// -32600 naming the key, whichever path the line would otherwise take.
    @Test func duplicateKeysAreRefusedOnBothPaths() {
        for seed in Self.seeds() where seed.contains(#""default":true,"default""#) || seed.contains(#""key":"x","key""#)
            || seed.contains(#""method":"get","method""#) || seed.contains(#""jsonrpc":"2.0","jsonrpc""#) || seed.contains(#"},"params""#) {
            let line = Array(seed.utf8)
            #expect(line.withUnsafeBytes { RPCFastPath.scan($0) } == nil, "\(seed)")
            guard case .single(.failure(let rejection)) = RPCMessage.parse(line) else { Issue.record("accepted: \(seed)"); continue }
            #expect(rejection.error.code == -32600 && rejection.error.message.contains("duplicate key"), "\(seed): \(rejection.error.message)")
        }
    }

    @Test func answersAreTheGeneralPathsBytes() {
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
            // The error's words, with what a key may hold: quotes, a backslash, a newline, ESC, non-ASCII.
            Provenance(reason: .error, errorCode: .flagNotFound, errorMessage: FallbackMessage.flagNotFound("k\"e\\y\n\u{1B}é"),
                       source: .network, ageSeconds: 3),
            Provenance(reason: .error, errorCode: .providerNotReady, errorMessage: FallbackMessage.providerNotReady,
                       source: .none, ageSeconds: nil),
        ]
        let ids: [RPCID] = [.number(1), .number(-42), .number(123_456_789_012_345), .string("a-b"), .string("")]
        for id in ids {
            for p in provenances {
                for enabled in [true, false] {
                    var w = JSONWriter()
                    RPCFastPath.writeIsEnabled(id: id, enabled: enabled, provenance: p, into: &w)
                    #expect(Self.text(w.bytes) == Self.text(RPCEncoder.line(RPCResponse(id: id, result: FlagAnswers.isEnabled(enabled, p)))))
                }
                for flag in flags {
                    var w = JSONWriter()
                    RPCFastPath.writeGet(id: id, flag: flag, provenance: p, into: &w)
                    #expect(Self.text(w.bytes) == Self.text(RPCEncoder.line(RPCResponse(id: id, result: FlagAnswers.get(flag, p)))))
                }
            }
        }
    }

    /// `ageSeconds`: the fast writer's own number formatting against `writeNumber`'s.
    @Test func agesAreWrittenAsTheGeneralPathWritesThem() {
        var generator = SeededRandom(seed: 0xA6E)
        var failures: [String] = []
        for n in 0..<300_000 {
            let magnitude = [1e-4, 1e-2, 1, 100, 1e4, 1e6, 1e9, 1e13][n % 8]
            let age = Double(generator.next() % 1_000_000) / 1_000_000 * magnitude
            let p = Provenance(reason: .targetingMatch, source: .cache, ageSeconds: age)
            var w = JSONWriter()
            RPCFastPath.writeIsEnabled(id: .number(1), enabled: true, provenance: p, into: &w)
            let slow = RPCEncoder.line(RPCResponse(id: .number(1), result: FlagAnswers.isEnabled(true, p)))
            if w.bytes != slow { failures.append("\(Self.text(w.bytes)) vs \(Self.text(slow))") }
        }
        #expect(failures.prefix(20) == [])
    }

    /// `writeInteger` against `String(_:)`.
    @Test func integersAreWrittenAsStringWritesThem() {
        var generator = SeededRandom(seed: 0x1D)
        var failures: [Int64] = []
        for n in 0..<100_000 {
            let value: Int64 = n < 4 ? [Int64.min, Int64.max, -1, 10][n]
                : Int64(bitPattern: generator.next()) >> (generator.next() % 63)
            var w = JSONWriter()
            w.writeInteger(value)
            if w.bytes != Array(String(value).utf8) { failures.append(value) }
        }
        #expect(failures.prefix(20) == [])
    }

    private static func seeds() -> [String] {
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
            #"{"jsonrpc":"2.0","id":1,"method":"get","method":"isEnabled","params":{"key":"x","default":true}}"#,
            #"{"jsonrpc":"2.0","jsonrpc":"2.0","id":1,"method":"get","params":{"key":"x"}}"#,
            #"{"jsonrpc":"2.0","id":1,"method":"get","params":{"key":"x","key":"y"}}"#,
            #"{"jsonrpc":"2.0","id":1,"method":"get","params":{"key":"x"},"params":{"key":"y"}}"#,
            #"{"jsonrpc":"2.0","id":1,"method":"isEnabled","params":{"key":"x","default":true,"default":false}}"#,
            #"{"jsonrpc":"2.0","id":1,"method":"get","params":{"key":"x\u0000"}}"#,
            #"{"jsonrpc":"2.0","id":1,"method":"get","params":{"key\u0000":"x"}}"#,
        ]
    }
}
