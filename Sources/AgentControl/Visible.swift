import AgentCore

/// Writes to `base` with control characters escaped line by line: the last guard for
/// whatever a formatter printed without escaping its values.
struct VisibleOutput<Base: ControlOutput>: ControlOutput {
    let base: Base
    func out(_ line: String) { base.out(Visible.escapeLines(line)) }
    func err(_ line: String) { base.err(Visible.escapeLines(line)) }
}
