import Foundation
import Testing

/// The clone stands alone: what the code, tests, man pages, units, scripts and docs cite is in
/// `docs/`. A citation is written `docs/PAGE.md` with, optionally, a section: `docs/socket-api.md
/// B.2` (a heading of that page starts with `B.2`) or `docs/rules.md §3` (a heading starts with
/// `3.`). Nothing points outside the clone (the design documents the project started from are
/// not part of it), and no comment leans on an issue number, which a reader of the clone cannot
/// look up.
@Suite struct CitationTests {
    static let root = DependencyTests.root

    /// The trees and files whose text is read; build products, virtual environments and binary
    /// files are skipped.
    static let scanned = [
        "Sources", "Tests", "docs", "config", "systemd", "packaging", "scripts", "clients",
        "Benchmarks", "Fuzz", "deploy", ".ci", "Makefile", "README.md", "Package.swift",
    ]

    /// Every text file of the scanned trees, with its path from the root.
    static func files() -> [(path: String, text: String)] {
        var result: [(String, String)] = []
        let fm = FileManager.default
        let skip: Set<String> = [".build", "__pycache__", ".mypy_cache", ".pytest_cache", "crashes", "results"]
        for entry in scanned {
            let url = root.appendingPathComponent(entry)
            var isDirectory: ObjCBool = false
            guard fm.fileExists(atPath: url.path, isDirectory: &isDirectory) else { continue }
            var urls: [URL] = []
            if isDirectory.boolValue {
                let walker = fm.enumerator(at: url, includingPropertiesForKeys: [.isDirectoryKey])
                while let next = walker?.nextObject() as? URL {
                    if skip.contains(next.lastPathComponent) || next.lastPathComponent.hasSuffix(".egg-info") {
                        walker?.skipDescendants()
                        continue
                    }
                    if (try? next.resourceValues(forKeys: [.isDirectoryKey]).isDirectory) == true { continue }
                    urls.append(next)
                }
            } else {
                urls.append(url)
            }
            for file in urls {
                guard let data = try? Data(contentsOf: file), !data.contains(0),
                      let text = String(data: data, encoding: .utf8) else { continue }
                let path = String(file.standardizedFileURL.path.dropFirst(root.standardizedFileURL.path.count + 1))
                result.append((path, text))
            }
        }
        return result.sorted { $0.0 < $1.0 }
    }

    /// This file spells the forbidden forms to find them.
    static let selfPath = "Tests/PackageTests/CitationTests.swift"

    @Test func nothingPointsOutsideTheClone() throws {
        let forbidden: [(String, Regex<AnyRegexOutput>)] = [
            ("a section of a design document outside the clone", try Regex(#"\bPROTOCOL(\.md)?\s+(sections?\s+)?[A-L]\b"#)),
            ("a design document outside the clone", try Regex(#"\b(PROTOCOL|SPEC|STYLE|PITFALLS)\.md\b"#)),
            ("a rule section of a document outside the clone", try Regex(#"\bSPEC\s*§"#)),
            ("a principle of a document outside the clone", try Regex(#"\bSTYLE\s+[0-9]"#)),
            ("a path outside the clone", try Regex(#"\.\./shared\b"#)),
            ("an issue number", try Regex(#"(?i)\bissues?\s+#?[0-9]+\b"#)),
        ]
        var found: [String] = []
        for (path, text) in Self.files() where path != Self.selfPath {
            for (number, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
                for (what, pattern) in forbidden where line.contains(pattern) {
                    found.append("\(path):\(number + 1): \(what): \(line.trimmingCharacters(in: .whitespaces).prefix(120))")
                }
            }
        }
        #expect(found.isEmpty, "\(found.count) citations point outside the clone:\n\(found.joined(separator: "\n"))")
    }

    /// The headings of a docs page, without their `#`s.
    static func headings(_ page: String) -> [String]? {
        guard let text = try? String(contentsOf: root.appendingPathComponent("docs").appendingPathComponent(page), encoding: .utf8) else {
            return nil
        }
        var inCode = false
        return text.split(separator: "\n").compactMap { line in
            if line.hasPrefix("```") { inCode.toggle() }
            guard !inCode, line.hasPrefix("#") else { return nil }
            return String(line.drop { $0 == "#" }.drop { $0 == " " })
        }
    }

    @Test func everyCitationResolvesToAHeading() throws {
        let citation = try Regex(#"docs/([a-z0-9-]+\.md)(?:,? (§[0-9]+|[A-L](?:\.[0-9]+)?)\b)?"#)
        var problems: [String] = []
        var cited = 0
        for (path, text) in Self.files() where path != Self.selfPath {
            for (number, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
                for match in line.matches(of: citation) {
                    cited += 1
                    let page = String(match.output[1].substring!)
                    guard let headings = Self.headings(page) else {
                        problems.append("\(path):\(number + 1): docs/\(page) does not exist")
                        continue
                    }
                    guard let section = match.output[2].substring.map(String.init) else { continue }
                    // §3 is a heading "3. …"; B.2 a heading "B.2 …"; H a heading "H. …".
                    let id = section.hasPrefix("§") ? String(section.dropFirst()) : section
                    let accepted = [id + " ", id + ". "]
                    if !headings.contains(where: { heading in accepted.contains { heading.hasPrefix($0) } }) {
                        problems.append("\(path):\(number + 1): docs/\(page) has no heading \(section)")
                    }
                }
            }
        }
        #expect(cited >= 100, "only \(cited) citations of docs/ found: the pattern no longer matches how the code cites")
        #expect(problems.isEmpty, "\(problems.count) citations do not resolve:\n\(problems.joined(separator: "\n"))")
    }

    @Test func linksBetweenDocumentsResolve() throws {
        let link = try Regex(#"\]\(([^)#\s]+\.md)(#[^)]*)?\)"#)
        var problems: [String] = []
        for (path, text) in Self.files() where path.hasSuffix(".md") {
            let directory = Self.root.appendingPathComponent(path).deletingLastPathComponent()
            for match in text.matches(of: link) {
                let target = String(match.output[1].substring!)
                guard !target.contains("://") else { continue }
                if !FileManager.default.fileExists(atPath: directory.appendingPathComponent(target).path) {
                    problems.append("\(path): link to \(target), which does not exist")
                }
            }
        }
        #expect(problems.isEmpty, "\(problems.joined(separator: "\n"))")
    }

    @Test func theReadmeIsAUsersGuide() throws {
        let readme = try String(contentsOf: Self.root.appendingPathComponent("README.md"), encoding: .utf8)
        let lines = readme.split(separator: "\n", omittingEmptySubsequences: false).count
        #expect(lines <= 400, "README.md has \(lines) lines; the rest belongs in docs/")
    }
}
