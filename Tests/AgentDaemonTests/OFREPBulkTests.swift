import AgentCore
import AgentPosix
import AgentTestSupport
import Foundation
import Glibc
import HarnessSupport
import Testing
@testable import AgentDaemon

/// The bulk OFREP answer built a slice at a time (BulkAnswers): the bytes and ETag of the
/// plain build (`OFREP.bulk`), for tricky keys too; and against the real agent, a bulk
/// answer over 100,000 flags does not hold up /healthz.
@Suite(.serialized) struct OFREPBulkTests {
    /// Flags whose `KEY.P` keys collide or sort between flag keys ("a.b" + "c" and "a" +
    /// "b.c"; "k-x" between "k" and "k.p"), over the size built incrementally.
    static func flags(_ count: Int) -> [FeatureFlag] {
        var list: [FeatureFlag] = []
        for i in 0..<count {
            let properties: [String: JSONValue] = ["n": .number(Double(i)), "s": .string("v\(i)")]
            list.append(FeatureFlag(key: "f\(i)", isEnabled: i % 3 == 0, ruleId: i % 5 == 0 ? "" : "r\(i % 7)", properties: properties))
        }
        let deep: JSONValue = ["deep": [1, 2]]
        list.append(FeatureFlag(key: "a", isEnabled: true, ruleId: "r", properties: ["b.c": .number(1), "x": .bool(true)]))
        list.append(FeatureFlag(key: "a.b", isEnabled: false, ruleId: "r", properties: ["c": .number(2)]))
        list.append(FeatureFlag(key: "k", isEnabled: true, ruleId: "default", properties: ["p": deep]))
        list.append(FeatureFlag(key: "k-x", isEnabled: true, ruleId: "default"))
        list.append(FeatureFlag(key: "é.ü", isEnabled: true, ruleId: "r", properties: ["ß": .string("x")]))
        return list
    }

