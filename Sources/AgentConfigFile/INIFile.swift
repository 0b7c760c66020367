import AgentCore
import AgentPosix
import CInih
import Glibc

// systemd-style INI files (docs/configuration.md C.1, E.1), parsed by libinih: what agent.conf and
// fleet.conf share. Every error names the file, the line and the key. Time spans use
// systemd's syntax (`TimeSpan`, in AgentCore). No Foundation: the systemd generator links this too.

// MARK: - Errors

/// A configuration problem: `FILE:LINE: KEY: what is wrong`.
public struct ConfigurationError: Error, Sendable, Equatable, CustomStringConvertible {
    public var file: String
    /// 1-based; nil for problems of the file as a whole (missing, a required key absent).
    public var line: Int?
    /// The key (or `[Section]`) concerned, if any.
    public var key: String?
    public var message: String

    public init(file: String, line: Int?, key: String?, message: String) {
        self.file = file
        self.line = line
        self.key = key
        self.message = message
    }

    public var description: String {
        var s = file
        if let line { s += ":\(line)" }
        if let key { s += ": \(key)" }
        return s + ": " + message
    }
}

/// A bad value, before it is placed at a line.
public struct ValueError: Error, Sendable {
    public var message: String
    public init(_ message: String) { self.message = message }
}

// MARK: - Reading a file

/// The sections a file may have and the keys of each, in the order errors list them.
public struct INISchema: Sendable {
    public var sections: [(name: String, keys: [String])]
    public init(_ sections: [(name: String, keys: [String])]) { self.sections = sections }

    func keys(of section: String) -> [String]? { sections.first { $0.name == section }?.keys }
    func section(of key: String) -> String? { sections.first { $0.keys.contains(key) }?.name }
    /// `[A], [B] or [C]`.
    var sectionList: String {
        let names = sections.map { "[\($0.name)]" }
        guard names.count > 1 else { return names.first ?? "" }
        return names.dropLast().joined(separator: ", ") + " or " + names.last!
    }
}

public enum INIFile {
    /// The largest configuration file read (far above any real one).
    public static let maximumBytes = 4 << 20

    /// The whole file, read with AgentPosix's `TrustedFile`: a FIFO or a device (`/dev/zero`) is
    /// refused at once instead of blocking or filling memory, and so is a file over
    /// `maximumBytes`; a missing or unreadable file is an error naming it. A symlink is followed
    /// (configuration management links files into place); what it names is checked the same.
    public static func read(_ path: String) throws(ConfigurationError) -> [UInt8] {
        do {
            return try TrustedFile.read(path: path, maxBytes: maximumBytes, refuseWritableByOthers: false, followSymlink: true).bytes
        } catch {
            throw ConfigurationError(file: path, line: nil, key: nil, message: "cannot read the configuration file: \(error.reason)")
        }
    }

    /// A key set twice in one file (in the same section): the later line wins, as systemd's
    /// drop-ins and `make run`'s appended lines expect, and the reader is told.
    public struct RepeatedKey: Sendable, Equatable, CustomStringConvertible {
        public var file: String
        public var section: String
        public var key: String
        /// The line that set it first, and the line that sets it again (and wins).
        public var firstLine: Int
        public var line: Int

        public var description: String {
            "\(file):\(line): \(key): set again in [\(section)] (first at line \(firstLine)); the value of line \(line) is used"
        }
    }

    /// Parses `bytes` (`file` names it in errors): calls `handle(section, key, value)` for
    /// each key in order, its value without a trailing `# comment`. Unknown sections and
    /// keys, syntax errors and the `ValueError`s `handle` throws become errors at their line.
    /// Returns the keys set more than once (the later value wins), for a warning.
    @discardableResult
    public static func parse(_ bytes: [UInt8], file: String, schema: INISchema,
                             handle: (_ section: String, _ key: String, _ value: String) throws(ValueError) -> Void)
        throws(ConfigurationError) -> [RepeatedKey]
    {
        try withoutActuallyEscaping(handle) { (handle) throws(ConfigurationError) in
            let context = INIContext(file: file, bytes: bytes, schema: schema, handle: handle)
            let unmanaged = Unmanaged.passRetained(context)
            defer { unmanaged.release() }
            let pointer = unmanaged.toOpaque()
            let reader: ini_reader = { buffer, size, stream in
                Unmanaged<INIContext>.fromOpaque(stream!).takeUnretainedValue().readLine(into: buffer, size: Int(size))
            }
            let handler: ini_handler = { user, section, name, value in
                let context = Unmanaged<INIContext>.fromOpaque(user!).takeUnretainedValue()
                return context.handle(section: section, name: name, value: value) ? 1 : 0
            }
            let firstErrorLine = ini_parse_stream(reader, pointer, handler, pointer)
            if let error = context.error, firstErrorLine == 0 || firstErrorLine >= (error.line ?? 0) {
                throw error
            }
            if firstErrorLine > 0 {
                throw ConfigurationError(file: file, line: Int(firstErrorLine), key: nil,
                                         message: "syntax error: expected [Section], Key=Value or a comment")
            }
            if let error = context.error { throw error }
            return context.repeated
        }
    }
}

