import AgentCore

/// Where a JSON text or a definition is wrong: a path such as
/// `flags[2].rules[0].when.rolloutPercent` and what is wrong there.
public struct DefinitionError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Path components from the root, e.g. `["flags", 2, "key"]`, rendered by `path`.
    public var components: [PathComponent]
    public var message: String

    public typealias PathComponent = JSONPathComponent

    public init(_ components: [PathComponent] = [], _ message: String) {
        self.components = components
        self.message = message
    }

    /// `flags[2].rules[0].when` (empty for the root).
    public var path: String { Self.render(components) }

    /// A path as errors show it: `flags[2].rules[0].when`.
    static func render(_ components: [PathComponent]) -> String {
        var out = ""
        for c in components {
            switch c {
            case .key(let k): out += out.isEmpty ? k : "." + k
            case .index(let i): out += "[\(i)]"
            }
        }
        return out
    }

    public var description: String { path.isEmpty ? message : "\(path): \(message)" }

    /// The same error seen from one level up.
    func prefixed(_ c: PathComponent) -> DefinitionError {
        var e = self
        e.components.insert(c, at: 0)
        return e
    }
}

/// Definitions and device API bodies are read with AgentCore's strict `JSONReader`,
/// which here also rejects a key given twice in one object, naming the object's path.
public enum StrictJSONParser {
    public static func parse(_ text: String) throws(DefinitionError) -> JSONValue {
        try parse(Array(text.utf8))
    }

    public static func parse(_ bytes: [UInt8]) throws(DefinitionError) -> JSONValue {
        do {
            return try JSONReader.parse(bytes, duplicateKeys: .reject)
        } catch {
            return try { () throws(DefinitionError) -> JSONValue in
                throw error.path.isEmpty && !error.reason.hasPrefix("duplicate key")
                    ? DefinitionError([], "invalid JSON at byte \(error.offset): \(error.reason)")
                    : DefinitionError(error.path, error.reason)
            }()
        }
    }
}
