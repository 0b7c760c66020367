/// The bearer-token check of the agent's HTTP interface (docs/http.md F, `TokenFile=`) and the
/// emulator's admin API (`--admin-token`, docs/emulator.md D): one parse of the header, one
/// comparison whose time does not depend on where, or whether, the tokens differ.
public enum BearerToken {
    /// The token of an `Authorization: Bearer TOKEN` value: the scheme compared
    /// case-insensitively, spaces and tabs around the token dropped; nil for another scheme or
    /// no token.
    public static func from(authorization value: String) -> String? {
        let parts = value.split(separator: " ", maxSplits: 1, omittingEmptySubsequences: true)
        guard parts.count == 2, parts[0].lowercased() == "bearer" else { return nil }
        let token = parts[1].trimmingOptionalWhitespace()
        return token.isEmpty ? nil : token
    }

    /// Whether `candidate` is `token`, comparing every byte of the longer of the two, so that
    /// the time taken tells nothing of the token.
    public static func matches(_ candidate: String, _ token: [UInt8]) -> Bool {
        let given = Array(candidate.utf8)
        var difference = UInt8(given.count == token.count ? 0 : 1)
        for i in 0..<max(given.count, token.count) {
            difference |= (i < given.count ? given[i] : 0) ^ (i < token.count ? token[i] : 0)
        }
        return difference == 0
    }
}
