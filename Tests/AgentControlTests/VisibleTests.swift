import AgentControl
import AgentCore
import AgentWire
import Testing

/// Human output escapes control characters (Visible.swift); the real binary is tested in
/// AgentDaemonTests/AgentctlEscapingTests.
@Suite struct VisibleTests {
    static let hostile = "\u{1B}]0;owned\u{07}x\r\u{1B}[2Jy\u{202E}z\u{9B}"
    static let escaped = #"\u001b]0;owned\u0007x\r\u001b[2Jy\u202ez\u009b"#

    @Test func escapingRules() {
        #expect(Visible.escape(Self.hostile) == Self.escaped)
        #expect(Visible.escape("plain ascii, üñïçødé, 中文, emoji 🙂") == "plain ascii, üñïçødé, 中文, emoji 🙂")
        #expect(Visible.escape("a\nb\tc\u{7F}") == #"a\nb\tc\u007f"#)
        #expect(Visible.escapeLines("one\u{1B}\ntwo") == "one\\u001b\ntwo")
        // Idempotent: escaped text has nothing left to escape.
        #expect(Visible.escape(Self.escaped) == Self.escaped)
        // Messages from the agent, as agentctl prints them.
        let error = OutputFormatter.format(error: .init(code: -32602, message: "bad \u{1B}[31mvalue\r"))
        #expect(error.text == #"pushwoosh-agentd: error -32602: bad \u001b[31mvalue\r"#)
    }
}
