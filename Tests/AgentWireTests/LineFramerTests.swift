import Testing
@testable import AgentWire

@Suite struct LineFramerTests {
    private func lines(_ strings: String...) -> [LineFramer.Event] {
        strings.map { .line(Array($0.utf8)) }
    }

    @Test func bytesFedOneAtATime() {
        var framer = LineFramer()
        let input = Array("{\"a\":1}\n\r\n{\"b\":\"é\"}\r\nrest".utf8)
        var events: [LineFramer.Event] = []
        for byte in input { events += framer.feed([byte]) }
        #expect(events == lines("{\"a\":1}", "", "{\"b\":\"é\"}"))
        #expect(framer.bufferedByteCount == 4)
        #expect(framer.feed(Array("\n".utf8)) == lines("rest"))
        #expect(framer.bufferedByteCount == 0)
    }

    @Test func manyMessagesInOneChunk() {
        var framer = LineFramer()
        let text = (0..<1000).map { "{\"id\":\($0)}\n" }.joined()
        let events = framer.feed(Array(text.utf8))
        #expect(events.count == 1000)
        #expect(events.first == .line(Array("{\"id\":0}".utf8)))
        #expect(events.last == .line(Array("{\"id\":999}".utf8)))
        #expect(framer.bufferedByteCount == 0)
    }

    @Test func splitInTheMiddleOfAUTF8Sequence() {
        var framer = LineFramer()
        let bytes = Array("ключ→🚀\n".utf8)
        // Every split point, including inside the 2-, 3- and 4-byte sequences.
        for cut in 1..<bytes.count {
            var f = framer
            let first = f.feed(bytes[..<cut])
            let second = f.feed(bytes[cut...])
            #expect(first.isEmpty)
            #expect(second == lines("ключ→🚀"))
        }
        #expect(framer.feed(bytes) == lines("ключ→🚀"))
    }

    @Test func emptyLinesAndCRLF() {
        var framer = LineFramer()
        #expect(framer.feed(Array("\n\n\r\na\r\n".utf8)) == lines("", "", "", "a"))
        // Only one trailing \r is stripped; a \r elsewhere stays.
        #expect(framer.feed(Array("a\rb\r\r\n".utf8)) == [.line(Array("a\rb\r".utf8))])
    }

    @Test func lineExactlyAtTheLimitPasses() {
        var framer = LineFramer(maximumLineLength: 8)
        #expect(framer.feed(Array("12345678\n".utf8)) == lines("12345678"))
        #expect(framer.feed(Array("12345678\r\n".utf8)) == lines("12345678"))
        // The same, arriving in pieces (the partial line is buffered).
        #expect(framer.feed(Array("1234".utf8)).isEmpty)
        #expect(framer.feed(Array("5678\r".utf8)).isEmpty)
        #expect(framer.feed(Array("\n".utf8)) == lines("12345678"))
        #expect(!framer.isFailed)
    }

    @Test func lineOverTheLimitFails() {
        var framer = LineFramer(maximumLineLength: 8)
        #expect(framer.feed(Array("ok\n123456789\nnever\n".utf8)) == lines("ok") + [.lineTooLong])
        #expect(framer.isFailed)
        #expect(framer.feed(Array("more\n".utf8)).isEmpty)
    }

    @Test func overLongPartialLineFailsBeforeItsNewline() {
        // A client that never sends \n must not make the agent buffer without bound.
        var framer = LineFramer(maximumLineLength: 8)
        #expect(framer.feed(Array("12345".utf8)).isEmpty)
        #expect(framer.feed(Array("67890".utf8)) == [.lineTooLong])
        #expect(framer.bufferedByteCount == 0)

        var single = LineFramer(maximumLineLength: 8)
        #expect(single.feed(Array("1234567890".utf8)) == [.lineTooLong])

        var pending = LineFramer(maximumLineLength: 8)
        #expect(pending.feed(Array("123456".utf8)).isEmpty)
        #expect(pending.feed(Array("789\n".utf8)) == [.lineTooLong])
    }

    @Test func defaultLimitIsOneMiB() {
        #expect(LineFramer().maximumLineLength == 1_048_576)
        var framer = LineFramer()
        var big = [UInt8](repeating: UInt8(ascii: "x"), count: 1 << 20)
        big.append(0x0A)
        let events = framer.feed(big)
        #expect(events.count == 1)
        if case .line(let l) = events.first { #expect(l.count == 1 << 20) } else { Issue.record("no line") }
        var over = LineFramer()
        #expect(over.feed([UInt8](repeating: 0x20, count: (1 << 20) + 2)) == [.lineTooLong])
    }

    @Test func processHandsOutBorrowedLines() {
        var framer = LineFramer()
        var seen: [String] = []
        let chunk = Array("a\nbc\nd".utf8)
        chunk.withUnsafeBytes { raw in
            framer.process(raw) { frame in
                if case .line(let l) = frame { seen.append(String(decoding: l, as: UTF8.self)) }
            }
        }
        #expect(seen == ["a", "bc"])
        #expect(framer.bufferedByteCount == 1)
    }

    @Test func emptyChunkIsNothing() {
        var framer = LineFramer()
        #expect(framer.feed([]).isEmpty)
    }

    /// A reader that stops between two lines gets the rest, in order and once, by `resume`;
    /// bytes fed meanwhile wait behind them; a partial line stays partial.
    @Test func stoppingAndResuming() {
        var framer = LineFramer()
        var seen: [String] = []
        var budget = 2
        func take(_ frame: LineFramer.Frame) -> Bool {
            if case .line(let l) = frame { seen.append(String(decoding: l, as: UTF8.self)) }
            budget -= 1
            return budget > 0
        }
        Array("p".utf8).withUnsafeBytes { framer.processWhile($0, take) }
        Array("1\n2\n3\n4\n5".utf8).withUnsafeBytes { framer.processWhile($0, take) }
        #expect(seen == ["p1", "2"])
        #expect(framer.hasHeldLines)
        Array("6\n7\n".utf8).withUnsafeBytes { framer.processWhile($0, take) }
        #expect(seen == ["p1", "2"])
        budget = 2
        framer.resume(take)
        #expect(seen == ["p1", "2", "3", "4"])
        budget = 100
        framer.resume(take)
        #expect(seen == ["p1", "2", "3", "4", "56", "7"])
        #expect(!framer.hasHeldLines && framer.bufferedByteCount == 0)
    }
}
