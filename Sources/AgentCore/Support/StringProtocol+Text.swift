// The few text helpers the agent needs that FoundationEssentials does not carry.

extension StringProtocol {
    /// The text without leading and trailing whitespace (spaces, tabs, newlines).
    public func trimmingWhitespace() -> String {
        guard let first = firstIndex(where: { !$0.isWhitespace }),
              let last = lastIndex(where: { !$0.isWhitespace }) else { return "" }
        return String(self[first...last])
    }

    /// The text without leading and trailing spaces and tabs: HTTP's optional whitespace
    /// around a field value or list element (RFC 9110 5.6.3).
    public func trimmingOptionalWhitespace() -> String {
        let isSpace: (Character) -> Bool = { $0 == " " || $0 == "\t" }
        guard let first = firstIndex(where: { !isSpace($0) }), let last = lastIndex(where: { !isSpace($0) }) else { return "" }
        return String(self[first...last])
    }
}

extension Sequence where Element == UInt8 {
    /// Two hex digits per byte, e.g. `0x0a 0xff` → `0aff` (or `0AFF`).
    public func hexString(uppercase: Bool = false) -> String {
        let digits: [UInt8] = Array((uppercase ? "0123456789ABCDEF" : "0123456789abcdef").utf8)
        var out: [UInt8] = []
        for byte in self {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: out, as: UTF8.self)
    }
}
