import Foundation
import Testing

/// The docs hold no hand-kept counts: a number of tests, rules or keys written into a page goes
/// stale with the next test (docs/testing.md once said 530 Swift tests while `make test` ran
/// 662). Each runner prints its own count; a page says what is tested, not how many.
@Suite struct DocsCountTests {
    /// The pages people read: docs/, the READMEs, the man pages.
    static func pages() -> [(path: String, text: String)] {
        CitationTests.files().filter { file in
            (file.path.hasPrefix("docs/") && file.path.hasSuffix(".md")) || file.path == "README.md"
                || file.path == "clients/python/README.md" || file.path.hasPrefix("packaging/man/")
        }
    }

    /// "530 Swift tests", "89 tests of the Python client", "13 OpenFeature and Prometheus tests",
    /// "all 40 keys", "the 41 rules": a number (not a rule's, `RF-2 tests`), up to three words,
    /// then tests, rules or keys.
    static var count: Regex<AnyRegexOutput> { try! Regex(#"(?i)(?:^|[\s(])[0-9][0-9,]*\s+(?:[A-Za-z-]+\s+){0,3}?(?:tests?|rules|keys)\b"#) }

    @Test func noPageKeepsACountOfTestsRulesOrKeys() {
        var found: [String] = []
        for page in Self.pages() {
            for (number, line) in page.text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
                for match in line.matches(of: Self.count) {
                    found.append("\(page.path):\(number + 1): \(line[match.range])")
                }
            }
        }
        #expect(Self.pages().count > 10, "the pages were not found")
        #expect(found.isEmpty, "counts kept by hand (say what is tested, or generate the number):\n\(found.joined(separator: "\n"))")
    }

    /// The check finds what it is for.
    @Test func theCheckFindsACount() {
        for text in ["runs 530 Swift tests", "then 89 tests of the Python client", "13 OpenFeature and Prometheus tests",
                     "all 40 keys", "the 41 rules", "1,024 tests", "(12 tests)"] {
            #expect(text.contains(Self.count), "\(text)")
        }
        for text in ["the Swift tests", "24 h", "5 min throttle", "RF-2 test", "the RF-2 tests", "ST-3 keys", "a 20-second run", "0.85 of a C echo server"] {
            #expect(!text.contains(Self.count), "\(text)")
        }
    }
}
