import AgentCore

// summary.json's layout.

/// Indented JSON with sorted keys (JSONWriter's compact form, laid out for people).
public func prettyJSON(_ v: JSONValue, indent: String = "") -> String {
    let inner = indent + "  "
    switch v {
    case .array(let a) where !a.isEmpty:
        if a.allSatisfy({ if case .object = $0 { return false }; if case .array = $0 { return false }; return true }), a.count <= 12 {
            return JSONWriter.string(v)
        }
        return "[\n" + a.map { inner + prettyJSON($0, indent: inner) }.joined(separator: ",\n") + "\n" + indent + "]"
    case .object(let o) where !o.isEmpty:
        return "{\n" + o.keys.sorted().map { inner + JSONWriter.string(.string($0)) + ": " + prettyJSON(o[$0]!, indent: inner) }
            .joined(separator: ",\n") + "\n" + indent + "}"
    default:
        return JSONWriter.string(v)
    }
}