    /// An evaluation request with an empty context, as OpenFeature's providers send it.
    static let body = Array(#"{"context":{}}"#.utf8)

    @Test func theSlicedBuildIsThePlainBuild() throws {
        // Over three runs of the sliced sort's, so that its merge is used.
        let routes = try HTTPRouteTests.Routes(flags: Self.flags(SlicedKeySort.run))
        let agent = routes.host.agent!
        let reference = OFREP.bulk(body: Self.body, agent: agent)
        let referenceBytes = JSONWriter.encode(reference.body)
        let request = HTTPServerRequest(method: "POST", path: HTTPInterface.bulk, headers: [], body: Self.body)
        // Incremental: replied later, from slices run by the loop.
        let box = ReplyBox()
        #expect(routes.interface.respond(request, reply: { box.response = $0; box.signal(); routes.loop.stop() }) == nil)
        let loop = routes.loop
        let stopped = ReplyBox()
        let thread = Thread {
            try? loop.run()
            stopped.signal()
        }
        thread.start()
        #expect(box.wait(seconds: 60))
        #expect(stopped.wait(seconds: 10))
        let sliced = try #require(box.response)
        #expect(sliced.status == 200)
        #expect(sliced.body == referenceBytes)
        #expect(sliced.headers.first { $0.name == "ETag" }?.value == HTTPInterface.etag(referenceBytes))
        // Kept: the next request is answered at once, and 304 for its ETag.
        let again = routes.interface.respond(request, reply: { _ in Issue.record("built again") })
        #expect(again?.body == referenceBytes)
        let etag = sliced.headers.first { $0.name == "ETag" }?.value ?? ""
        var conditional = request
        conditional.headers = [HTTPHeader("if-none-match", etag)]
        #expect(routes.interface.respond(conditional).status == 304)
    }

    /// The sort, stopped after every step (a deadline already past), is the plain sort.
    @Test func theSlicedSortIsTheSort() {
        let flags = Dictionary(uniqueKeysWithValues: Self.flags(SlicedKeySort.run + 77).map { ($0.key, $0) })
        var expected = Set(flags.keys)
        for (key, flag) in flags { for name in flag.properties.keys { expected.insert(key + "." + name) } }
        var sort = SlicedKeySort(flags)
        var steps = 0
        var keys: [String]?
        while keys == nil, steps < 100_000 {
            keys = sort.step(until: 0, clock: { 1 })
            steps += 1
        }
        #expect(keys == expected.sorted())
        #expect(steps > 100)
    }

    /// New flags with the same receipt time (a device clock that stands still) are a new
    /// answer; the same flags again are the kept one.
    @Test func theKeptAnswerFollowsTheFlagsThemselves() throws {
        let loop = try EventLoop()
        let at = Date(timeIntervalSince1970: 1_800_000_000)
        func snapshot(_ enabled: Bool) -> FlagSnapshot {
            FlagSnapshot(flags: ["f": FeatureFlag(key: "f", isEnabled: enabled, ruleId: "r")], receivedAt: at,
                         applicationCode: "A", userId: "u")
        }
        var current = snapshot(true)
        let answers = BulkAnswers(loop: loop) { (current, .network) }
        let request = HTTPServerRequest(method: "POST", path: HTTPInterface.bulk, headers: [], body: Self.body)
        let first = try #require(answers.answer(request, reply: nil))
        current = snapshot(false)
        let second = try #require(answers.answer(request, reply: nil))
        #expect(first.body != second.body)
        #expect(second.headers.first { $0.name == "ETag" }?.value != first.headers.first { $0.name == "ETag" }?.value)
        current = snapshot(false)  // equal flags, another dictionary
        let third = try #require(answers.answer(request, reply: nil))
        #expect(third.body == second.body)
        #expect(third.shared === second.shared, "equal flags were built again")
    }

    @Test func theAtOnceBuildIsThePlainBuild() throws {
        let routes = try HTTPRouteTests.Routes(flags: Self.flags(40))
        let reference = JSONWriter.encode(OFREP.bulk(body: Self.body, agent: routes.host.agent).body)
        #expect(reference.starts(with: Array(("{" + OFREPEvents.bulkEventStreamsMember + #","flags":[{"#).utf8)))
        let r = routes.interface.respond(HTTPServerRequest(method: "POST", path: HTTPInterface.bulk, headers: [], body: Self.body))
        #expect(r.body == reference)
    }

    /// 100,000 flags: while the first bulk answer is built, /healthz keeps answering (before:
    /// the loop was held ~6 s in a debug build); the answer is the whole set.
    @Test func aHugeBulkAnswerDoesNotHoldUpTheLoop() throws {
        let dir = TempDir()
        var app = #"{"code":"ABCDE-12345","featureFlagsInPlan":true,"flags":["#
        app += (0..<100_000).map { #"{"key":"f\#($0)","properties":{"n":{"type":"number","default":\#($0)}},"rules":[{"id":"r","enabled":true}]}"# }
            .joined(separator: ",")
        app += "]}"
        try app.write(toFile: dir.path + "/apps.json", atomically: true, encoding: .utf8)
        let emulator = try EmulatorProcess(apps: dir.path + "/apps.json")
        let port = UInt16(try freePort())
        let config = AgentProcess.config(server: emulator.serverURL, extra: "RequestTimeout=60s", dir: dir.path)
            + "\n[HTTP]\nListen=127.0.0.1:\(port)\n"
        let agent = try AgentProcess(dir: dir, config: config, server: emulator.serverURL)
        @Sendable func call(_ method: String, _ path: String, body: String? = nil) -> HTTPClient.Response? {
            (try? HTTPClient(.tcp(port), timeout: 60))?.request(method, path, body: body)
        }
        #expect(eventually(timeout: 60) { call("GET", "/readyz")?.status == 200 })
        let done = ReplyBox()
        let requestBody = String(decoding: Self.body, as: UTF8.self)
        let bulk = Thread {
            let r = call("POST", HTTPInterface.bulk, body: requestBody)
            done.response = HTTPServerResponse(status: r?.status ?? 0, body: Array((r?.body ?? "").utf8))
            done.signal()
        }
        usleep(100_000)
        bulk.start()
        var slowest = 0.0, probes = 0
        while !done.isSignalled {
            let started = Date()
            #expect(call("GET", "/healthz")?.status == 200)
            slowest = max(slowest, Date().timeIntervalSince(started))
            probes += 1
            usleep(20_000)
        }
        #expect(done.response?.status == 200)
        let items = (try? JSONReader.parse(done.response?.body ?? []))?["flags"]?.arrayValue?.count
        #expect(items == 200_000)
        #expect(probes > 3)
        #expect(slowest < 2, "/healthz took \(slowest) s while the bulk answer was built")
        // Clients that ask for it and never read share one copy of it (before: 32 MB each).
        let pid = agent.process.processIdentifier
        func rssMiB() -> Double { Double(ProcStats.status(pid: pid, field: "VmRSS") ?? 0) / 1024 }
        let before = rssMiB()
        let request = "POST \(HTTPInterface.bulk) HTTP/1.1\r\nHost: x\r\nContent-Length: \(Self.body.count)\r\n\r\n" + String(decoding: Self.body, as: UTF8.self)
        let readers = (0..<10).compactMap { _ in connectTCP(port) }
        for fd in readers { _ = request.withCString { send(fd, $0, strlen($0), Int32(MSG_NOSIGNAL)) } }
        usleep(2_000_000)
        #expect(rssMiB() - before < 40, "10 clients that do not read took RSS from \(before) to \(rssMiB()) MiB")
        for fd in readers { close(fd) }
        #expect(agent.process.isRunning)
    }
}

final class ReplyBox: @unchecked Sendable {
    var response: HTTPServerResponse?
    private let semaphore = DispatchSemaphore(value: 0)
    private(set) var isSignalled = false
    func signal() { isSignalled = true; semaphore.signal() }
    func wait(seconds: Double) -> Bool { semaphore.wait(timeout: .now() + seconds) == .success }
}
