import AgentCore

/// The fast path's answers: written straight into a byte buffer, the same bytes
/// `RPCEncoder.line` writes for the same result (FastPathParityTests).
extension RPCFastPath {
    /// Appends the answer line (with its `\n`) to an `isEnabled` request.
    public static func writeIsEnabled(id: RPCID, enabled: Bool, provenance: Provenance, into w: inout JSONWriter) {
        // The usual answer (a number id, an age in milliseconds, no error code) is put together
        // on the stack and appended once; the rest is written piece by piece below, the same bytes.
        let done = withUnsafeTemporaryAllocation(of: UInt8.self, capacity: usualAnswerCapacity) { buffer -> Bool in
            guard let count = usualIsEnabledAnswer(id: id, enabled: enabled, provenance: provenance, into: buffer) else { return false }
            w.bytes.append(contentsOf: UnsafeBufferPointer(rebasing: buffer[..<count]))
            return true
        }
        if done { return }
        writeHead(id: id, into: &w)
        writeAge(provenance, into: &w)
        w.writeStatic(enabled ? #","enabled":true"# : #","enabled":false"#)
        writeTail(provenance, into: &w)
    }

    /// Room for `usualIsEnabledAnswer`.
    public static let usualAnswerCapacity = 192

    /// The usual `isEnabled` answer line (a number id, no error code), the bytes `writeIsEnabled`
    /// appends, put together in `buffer` (at least `usualAnswerCapacity` bytes): its length, or
    /// nil for any other answer (then `writeIsEnabled`). The socket sends it from the stack.
    public static func usualIsEnabledAnswer(id: RPCID, enabled: Bool, provenance: Provenance,
                                            into buffer: UnsafeMutableBufferPointer<UInt8>) -> Int? {
        guard case .number(let n) = id, provenance.errorCode == nil, provenance.errorMessage == nil,
              let base = buffer.baseAddress else { return nil }
        var sink = ByteSink(base: base, capacity: buffer.count)
        return sink.isEnabledAnswer(id: n, enabled: enabled, provenance: provenance) ? sink.count : nil
    }

    /// Appends the answer line (with its `\n`) to a `get` request.
    public static func writeGet(id: RPCID, flag: FeatureFlag?, provenance: Provenance, into w: inout JSONWriter) {
        writeHead(id: id, into: &w)
        writeAge(provenance, into: &w)
        writeError(provenance, into: &w)
        if let flag {
            // Keys in sorted order, as `JSONWriter.write(.object)` puts them.
            w.writeStatic(flag.isEnabled ? #","flag":{"isEnabled":true,"key":"# : #","flag":{"isEnabled":false,"key":"#)
            w.writeString(flag.key)
            w.writeStatic(#","properties":"#)
            w.write(.object(flag.properties))
            w.writeStatic(#","ruleId":"#)
            w.writeString(flag.ruleId)
            w.bytes.append(UInt8(ascii: "}"))
        } else {
            w.writeStatic(#","flag":null"#)
        }
        writeReasonAndSource(provenance, into: &w)
    }

    private static func writeHead(id: RPCID, into w: inout JSONWriter) {
        w.writeStatic(#"{"jsonrpc":"2.0","id":"#)
        switch id {
        case .number(let n): w.writeNumber(n)
        case .string(let s): w.writeString(s)
        case .numberLiteral(let text): w.writeASCII(text)
        case .null: w.writeStatic("null")
        }
        w.writeStatic(#","result":{"ageSeconds":"#)
    }

    /// `ageSeconds` as the general path rounds it (milliseconds) and writes it.
    private static func writeAge(_ p: Provenance, into w: inout JSONWriter) {
        if let age = p.ageSeconds {
            writeMilliseconds(SocketTime.seconds(age), into: &w)
        } else {
            w.writeStatic("null")
        }
    }

    /// `value` (a whole number of milliseconds, in seconds) in the bytes `writeNumber`
    /// gives, without going through `description` (`ByteSink.milliseconds`, which the
    /// stack-built `isEnabled` answer uses too); any other number through `writeNumber`.
    static func writeMilliseconds(_ value: Double, into w: inout JSONWriter) {
        let written = withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 32) { buffer -> Bool in
            var sink = ByteSink(base: buffer.baseAddress!, capacity: buffer.count)
            guard sink.milliseconds(value) else { return false }
            w.bytes.append(contentsOf: UnsafeBufferPointer(start: buffer.baseAddress, count: sink.count))
            return true
        }
        if !written { w.writeNumber(value) }
    }

    /// `errorCode` and `errorMessage` (isEnabled only: they sort after `enabled`), `reason`,
    /// `source`, the end.
    private static func writeTail(_ p: Provenance, into w: inout JSONWriter) {
        writeError(p, into: &w)
        writeReasonAndSource(p, into: &w)
    }

    /// `,"errorCode":…,"errorMessage":…` when the read answered with the caller's default.
    private static func writeError(_ p: Provenance, into w: inout JSONWriter) {
        if let code = p.errorCode {
            w.writeStatic(#","errorCode":"#)
            w.writeString(code.rawValue)
        }
        if let message = p.errorMessage {
            w.writeStatic(#","errorMessage":"#)
            w.writeString(message)
        }
    }

    /// `,"reason":…,"source":…}}\n`: the enum values are plain ASCII, written as is.
    private static func writeReasonAndSource(_ p: Provenance, into w: inout JSONWriter) {
        switch p.reason {
        case .targetingMatch: w.writeStatic(#","reason":"TARGETING_MATCH","source":""#)
        case .default: w.writeStatic(#","reason":"DEFAULT","source":""#)
        case .disabled: w.writeStatic(#","reason":"DISABLED","source":""#)
        case .error: w.writeStatic(#","reason":"ERROR","source":""#)
        }
        switch p.source {
        case .network: w.writeStatic(#"network"}}"#)
        case .cache: w.writeStatic(#"cache"}}"#)
        case .none: w.writeStatic(#"none"}}"#)
        }
        w.bytes.append(0x0A)
    }
}

/// A fixed buffer that the usual `isEnabled` answer is put together in: each `put` is false
/// (and the answer is then written by `JSONWriter` instead) when it does not fit or when the
/// bytes would need a form this does not write (`Double.description`).
private struct ByteSink {
    let base: UnsafeMutablePointer<UInt8>
    let capacity: Int
    var count = 0

    @inline(__always)
    mutating func put(_ text: StaticString) -> Bool {
        let n = text.utf8CodeUnitCount
        guard capacity &- count >= n else { return false }
        (base + count).update(from: text.utf8Start, count: n)
        count &+= n
        return true
    }

    @inline(__always)
    mutating func put(_ byte: UInt8) -> Bool {
        guard count < capacity else { return false }
        base[count] = byte
        count &+= 1
        return true
    }

    /// `JSONWriter.writeInteger`'s bytes.
    mutating func integer(_ i: Int64) -> Bool {
        if i < 0, !put(UInt8(ascii: "-")) { return false }
        var magnitude = i.magnitude
        var digits = 1
        var probe = magnitude
        while probe >= 10 {
            probe /= 10
            digits &+= 1
        }
        guard capacity &- count >= digits else { return false }
        var at = count &+ digits
        repeat {
            at &-= 1
            base[at] = UInt8(ascii: "0") &+ UInt8(truncatingIfNeeded: magnitude % 10)
            magnitude /= 10
        } while magnitude > 0
        count &+= digits
        return true
    }

    /// `JSONWriter.writeNumber`'s bytes for a finite whole number below 2^53 and for a
    /// non-finite one; false for the rest (written with `description`).
    mutating func number(_ n: Double) -> Bool {
        guard n.isFinite else { return put("null") }
        guard n.magnitude < 9_007_199_254_740_992, let i = Int64(exactly: n) else { return false }
        return integer(i)
    }

    /// `value` (a whole number of milliseconds, in seconds) in the bytes `JSONWriter.writeNumber`
    /// gives (Swift's shortest round-trip form): a number of at most three decimals is its own
    /// shortest form, `0.001` to `1e15` are written without an exponent, and trailing zeros
    /// are dropped. Below 1e12 s a whole number of milliseconds is exact in an Int64 (no fmod).
    /// False when it does not fit or needs `description`.
    mutating func milliseconds(_ value: Double) -> Bool {
        let millis = (value * 1000).rounded()
        guard value > 0, value < 1e12, millis / 1000 == value, Int64(millis) % 1000 != 0 else { return number(value) }
        guard integer(Int64(millis) / 1000), put(UInt8(ascii: ".")) else { return false }
        var fraction = Int(Int64(millis) % 1000)
        var digits = 3
        while fraction % 10 == 0 {
            fraction /= 10
            digits -= 1
        }
        var divisor = 1
        for _ in 1..<digits { divisor *= 10 }
        while divisor > 0 {
            guard put(UInt8(ascii: "0") &+ UInt8(fraction / divisor % 10)) else { return false }
            divisor /= 10
        }
        return true
    }

    /// `writeIsEnabled`'s bytes for a number id and no error code.
    mutating func isEnabledAnswer(id: Double, enabled: Bool, provenance p: Provenance) -> Bool {
        guard put(#"{"jsonrpc":"2.0","id":"#), number(id), put(#","result":{"ageSeconds":"#) else { return false }
        if let age = p.ageSeconds {
            guard milliseconds(SocketTime.seconds(age)) else { return false }
        } else {
            guard put("null") else { return false }
        }
        guard put(enabled ? #","enabled":true"# : #","enabled":false"#) else { return false }
        let reason: Bool
        switch p.reason {
        case .targetingMatch: reason = put(#","reason":"TARGETING_MATCH","source":""#)
        case .default: reason = put(#","reason":"DEFAULT","source":""#)
        case .disabled: reason = put(#","reason":"DISABLED","source":""#)
        case .error: reason = put(#","reason":"ERROR","source":""#)
        }
        guard reason else { return false }
        switch p.source {
        case .network: guard put(#"network"}}"#) else { return false }
        case .cache: guard put(#"cache"}}"#) else { return false }
        case .none: guard put(#"none"}}"#) else { return false }
        }
        return put(0x0A)
    }
}

extension JSONWriter {
    /// Appends a literal that needs no escaping (no String in between).
    @inline(__always)
    mutating func writeStatic(_ text: StaticString) {
        text.withUTF8Buffer { bytes.append(contentsOf: $0) }
    }
}
