import FoundationEssentials
import Glibc

/// One line per event to standard error: a constant message, then the facts as
/// key=value (STYLE rule 12). Each line is written with a single `write(2)`.
public struct Log: Sendable {
    public enum Level: Int, Sendable, Comparable {
        case debug, info, warning, error
        public static func < (a: Level, b: Level) -> Bool { a.rawValue < b.rawValue }
        var label: String {
            switch self {
            case .debug: "debug"
            case .info: "info"
            case .warning: "warning"
            case .error: "error"
            }
        }
    }

    public var minimum: Level
    public var fd: Int32

    public init(minimum: Level = .info, fd: Int32 = 2) {
        self.minimum = minimum
        self.fd = fd
    }

    public func callAsFunction(_ level: Level, _ message: String, _ fields: KeyValuePairs<String, Any?> = [:]) {
        guard level >= minimum else { return }
        var line = "pushwoosh-agentd[\(level.label)]: \(message)"
        for (key, value) in fields {
            guard let value else { continue }
            line += " \(key)=\(Self.quote("\(value)"))"
        }
        line += "\n"
        var bytes = Array(line.utf8)
        bytes.withUnsafeMutableBytes { _ = write(fd, $0.baseAddress, $0.count) }
    }

    /// Values with spaces or quotes are quoted so a line stays machine-readable.
    static func quote(_ value: String) -> String {
        guard value.contains(where: { $0 == " " || $0 == "\"" || $0 == "=" || $0.isNewline }) || value.isEmpty else {
            return value
        }
        var escaped = "\""
        for character in value {
            switch character {
            case "\\": escaped += "\\\\"
            case "\"": escaped += "\\\""
            case "\n", "\r\n": escaped += "\\n"
            default: escaped.append(character)
            }
        }
        return escaped + "\""
    }
}

/// Writes `text` to standard error in one `write(2)` (usage errors before the log exists).
func writeStandardError(_ text: String) {
    var bytes = Array(text.utf8)
    bytes.withUnsafeMutableBytes { _ = write(2, $0.baseAddress, $0.count) }
}
