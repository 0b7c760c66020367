/// Output is data: what the agent sends (flag keys, User IDs, messages) may hold terminal
/// control characters, and printed raw an ESC sequence would move the cursor, retitle the
/// window or hide the lines before it. Human output shows them escaped, in JSON's spelling,
/// so `--json` output (where JSON already escapes them) reads the same after this. agentctl's
/// output and `pushwoosh-agentd --doctor`'s (server text) go through it.
public enum Visible {
    /// `text` with every control character escaped: `\n`, `\r`, `\t`, and `\uXXXX` for the
    /// rest of C0, DEL, C1 and the bidirectional overrides and isolates (which reorder what
    /// a terminal shows).
    public static func escape(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: needsEscape) else { return text }
        var out = ""
        out.reserveCapacity(text.utf8.count + 8)
        for scalar in text.unicodeScalars {
            guard needsEscape(scalar) else {
                out.unicodeScalars.append(scalar)
                continue
            }
            switch scalar {
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            default:
                let hex = String(scalar.value, radix: 16)
                out += "\\u" + String(repeating: "0", count: max(0, 4 - hex.count)) + hex
            }
        }
        return out
    }

    /// Each line of `text` escaped; the line breaks between them kept.
    public static func escapeLines(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: { $0 != "\n" && needsEscape($0) }) else { return text }
        return text.split(separator: "\n", omittingEmptySubsequences: false).map { escape(String($0)) }.joined(separator: "\n")
    }

    public static func needsEscape(_ s: Unicode.Scalar) -> Bool {
        switch s.value {
        case 0x00...0x1F, 0x7F...0x9F: true
        case 0x200E, 0x200F, 0x202A...0x202E, 0x2066...0x2069: true  // LRM, RLM, embeddings, overrides, isolates
        default: false
        }
    }
}
