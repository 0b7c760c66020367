import AgentCore
import Testing
@testable import AgentWire

private func single(_ line: String) -> Result<RPCRequest, RPCRejection>? {
    if case .single(let r) = RPCMessage.parse(line) { return r }
    return nil
}

private func rejection(_ line: String) -> RPCRejection? {
    if case .failure(let r)? = single(line) { return r }
    return nil
}

private func text(_ bytes: [UInt8]?) -> String? { bytes.map { String(decoding: $0, as: UTF8.self) } }

@Suite struct JSONRPCParseTests {
    @Test func parsesARequest() throws {
        let r = try #require(try single(#"{"jsonrpc":"2.0","id":1,"method":"isEnabled","params":{"key":"new_checkout","default":false}}"#)?.get())
        #expect(r.id == .number(1))
        #expect(r.method == "isEnabled")
        #expect(try r.params.string("key") == "new_checkout")
        #expect(try r.params.bool("default") == false)
        #expect(!r.isNotification)
    }

    @Test func idKinds() throws {
        #expect(try single(#"{"jsonrpc":"2.0","id":"abc","method":"status"}"#)?.get().id == .string("abc"))
        #expect(try single(#"{"jsonrpc":"2.0","id":-7.5,"method":"status"}"#)?.get().id == .number(-7.5))
        #expect(try single(#"{"jsonrpc":"2.0","id":null,"method":"status"}"#)?.get().id == .null)
        let notification = try single(#"{"jsonrpc":"2.0","method":"status"}"#)?.get()
        #expect(notification?.id == nil)
        #expect(notification?.isNotification == true)
    }

    @Test func absentParamsAreEmpty() throws {
        let r = try single(#"{"jsonrpc":"2.0","id":1,"method":"refresh"}"#)?.get()
        #expect(r?.params == RPCParams())
    }

    @Test func parseErrorHasNullID() {
        for line in ["{", "not json", #"{"jsonrpc":"2.0","id":1,"method":"x""#, ""] {
            let r = rejection(line)
            #expect(r?.id == .null)
            #expect(r?.error.code == -32700)
        }
        // Invalid UTF-8 inside an otherwise valid request.
        var bytes = Array(#"{"jsonrpc":"2.0","id":1,"method":"get","params":{"key":"#.utf8)
        bytes += [0x22, 0xC3, 0x28, 0x22, 0x7D, 0x7D]
        guard case .single(.failure(let r)) = RPCMessage.parse(bytes) else { Issue.record("accepted"); return }
        #expect(r.error.code == -32700)
        #expect(r.id == .null)
    }

    /// One reading of each request: a key twice in one object is -32600 naming it (id null: which
    /// id would be the request's?), wherever it is; a member name with a NUL or a control
    /// character is another name, never the one it starts with. (Before: the last `method` won,
    /// `{"method":"get","method":"metrics"}` ran `metrics`.)
    @Test func duplicateKeysAreInvalidRequestsNamingTheKey() {
        for (line, key) in [(#"{"jsonrpc":"2.0","id":1,"method":"get","method":"metrics"}"#, "method"),
                            (#"{"jsonrpc":"2.0","id":1,"id":2,"method":"status"}"#, "id"),
                            (#"{"jsonrpc":"2.0","id":1,"method":"get","params":{"key":"a","key":"b"}}"#, "key"),
                            (#"[{"jsonrpc":"2.0","id":1,"method":"status","\u006dethod":"refresh"}]"#, "method")] {
            let r = rejection(line)
            #expect(r?.error.code == -32600, "\(line)")
            #expect(r?.error.message.contains("duplicate key \"\(key)\"") == true, "\(r?.error.message ?? "accepted")")
            #expect(r?.id == .null)
        }
        // "method\u0000" is not "method": the request has no method.
        #expect(rejection(#"{"jsonrpc":"2.0","id":1,"method\u0000":"metrics"}"#)?.error.message.contains("'method' must be a string") == true)
        let r = try? single(#"{"jsonrpc":"2.0","id":1,"method":"get","params":{"key":"new_checkout\u0000"}}"#)?.get()
        #expect(r.map { (try? $0.params.string("key")) ?? "" } == "new_checkout\u{0}")
    }

    @Test func invalidRequests() {
        let cases: [(String, RPCID)] = [
            (#"{"id":1,"method":"get"}"#, .number(1)),                          // no jsonrpc
            (#"{"jsonrpc":"1.0","id":1,"method":"get"}"#, .number(1)),          // wrong version
            (#"{"jsonrpc":2.0,"id":1,"method":"get"}"#, .number(1)),            // version not a string
            (#"{"jsonrpc":"2.0","id":"a"}"#, .string("a")),                     // no method
            (#"{"jsonrpc":"2.0","id":1,"method":5}"#, .number(1)),              // method not a string
            (#"{"jsonrpc":"2.0","id":true,"method":"get"}"#, .null),            // id a boolean
            (#"{"jsonrpc":"2.0","id":{},"method":"get"}"#, .null),              // id an object
            (#"{"jsonrpc":"2.0","id":[1],"method":"get"}"#, .null),             // id an array
            (#"{"jsonrpc":"2.0","id":1,"method":"get","params":"x"}"#, .number(1)),
            (#"{"jsonrpc":"2.0","id":1,"method":"get","params":null}"#, .number(1)),
            (#"{"jsonrpc":"2.0","method":"get","params":3}"#, .null),           // notification, still answered
            ("5", .null), (#""x""#, .null), ("null", .null), ("true", .null),
        ]
        for (line, id) in cases {
            let r = rejection(line)
            #expect(r?.error.code == -32600, "\(line)")
            #expect(r?.id == id, "\(line)")
        }
    }

    @Test func positionalParamsAreInvalidParams() {
        let r = rejection(#"{"jsonrpc":"2.0","id":3,"method":"get","params":["new_checkout"]}"#)
        #expect(r?.error.code == -32602)
        #expect(r?.id == .number(3))
    }

    @Test func emptyBatchIsOneInvalidRequest() {
        let r = rejection("[]")
        #expect(r?.error.code == -32600)
        #expect(r?.id == .null)
        #expect(text(r.map { RPCEncoder.line($0.response) })
            == #"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request: empty batch"}}"# + "\n")
    }

    @Test func batchWithInvalidElements() {
        let line = #"[{"jsonrpc":"2.0","id":1,"method":"get","params":{"key":"a"}}, 1, {"jsonrpc":"2.0","method":"refresh"}, {"foo":"bar"}]"#
        guard case .batch(let entries) = RPCMessage.parse(line) else { Issue.record("not a batch"); return }
        #expect(entries.count == 4)
        #expect((try? entries[0].get())?.method == "get")
        if case .failure(let e) = entries[1] { #expect(e.error.code == -32600) } else { Issue.record("1 accepted") }
        #expect((try? entries[2].get())?.isNotification == true)
        if case .failure(let e) = entries[3] { #expect(e.error.code == -32600) } else { Issue.record("3 accepted") }
        // The answer: the get's result and the two rejections, not the notification.
        var responses: [RPCResponse] = []
        for entry in entries {
            switch entry {
            case .success(let request): if let id = request.id { responses.append(RPCResponse(id: id, result: ["flag": nil])) }
            case .failure(let rejection): responses.append(rejection.response)
            }
        }
        let encoded = text(RPCEncoder.batch(responses))
        #expect(encoded?.hasPrefix(#"[{"jsonrpc":"2.0","id":1,"result":{"flag":null}},{"jsonrpc":"2.0","id":null,"error":{"code":-32600"#) == true)
        #expect(encoded?.hasSuffix("]\n") == true)
        #expect(RPCEncoder.batch([]) == nil)
    }

    @Test func unknownMembersAreIgnored() throws {
        let r = try single(#"{"jsonrpc":"2.0","id":1,"method":"status","extra":[1,2]}"#)?.get()
        #expect(r?.method == "status")
    }
}

@Suite struct RPCParamsTests {
    let params = RPCParams(["key": "k", "default": 1, "flag": true, "n": 2.5, "o": ["a": 1], "nul": nil,
                            "empty": "", "state": "active", "neg": -1])

    private func message(_ body: () throws -> Void) -> String? {
        do { try body(); return nil } catch let error as RPCError {
            #expect(error.code == -32602)
            return error.message
        } catch { Issue.record("\(error)"); return nil }
    }

    @Test func preciseMessages() {
        #expect(message { _ = try params.bool("missing") } == "missing required parameter 'missing'")
        #expect(message { _ = try params.bool("default") } == "parameter 'default' must be a boolean")
        #expect(message { _ = try params.string("default") } == "parameter 'default' must be a string")
        #expect(message { _ = try params.double("key") } == "parameter 'key' must be a number")
        #expect(message { _ = try params.object("key") } == "parameter 'key' must be an object")
        #expect(message { _ = try params.string("nul") } == "missing required parameter 'nul'")
        #expect(message { _ = try params.nonEmptyString("empty") } == "parameter 'empty' must be a non-empty string")
        #expect(message { _ = try params.optionalDouble("key") } == "parameter 'key' must be a number")
        #expect(message { _ = try params.optionalNonNegativeDouble("neg") } == "parameter 'neg' must be a number of 0 or more")
        #expect(message { _ = try params.enumeration("key", as: AppState.self) } == "parameter 'key' must be one of: active, background")
        #expect(message { try params.rejectUnknown(["key"]) }?.hasPrefix("unknown parameter '") == true)
    }

    @Test func values() throws {
        #expect(try params.string("key") == "k")
        #expect(try params.bool("flag"))
        #expect(try params.double("n") == 2.5)
        #expect(try params.optionalDouble("absent") == nil)
        #expect(try params.optionalDouble("nul") == nil)
        #expect(try params.optionalBool("flag") == true)
        #expect(try params.optionalString("key") == "k")
        #expect(try params.object("o") == ["a": 1])
        #expect(try params.enumeration("state", as: AppState.self) == .active)
        #expect(try params.optionalEnumeration("absent", as: AppState.self) == nil)
    }

    @Test func errorDataNamesTheParameter() {
        do { _ = try params.bool("default"); Issue.record("accepted") } catch {
            #expect(error.data == ["parameter": "default"])
        }
    }
}

@Suite struct JSONRPCEncodeTests {
    @Test func resultEchoesTheID() {
        #expect(text(RPCEncoder.result(id: .number(1), ["enabled": true]))
            == #"{"jsonrpc":"2.0","id":1,"result":{"enabled":true}}"# + "\n")
        #expect(text(RPCEncoder.result(id: .string("1"), [:])) == #"{"jsonrpc":"2.0","id":"1","result":{}}"# + "\n")
        #expect(text(RPCEncoder.result(id: .number(2.5), nil)) == #"{"jsonrpc":"2.0","id":2.5,"result":null}"# + "\n")
        #expect(text(RPCEncoder.result(id: .number(-3), 1)) == #"{"jsonrpc":"2.0","id":-3,"result":1}"# + "\n")
        #expect(text(RPCEncoder.result(id: .null, true)) == #"{"jsonrpc":"2.0","id":null,"result":true}"# + "\n")
    }

    @Test func idSurvivesARoundTrip() throws {
        for idText in [#""abc""#, #""42""#, "42", "-1", "0.5", "1e3", "12345678901", "null", #""é\n""#] {
            let r = try #require(try single(#"{"jsonrpc":"2.0","id":"# + idText + #","method":"x"}"#)?.get())
            let line = RPCEncoder.result(id: try #require(r.id), [:])
            let answer = try JSONReader.parse(Array(line.dropLast()))
            #expect(answer["id"] == (try JSONReader.parse(idText)))
        }
    }

    @Test func errors() {
        #expect(text(RPCEncoder.error(id: .number(7), .methodNotFound("nope")))
            == #"{"jsonrpc":"2.0","id":7,"error":{"code":-32601,"message":"method not found: 'nope'","data":{"method":"nope"}}}"# + "\n")
        #expect(text(RPCEncoder.error(id: .null, .parseError("x")))
            == #"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error: x"}}"# + "\n")
        #expect(RPCError.invalidRequest("x").code == -32600)
        #expect(RPCError.invalidParams("x").code == -32602)
        #expect(RPCError.internalError("x").code == -32603)
        #expect(RPCError.lineTooLong(maximum: 1 << 20).code == -32600)
        let denied = RPCError.permissionDenied(method: "setUserId")
        #expect(denied.code == -32001)
        #expect(denied.message.contains("'setUserId'"))
    }

    @Test func notification() {
        #expect(text(RPCEncoder.notification(method: "featureFlagsDidUpdate", params: ["reason": "refresh", "changed": ["a"]]))
            == #"{"jsonrpc":"2.0","method":"featureFlagsDidUpdate","params":{"changed":["a"],"reason":"refresh"}}"# + "\n")
    }

    @Test func requestLineParsesBack() throws {
        let line = RPCEncoder.request(id: .number(3), method: "isEnabled", params: ["key": "a", "default": false])
        #expect(text(line) == #"{"jsonrpc":"2.0","id":3,"method":"isEnabled","params":{"default":false,"key":"a"}}"# + "\n")
        let r = try #require(try single(String(decoding: line.dropLast(), as: UTF8.self))?.get())
        #expect(r == RPCRequest(id: .number(3), method: "isEnabled", params: RPCParams(["key": "a", "default": false])))
        let n = RPCEncoder.request(id: nil, method: "refresh")
        #expect(text(n) == #"{"jsonrpc":"2.0","method":"refresh","params":{}}"# + "\n")
    }

    @Test func clientReadsAnswers() throws {
        let ok = try RPCServerMessage.parse(Array(#"{"jsonrpc":"2.0","id":1,"result":{"enabled":true}}"#.utf8))
        #expect(ok == .response(RPCResponse(id: .number(1), result: ["enabled": true])))
        let err = try RPCServerMessage.parse(Array(#"{"jsonrpc":"2.0","id":"x","error":{"code":-32001,"message":"no"}}"#.utf8))
        #expect(err == .response(RPCResponse(id: .string("x"), error: RPCError(code: -32001, message: "no"))))
        let note = try RPCServerMessage.parse(Array(#"{"jsonrpc":"2.0","method":"featureFlagsDidUpdate","params":{"reason":"expired","changed":[]}}"#.utf8))
        #expect(note == .notification(method: "featureFlagsDidUpdate", params: ["reason": "expired", "changed": []]))
        #expect(throws: RPCServerMessage.Malformed.self) { try RPCServerMessage.parse(Array("{}".utf8)) }
        #expect(throws: RPCServerMessage.Malformed.self) { try RPCServerMessage.parse(Array("garbage".utf8)) }
    }
}
