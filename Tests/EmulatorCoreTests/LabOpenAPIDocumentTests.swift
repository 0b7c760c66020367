import AgentCore
import Foundation
import Testing
@testable import EmulatorCore

/// docs/lab.md "The contract": the OpenAPI document the lab serves is docs/lab-openapi.json, byte
/// for byte, and it names every route and method the code answers under `/admin` (the route
/// table) and `/lab` (`LabCommand`), and no other.
@Suite struct LabOpenAPIDocumentTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    static let methods = ["GET", "PUT", "POST", "DELETE", "PATCH"]

    static func file() throws -> String {
        try String(contentsOf: root.appendingPathComponent("docs/lab-openapi.json"), encoding: .utf8)
    }

    static func document() throws -> [String: JSONValue] {
        try StrictJSONParser.parse(LabOpenAPIDocument.text).objectValue ?? [:]
    }

    /// `(path, METHOD)` of every operation of the document under `prefix`, `{name}` segments as `*`.
    static func operations(under prefix: String) throws -> Set<String> {
        let paths = try document()["paths"]?.objectValue ?? [:]
        var found: Set<String> = []
        for (path, item) in paths where path.hasPrefix(prefix) {
            let pattern = path.split(separator: "/").map { $0.hasPrefix("{") ? "*" : String($0) }.joined(separator: "/")
            for method in (item.objectValue ?? [:]).keys where method != "parameters" { found.insert("/\(pattern) \(method.uppercased())") }
        }
        return found
    }

    @Test func theServedTextIsTheFileInTheTree() throws {
        let file = try Self.file()
        #expect(LabOpenAPIDocument.text == file,
                "Sources/EmulatorCore/LabOpenAPIDocument.swift is not docs/lab-openapi.json's text: run scripts/gen-lab-openapi")
        #expect(Array(LabOpenAPIDocument.text.utf8).count == Array(file.utf8).count)
    }

    @Test func itIsAnOpenAPI31DocumentLockedWithTheBearerScheme() throws {
        let doc = try Self.document()
        #expect(doc["openapi"] == "3.1.0")
        #expect(doc["security"] == .array([.object(["bearer": .array([])])]))
        let bearer = doc["components"]?["securitySchemes"]?["bearer"]
        #expect(bearer?["type"] == "http" && bearer?["scheme"] == "bearer")
    }

    /// Every `/admin` row of `Route.table` with each of its methods (a flag action's `*` as each
    /// action), and nothing else.
    @Test func everyAdminRouteAndMethodIsInTheDocument() throws {
        var table: Set<String> = []
        for row in Route.table where row.pattern.first == "admin" {
            let patterns = row.pattern.count == 6 && row.pattern[2] == "*" && row.pattern[5] == "*"
                ? FlagAction.allCases.map { Array(row.pattern.dropLast()) + [$0.rawValue] } : [row.pattern]
            for pattern in patterns {
                for method in row.verbs.methods { table.insert("/" + pattern.joined(separator: "/") + " " + method) }
            }
        }
        let documented = try Self.operations(under: "/admin/")
        #expect(table.count >= 25)
        #expect(table.subtracting(documented).isEmpty, "answered, not in docs/lab-openapi.json: \(table.subtracting(documented).sorted())")
        #expect(documented.subtracting(table).isEmpty, "in docs/lab-openapi.json, not answered: \(documented.subtracting(table).sorted())")
    }

    /// Every `/lab` operation of the document is one `LabCommand` takes (not a 404 or 405), and
    /// every other method on those paths is a 405.
    @Test func everyLabOperationIsOneTheLabTakes() throws {
        let documented = try Self.operations(under: "/lab/")
        #expect(documented.count >= 12)
        let paths = Set(documented.map { String($0.split(separator: " ")[0]) })
        for path in paths {
            let concrete = path.replacingOccurrences(of: "*", with: "qa-0")
            for method in Self.methods {
                let request = EmulatorRequest(method: method, path: concrete, body: Array(#"{"signal":"HUP","method":"status","seconds":1}"#.utf8))
                let status: Int
                switch LabCommand.parse(request) {
                case .success: status = 200
                case .failure(let refusal): status = refusal.status
                }
                if documented.contains("\(path) \(method)") {
                    #expect(status != 404 && status != 405, "\(method) \(concrete): \(status)")
                } else {
                    #expect(status == 405, "\(method) \(concrete) is not in the document, and answers \(status)")
                }
            }
        }
        #expect(try LabCommand.parse(EmulatorRequest(method: "GET", path: "/lab/openapi.json")).get() == .openAPI)
    }

    /// Each operation has an example of what it takes and of its answer, and says what a refusal looks like.
    @Test func everyOperationHasExamplesAndItsRefusals() throws {
        var missing: [String] = []
        let doc = try Self.document()
        func example(_ media: JSONValue?) -> JSONValue? {
            if let example = media?["example"] { return example }
            guard let ref = media?["schema"]?["$ref"]?.stringValue, ref.hasPrefix("#/components/schemas/") else { return nil }
            return doc["components"]?["schemas"]?[String(ref.dropFirst("#/components/schemas/".count))]?["example"]
        }
        for (path, item) in doc["paths"]?.objectValue ?? [:] {
            for (method, operation) in item.objectValue ?? [:] where method != "parameters" {
                let at = "\(method.uppercased()) \(path)"
                let responses = operation["responses"]?.objectValue ?? [:]
                for code in ["400", "401"] where responses[code] == nil { missing.append("\(at): no \(code)") }
                if let body = operation["requestBody"], example(body["content"]?["application/json"]) == nil {
                    missing.append("\(at): no request example")
                }
                let success = responses.filter { $0.key.hasPrefix("2") }
                #expect(!success.isEmpty, "\(at): no 2xx answer")
                for (code, answer) in success {
                    if example(answer["content"]?["application/json"]) == nil, path != "/lab/openapi.json" {
                        missing.append("\(at): no example of its \(code)")
                    }
                }
            }
        }
        #expect(missing.isEmpty, "\(missing.sorted().joined(separator: "\n"))")
    }
}
