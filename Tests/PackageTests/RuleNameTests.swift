import Foundation
import Testing

/// docs/rules.md and the test names agree: every rule the page lists has a test whose display
/// name starts with its id, test names cite only ids the page lists, and every test the page
/// names exists and cites the rule of its row.
@Suite struct RuleNameTests {
    static let root = DependencyTests.root
    static let page = "docs/rules.md"

    /// One row of the page: a rule id and the tests listed for it.
    struct Row {
        var id: String
        var tests: [(suite: String, function: String, file: String)]
    }

    /// A Swift Testing test with a display name.
    struct NamedTest {
        var file: String
        var suite: String?
        var function: String
        var name: String
        /// The ids before the name's colon: `RF-2, RF-12: …` gives both.
        var leading: [String]
        /// Every id the name mentions.
        var cited: [String]
    }

    /// The page's table rows: `| RF-4 | summary | tests |`, each test written
    /// `` `Suite.function` ([label](../Tests/…/File.swift)) ``.
    static func rows() throws -> [Row] {
        let text = try String(contentsOf: root.appendingPathComponent(page), encoding: .utf8)
        let row = try Regex(#"^\| ([A-Z]{2}-[0-9]+) \|"#)
        let test = try Regex(#"`([A-Za-z_][A-Za-z0-9_]*)\.([A-Za-z_][A-Za-z0-9_]*)` \(\[[^\]]*\]\(\.\./([^)]+)\)\)"#)
        return text.split(separator: "\n", omittingEmptySubsequences: false).compactMap { line -> Row? in
            guard let m = line.firstMatch(of: row) else { return nil }
            let tests = line.matches(of: test).map {
                (suite: String($0.output[1].substring!), function: String($0.output[2].substring!), file: String($0.output[3].substring!))
            }
            return Row(id: String(m.output[1].substring!), tests: tests)
        }
    }

    /// Every `@Test("…")` under Tests/, with the suite it is in and the function it names.
    static func namedTests() throws -> [NamedTest] {
        let literal = try Regex(#"^@Test\(\s*"((?:[^"\\]|\\.)*)""#)
        let suite = try Regex(#"^@Suite\b.*\bstruct ([A-Za-z_][A-Za-z0-9_]*)"#)
        let function = try Regex(#"\bfunc ([A-Za-z_][A-Za-z0-9_]*)"#)
        let leading = try Regex(#"^([A-Z]{2}-[0-9]+(?:, [A-Z]{2}-[0-9]+)*): "#)
        let id = try Regex(#"\b[A-Z]{2}-[0-9]+\b"#)
        var result: [NamedTest] = []
        let tests = root.appendingPathComponent("Tests")
        let files = FileManager.default.enumerator(at: tests, includingPropertiesForKeys: nil)
        while let file = files?.nextObject() as? URL {
            guard file.pathExtension == "swift" else { continue }
            let path = String(file.standardizedFileURL.path.dropFirst(root.standardizedFileURL.path.count + 1))
            let lines = try String(contentsOf: file, encoding: .utf8).split(separator: "\n", omittingEmptySubsequences: false)
            var current: String?
            for (i, raw) in lines.enumerated() {
                let line = raw.drop { $0 == " " }
                if let m = line.firstMatch(of: suite) { current = String(m.output[1].substring!) }
                guard let m = line.firstMatch(of: literal) else { continue }
                let name = String(m.output[1].substring!)
                // The function follows the attribute, on its line or within the next few.
                let after = [String(line[m.range.upperBound...])] + lines[(i + 1)..<min(i + 4, lines.count)].map(String.init)
                let named = after.lazy.compactMap { $0.firstMatch(of: function) }.first.map { String($0.output[1].substring!) }
                result.append(NamedTest(
                    file: path, suite: current, function: named ?? "?", name: name,
                    leading: name.firstMatch(of: leading).map { String($0.output[1].substring!).components(separatedBy: ", ") } ?? [],
                    cited: name.matches(of: id).map { String(name[$0.range]) }))
            }
        }
        return result.sorted { ($0.file, $0.function) < ($1.file, $1.function) }
    }

    @Test func thePageListsRulesOnce() throws {
        let ids = try Self.rows().map(\.id)
        #expect(ids.count >= 40, "\(Self.page) lists \(ids.count) rules")
        for id in Set(ids) where ids.filter({ $0 == id }).count > 1 {
            Issue.record("\(id): listed more than once in \(Self.page)")
        }
    }

    @Test func everyRuleHasATestNamedByIt() throws {
        let named = Set(try Self.namedTests().flatMap(\.leading))
        for row in try Self.rows() where !named.contains(row.id) {
            Issue.record("\(row.id): no test under Tests/ has a display name starting with \"\(row.id): \" (\(Self.page) lists it)")
        }
    }

    @Test func testNamesCiteOnlyListedRules() throws {
        let listed = Set(try Self.rows().map(\.id))
        let tests = try Self.namedTests()
        #expect(tests.count >= 40)
        for test in tests {
            for id in test.cited where !listed.contains(id) {
                Issue.record("\(id): cited by \(test.file) \(test.function) (\"\(test.name)\"), but \(Self.page) does not list it")
            }
        }
    }

    @Test func listedTestsExistAndCiteTheirRule() throws {
        let tests = try Self.namedTests()
        for row in try Self.rows() {
            #expect(!row.tests.isEmpty, "\(row.id): \(Self.page) names no test for it")
            for listed in row.tests {
                let found = tests.filter { $0.file == listed.file && $0.suite == listed.suite && $0.function == listed.function }
                if found.isEmpty {
                    Issue.record("\(row.id): \(Self.page) names \(listed.suite).\(listed.function) in \(listed.file), which has no such named test")
                } else if !found.contains(where: { $0.leading.contains(row.id) }) {
                    Issue.record("\(row.id): \(Self.page) names \(listed.suite).\(listed.function), whose display name does not start with \(row.id)")
                }
            }
        }
    }
}
