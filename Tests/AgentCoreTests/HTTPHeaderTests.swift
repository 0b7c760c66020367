import AgentCore
import Testing

@Suite struct HTTPHeaderTests {
    @Test("Header names compare case-insensitively, letters only; the first field of a name wins")
    func namesAndLookup() {
        #expect(HTTPHeader("Content-Length", "2").isNamed("content-length"))
        #expect(HTTPHeader("content-length", "2").isNamed("CONTENT-LENGTH"))
        #expect(!HTTPHeader("content-length", "2").isNamed("content-lengths"))
        #expect(!HTTPHeader("X-[", "").isNamed("x-{"))  // '[' and '{' differ by the case bit, but are no letters
        #expect(!HTTPHeader("X-@", "").isNamed("x-`"))
        let fields = [HTTPHeader("ETag", "\"a\""), HTTPHeader("etag", "\"b\"")]
        #expect(fields.value(named: "ETAG") == "\"a\"")
        #expect(fields.value(named: "age") == nil)
    }
}
