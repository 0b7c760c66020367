import FoundationEssentials
import Glibc

/// One line per event to standard error: a constant message, then the facts as
/// key=value (docs/architecture.md §13). Each line is written with a single `write(2)`.
///
/// When standard error is the journal (`JOURNAL_STREAM` names its device and
/// inode, sd-daemon(3)), a line starts with its syslog priority (`<3>` error …
/// `<7>` debug) and without the identifier, which journald already records;
/// elsewhere it reads `pushwoosh-agentd[warning]: message key=value`.
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
        /// The syslog priority journald files the line under (sd-daemon(3)).
        var priority: Int {
            switch self {
            case .debug: 7
            case .info: 6
            case .warning: 4
            case .error: 3
            }
        }
    }

    public var minimum: Level
    public var fd: Int32
    /// Lines carry `<N>` priority prefixes for journald instead of the identifier.
    public var journal: Bool

    public init(minimum: Level = .info, fd: Int32 = 2, journal: Bool = false) {
        self.minimum = minimum
        self.fd = fd
        self.journal = journal
    }

    /// True when `fd` is the stream `JOURNAL_STREAM` (`DEVICE:INODE`, decimal) names:
    /// systemd sets it for StandardError=journal, and a child that redirected its
    /// standard error must not be taken for the journal (sd-daemon(3)).
    public static func isJournalStream(fd: Int32, environment: [String: String]) -> Bool {
        guard let value = environment["JOURNAL_STREAM"] else { return false }
        let parts = value.split(separator: ":")
        guard parts.count == 2, let device = UInt64(parts[0]), let inode = UInt64(parts[1]) else { return false }
        var info = stat()
        guard fstat(fd, &info) == 0 else { return false }
        return UInt64(info.st_dev) == device && UInt64(info.st_ino) == inode
    }

    /// One line, with its newline.
    static func format(_ level: Level, _ message: String, _ fields: KeyValuePairs<String, Any?>, journal: Bool) -> String {
        format(level, message, fields: fields, journal: journal)
    }

    static func format<Fields: Sequence>(_ level: Level, _ message: String, fields: Fields, journal: Bool) -> String
        where Fields.Element == (key: String, value: Any?)
    {
        var line = journal ? "<\(level.priority)>\(message)" : "pushwoosh-agentd[\(level.label)]: \(message)"
        for (key, value) in fields {
            guard let value else { continue }
            line += " \(key)=\(Self.quote("\(value)"))"
        }
        return line + "\n"
    }

    public func callAsFunction(_ level: Level, _ message: String, _ fields: KeyValuePairs<String, Any?> = [:]) {
        write(level, message, fields)
    }

    /// The fields as a list (made at run time, e.g. one added to a caller's).
    func callAsFunction(_ level: Level, _ message: String, fields: [(key: String, value: Any?)]) {
        write(level, message, fields)
    }

    private func write<Fields: Sequence>(_ level: Level, _ message: String, _ fields: Fields)
        where Fields.Element == (key: String, value: Any?)
    {
        guard level >= minimum else { return }
        var bytes = Array(Self.format(level, message, fields: fields, journal: journal).utf8)
        bytes.withUnsafeMutableBytes { _ = Glibc.write(fd, $0.baseAddress, $0.count) }
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
