import Foundation
import Testing

/// The shape of the sources, held by tests: no file too long to read in one
/// sitting, and the socket's method names spelled in one module.
@Suite struct SourceShapeTests {
    static let root = DependencyTests.root

    /// Every Swift file under `directory` (relative to the package), with its text.
    static func swiftFiles(under directory: String) throws -> [(path: String, text: String)] {
        let base = root.appendingPathComponent(directory)
        var result: [(String, String)] = []
        let files = FileManager.default.enumerator(at: base, includingPropertiesForKeys: nil)
        while let file = files?.nextObject() as? URL {
            guard file.pathExtension == "swift" else { continue }
            let path = String(file.path.dropFirst(root.path.count + 1))
            result.append((path, try String(contentsOf: file, encoding: .utf8)))
        }
        return result.sorted { $0.0 < $1.0 }
    }

    @Test func noSourceFileIsOver400Lines() throws {
        let files = try Self.swiftFiles(under: "Sources")
        #expect(files.count > 100)
        for (path, text) in files {
            let lines = text.split(separator: "\n", omittingEmptySubsequences: false).count - (text.hasSuffix("\n") ? 1 : 0)
            #expect(lines <= 400, "\(path) has \(lines) lines")
        }
    }

    /// The file cap must not hide long functions: no function, initializer or closure-free
    /// body under Sources is longer than 100 lines (from its `func`/`init` line to its closing
    /// brace; braces in string literals and comments are not counted).
    @Test func noFunctionIsOver100Lines() throws {
        let declaration = try Regex(#"^\s*(?:@[A-Za-z]+(?:\([^)]*\))?\s+)*(?:(?:public|private|fileprivate|internal|static|mutating|override|final|nonisolated|consuming|class)\s+)*(?:func\s|init[(<?])"#)
        let literal = try Regex(#""(?:[^"\\]|\\.)*""#)
        var long: [String] = []
        var measured = 0
        for (path, text) in try Self.swiftFiles(under: "Sources") {
            let lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
            // Each line's braces, outside string literals and `//` comments.
            let braces = lines.map { line -> (open: Int, close: Int) in
                let code = line.replacing(literal, with: "\"\"")
                let bare = code.range(of: "//").map { String(code[..<$0.lowerBound]) } ?? code
                return (bare.filter { $0 == "{" }.count, bare.filter { $0 == "}" }.count)
            }
            for (start, line) in lines.enumerated() where line.firstMatch(of: declaration) != nil {
                var depth = 0, opened = false, end = start
                while end < lines.count {
                    depth += braces[end].open - braces[end].close
                    if braces[end].open > 0 { opened = true }
                    if opened && depth <= 0 { break }
                    if !opened && end > start + 6 { break }  // a requirement without a body
                    end += 1
                }
                guard opened else { continue }
                measured += 1
                let length = end - start + 1
                if length > 100 { long.append("\(path):\(start + 1): \(length) lines: \(line.trimmingCharacters(in: .whitespaces).prefix(80))") }
            }
        }
        #expect(measured > 1000, "only \(measured) functions measured: the pattern no longer finds them")
        #expect(long.isEmpty, "functions over 100 lines:\n\(long.joined(separator: "\n"))")
    }

    /// The socket method names, read from `enum SocketMethod`'s `case` lines.
    static func socketMethodNames() throws -> Set<String> {
        let text = try String(contentsOf: root.appendingPathComponent("Sources/AgentWire/SocketMethods.swift"), encoding: .utf8)
        guard let start = text.range(of: "public enum SocketMethod"), let end = text.range(of: "public enum Access", range: start.upperBound..<text.endIndex)
        else { Issue.record("SocketMethod not found"); return [] }
        var names: Set<String> = []
        for line in text[start.upperBound..<end.lowerBound].split(separator: "\n") {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            guard trimmed.hasPrefix("case ") else { continue }
            for name in trimmed.dropFirst(5).split(separator: ",") { names.insert(name.trimmingCharacters(in: .whitespaces)) }
        }
        return names
    }

    /// Outside AgentWire a socket method is named through `SocketMethod`, never as a string.
    /// The literals below that happen to equal a method's name are other things' names.
    static let otherMeanings: Set<String> = [
        "Sources/AgentCore/Environment/PersistentState+JSON.swift \"isEnabled\"",  // a flag's field in the state file
        "Sources/AgentControl/CommandDefinition+Device.swift \"status\"",  // agentctl's command names and synopses
        "Sources/AgentControl/CommandDefinition+Device.swift \"metrics\"",  // (`status`, `fleet metrics`)
        "Sources/AgentControl/CommandDefinition+Clock.swift \"clock\"",
        "Sources/AgentControl/CommandDefinition+Flags.swift \"get\"",
        "Sources/AgentControl/CommandDefinition+Flags.swift \"property\"",
        "Sources/AgentControl/CommandDefinition+Flags.swift \"refresh\"",
        "Sources/AgentDaemon/HTTP/HTTPInterface.swift \"status\"",  // /healthz's {"status": "ok"}
        "Sources/EmulatorCore/RequestLog.swift \"status\"",  // a logged request's HTTP status
        "Sources/EmulatorCore/HAR.swift \"status\"",  // a HAR entry's HTTP status
        "Sources/EmulatorCore/LabStart.swift \"clock\"",  // the lab's "clock": "controlled" | "system"
        "Sources/EmulatorCore/LabCommand.swift \"clock\"",  // in the start command's comment
        "Sources/Soak/Checkers.swift \"status\"",  // a violation's kind
        "Sources/Soak/SoakRunner+Report.swift \"status\"",  // a checker's name in the report
        "Sources/Soak/Coverage.swift \"status\"",  // an invariant's name
        "Sources/Soak/CoveragePlan.swift \"status\"",  // an invariant's name
        "Sources/Soak/ClockDriver.swift \"clock\"",  // a violation's kind
        "Sources/Soak/LabDevices.swift \"clock\"",  // a lab device's clock kind, as the soak starts it
        "Sources/AgentDaemon/Metrics.swift \"isEnabled\"",  // in a comment
        "Sources/AgentDaemon/Metrics.swift \"get\"",  // in a comment
        "Sources/Soak/AgentDriver.swift \"status\"",  // a violation's kind
        "Sources/Soak/Model.swift \"status\"",  // a logged request's HTTP status
    ]

    @Test func socketMethodNamesAreStringsOnlyInAgentWire() throws {
        let names = try Self.socketMethodNames()
        #expect(names.count >= 17 && names.contains("advanceClock") && names.contains("get"))
        let literal = try Regex(#""([A-Za-z]+)""#)
        var found: Set<String> = []
        for (path, text) in try Self.swiftFiles(under: "Sources") where !path.hasPrefix("Sources/AgentWire/") {
            for m in text.matches(of: literal) {
                let word = String(m.output[1].substring!)
                guard names.contains(word) else { continue }
                found.insert("\(path) \"\(word)\"")
            }
        }
        let unexplained = found.subtracting(Self.otherMeanings)
        #expect(unexplained.isEmpty, "socket method names as strings outside AgentWire: \(unexplained.sorted())")
        let stale = Self.otherMeanings.subtracting(found)
        #expect(stale.isEmpty, "listed but no longer found: \(stale.sorted())")
    }
}