/// The state of one parse, reached from libinih's C callbacks through `void *`.
private final class INIContext {
    let schema: INISchema
    let handler: (String, String, String) throws(ValueError) -> Void
    let file: String
    let lines: [ArraySlice<UInt8>]
    var next = 0
    /// The 1-based number of the line libinih is working on.
    var lineNumber = 0
    var error: ConfigurationError?
    /// The line of each `Section.Key` set so far, and the keys set again.
    var firstLines: [String: Int] = [:]
    var repeated: [INIFile.RepeatedKey] = []

    init(file: String, bytes: [UInt8], schema: INISchema,
         handle: @escaping (String, String, String) throws(ValueError) -> Void) {
        self.file = file
        self.schema = schema
        self.handler = handle
        var bytes = bytes[...]
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { bytes = bytes.dropFirst(3) }
        var lines = bytes.split(separator: 0x0A, omittingEmptySubsequences: false)
        if lines.last?.isEmpty == true { lines.removeLast() }
        self.lines = lines
    }

    func fail(_ key: String?, _ message: String) {
        if error == nil { error = ConfigurationError(file: file, line: lineNumber, key: key, message: message) }
    }

    /// libinih's `fgets`: one line per call, so `lineNumber` is libinih's line.
    /// Leading whitespace is dropped (systemd ignores it; libinih would take an
    /// indented line for a continuation of the previous value).
    func readLine(into buffer: UnsafeMutablePointer<CChar>?, size: Int) -> UnsafeMutablePointer<CChar>? {
        guard error == nil, next < lines.count, let buffer else { return nil }
        var line = lines[next]
        next += 1
        lineNumber = next
        while let first = line.first, first == 0x20 || first == 0x09 { line = line.dropFirst() }
        if line.contains(0) { fail(nil, "the line contains a NUL byte"); return nil }
        guard line.count + 2 <= size else {
            fail(nil, "the line is longer than \(size - 2) bytes")
            return nil
        }
        if line.first == UInt8(ascii: "["), !checkSectionHeader(line) { return nil }
        var i = 0
        for byte in line {
            buffer[i] = CChar(bitPattern: byte)
            i += 1
        }
        buffer[i] = 0x0A
        buffer[i + 1] = 0
        return buffer
    }

    /// Catches unknown sections even when they hold no keys (libinih reports
    /// sections only with their keys).
    private func checkSectionHeader(_ line: ArraySlice<UInt8>) -> Bool {
        guard let close = line.firstIndex(of: UInt8(ascii: "]")) else { return true }  // libinih reports it
        let name = String(decoding: line[(line.startIndex + 1)..<close], as: UTF8.self)
        if schema.keys(of: name) == nil {
            fail("[\(name)]", "unknown section (expected \(schema.sectionList))")
            return false
        }
        return true
    }

    func handle(section: UnsafePointer<CChar>?, name: UnsafePointer<CChar>?, value: UnsafePointer<CChar>?) -> Bool {
        guard error == nil else { return false }
        guard let name, let key = String(validatingCString: name) else {
            fail(nil, "the key is not valid UTF-8")
            return false
        }
        let sectionName = section.flatMap { String(validatingCString: $0) } ?? ""
        guard let raw = value.flatMap({ String(validatingCString: $0) }) else {
            fail(key, "the value is not valid UTF-8")
            return false
        }
        guard !sectionName.isEmpty else {
            fail(key, "key outside a section (expected it under \(sectionOf(key).map { "[\($0)]" } ?? "a section"))")
            return false
        }
        guard let keys = schema.keys(of: sectionName) else {
            fail("[\(sectionName)]", "unknown section (expected \(schema.sectionList))")
            return false
        }
        guard keys.contains(key) else {
            var message = "unknown key in [\(sectionName)]"
            if let other = sectionOf(key) {
                message += " (it belongs in [\(other)])"
            } else if let near = schema.sections.flatMap(\.keys).first(where: { $0.lowercased() == key.lowercased() }) {
                message += " (did you mean \(near)?)"
            }
            fail(key, message)
            return false
        }
        if let first = firstLines[sectionName + "." + key] {
            repeated.append(INIFile.RepeatedKey(file: file, section: sectionName, key: key, firstLine: first, line: lineNumber))
        } else {
            firstLines[sectionName + "." + key] = lineNumber
        }
        do {
            try handler(sectionName, key, Self.stripComment(raw))
        } catch {
            fail(key, error.message)
            return false
        }
        return true
    }

    private func sectionOf(_ key: String) -> String? {
        schema.section(of: key)
    }

    /// `Value   # comment` → `Value`: a `#` at the start of the value or after
    /// whitespace begins a comment (the documented example file has them).
    static func stripComment(_ value: String) -> String {
        var result = Substring(value)
        var previousIsSpace = true
        for index in value.indices {
            let c = value[index]
            if c == "#" && previousIsSpace {
                result = value[..<index]
                break
            }
            previousIsSpace = c == " " || c == "\t"
        }
        return result.trimmingWhitespace()
    }
}
