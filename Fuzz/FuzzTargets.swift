// libFuzzer entry points for the agent's parsers (the fault suite, docs/testing.md). Built by Fuzz/run
// with `swiftc -sanitize=fuzzer,address`, one binary per target (-D FUZZ_FRAMER,
// FUZZ_RPC or FUZZ_RESPONSE); not part of Package.swift. Each target checks properties,
// not only the absence of crashes: a violated property traps and libFuzzer saves the input.
import AgentCore
import AgentWire
import Foundation

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzTestOneInput(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let input = UnsafeRawBufferPointer(start: data, count: size)
    #if FUZZ_FRAMER
    fuzzFramer(input)
    #elseif FUZZ_RPC
    fuzzRPC(input)
    #elseif FUZZ_RESPONSE
    fuzzResponse(input)
    #else
    #error("define FUZZ_FRAMER, FUZZ_RPC or FUZZ_RESPONSE")
    #endif
    return 0
}

func require(_ condition: Bool, _ message: @autoclosure () -> String) {
    if !condition { fatalError(message()) }
}

// MARK: - Line framer: any chunking gives the events of a reference splitter

/// The framer's contract (docs/socket-api.md B): lines split at `\n`, one trailing `\r` dropped; a line
/// longer than the maximum, or an unterminated tail longer than maximum + 1, ends everything
/// with one `.lineTooLong`.
func referenceFrames(_ bytes: [UInt8], maximum: Int) -> [LineFramer.Event] {
    var events: [LineFramer.Event] = []
    var start = 0
    while let nl = bytes[start...].firstIndex(of: 0x0A) {
        var line = Array(bytes[start..<nl])
        if line.last == 0x0D { line.removeLast() }
        if line.count > maximum { return events + [.lineTooLong] }
        events.append(.line(line))
        start = nl + 1
    }
    if bytes.count - start > maximum + 1 { events.append(.lineTooLong) }
    return events
}

func fuzzFramer(_ input: UnsafeRawBufferPointer) {
    // Byte 0: the maximum line length (1…64); byte 1: the chunking seed; the rest: the stream.
    guard input.count >= 2 else { return }
    let maximum = Int(input[0] % 64) + 1
    var seed = UInt64(input[1]) &+ 1
    let stream = Array(input[2...])
    let expected = referenceFrames(stream, maximum: maximum)

    // Whole stream at once.
    var whole = LineFramer(maximumLineLength: maximum)
    let wholeEvents = whole.feed(stream)
    require(wholeEvents == expected, "framer (one chunk, max \(maximum)) gave \(wholeEvents), expected \(expected)")

    // Random chunks (including empty ones), through the borrowing API.
    var framer = LineFramer(maximumLineLength: maximum)
    var events: [LineFramer.Event] = []
    var offset = 0
    while offset <= stream.count {
        seed = seed &* 6364136223846793005 &+ 1442695040888963407
        let length = min(Int(seed >> 59), stream.count - offset)  // 0…31
        stream[offset..<(offset + length)].withUnsafeBytes { chunk in
            framer.process(chunk) { frame in
                switch frame {
                case .line(let line): events.append(.line(Array(line)))
                case .lineTooLong: events.append(.lineTooLong)
                }
            }
        }
        require(framer.bufferedByteCount <= maximum + 1, "framer buffers \(framer.bufferedByteCount) bytes, max \(maximum)")
        offset += length
        if length == 0 && offset == stream.count { break }
    }
    require(events == expected, "framer (chunked, max \(maximum)) gave \(events), expected \(expected)")
    if expected.last == .lineTooLong { require(framer.isFailed, "framer not failed after lineTooLong") }
}

// MARK: - JSON-RPC request parser: never crashes; every answer is valid JSON echoing the id

func fuzzRPC(_ input: UnsafeRawBufferPointer) {
    // The reader: a parsed value written back parses to the same value.
    if let value = try? JSONReader.parse(input) {
        let written = JSONWriter.string(value)
        guard let again = try? JSONReader.parse(written) else { fatalError("writer output does not parse: \(written)") }
        require(again == value, "JSON round trip changed the value: \(written)")
    }
    func check(_ outcome: Result<RPCRequest, RPCRejection>) {
        let response: RPCResponse
        switch outcome {
        case .success(let request):
            response = RPCResponse(id: request.id ?? .null, result: .object(["echo": .string(request.method),
                                                                                "params": .object(request.params.values)]))
        case .failure(let rejection):
            require((-32700 ... -32600).contains(rejection.error.code), "rejection code \(rejection.error.code)")
            response = rejection.response
        }
        var line = RPCEncoder.line(response)
        require(line.last == 0x0A && line.dropLast().firstIndex(of: 0x0A) == nil, "an answer must be exactly one line")
        line.removeLast()
        guard let answer = try? JSONReader.parse(line) else {
            fatalError("the answer is not JSON: \(String(decoding: line, as: UTF8.self))")
        }
        require(answer["id"] == response.id.json, "the answer does not echo the id \(response.id)")
        require(answer["jsonrpc"] == .string("2.0"), "jsonrpc missing in the answer")
    }
    switch RPCMessage.parse(input) {
    case .single(let outcome): check(outcome)
    case .batch(let outcomes):
        outcomes.forEach(check)
        if let batch = RPCEncoder.batch(outcomes.map { outcome -> RPCResponse in
            switch outcome {
            case .success(let r): RPCResponse(id: r.id ?? .null, result: .null)
            case .failure(let e): e.response
            }
        }) {
            require((try? JSONReader.parse(Array(batch.dropLast()))) != nil, "a batch answer is not JSON")
        }
    }
}

// MARK: - Server response parser: classify + parseFlags never crash, and keep their promises

func fuzzResponse(_ input: UnsafeRawBufferPointer) {
    let body = Data(input)
    switch PushwooshAPI.classify(.response(status: 200, headers: [:], body: body)) {
    case .failure(let failure):
        require(failure.code == 200 && !failure.retryable, "an HTTP 200 answer gave failure \(failure)")
    case .success(let success):
        if let base = success.baseURL {
            // A.1: an http(s) URL with a host, ending in `/` (the scheme is case-insensitive).
            let scheme = base.prefix { $0 != ":" }.lowercased()
            require(base.hasSuffix("/") && (scheme == "http" || scheme == "https"), "base URL \(base)")
        }
        switch PushwooshAPI.parseFlags(success.response) {
        case .failure(let failure):
            require(failure.code == 200 && !failure.retryable, "parseFlags failure \(failure)")
        case .success(let parsed):
            for (key, flag) in parsed.flags { require(flag.key == key, "flag stored under \(key) has key \(flag.key)") }
        }
    }
}
