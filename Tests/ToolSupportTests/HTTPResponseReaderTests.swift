import AgentCore
import AgentPosix
import Glibc
import Testing
import ToolSupport

/// The one HTTP/1.1 response framing of the project's own clients.
@Suite struct HTTPResponseReaderTests {
    @Test("A head: nil until its blank line; status, lowercased names, trimmed values, its length")
    func headParsing() {
        let text = "HTTP/1.1 404 Not Found\r\nContent-Type:  application/json \r\nContent-Length: 2\r\n\r\n{}"
        #expect(HTTPResponseHead.parse(Array(text.utf8.prefix(30))) == nil)
        let head = HTTPResponseHead.parse(Array(text.utf8))
        #expect(head?.status == 404)
        #expect(head?.headers == [HTTPHeader("content-type", "application/json"), HTTPHeader("content-length", "2")])
        #expect(head?.contentLength == 2)
        #expect(head?.length == text.utf8.count - 2)
        #expect(HTTPResponseHead.parse(Array("SSH-2.0-OpenSSH\r\n\r\n".utf8))?.status == 0)
        #expect(HTTPResponseHead.parse(Array("HTTP/1.1 abc\r\n\r\n".utf8))?.status == 0)
    }

    /// A connected pair: `written` sent on one end (closed after it when `close`), a reader on
    /// the other. The caller closes the reader's end, and the writer's when it stays open.
    func pair(_ written: String, close: Bool) -> (Int32, HTTPResponseReader, writer: Int32) {
        var fds: [Int32] = [0, 0]
        precondition(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds) == 0)
        try? BlockingSocket.sendAll(fds[0], Array(written.utf8))
        if close { Glibc.close(fds[0]) }
        BlockingSocket.setReceiveTimeout(fds[1], 0.2)
        return (fds[1], HTTPResponseReader(fd: fds[1]), close ? -1 : fds[0])
    }

    @Test("Keep-alive: two responses in one read come apart; 304 and HEAD have no body")
    func responsesInARow() {
        let (fd, reader, _) = pair("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabcHTTP/1.1 304 Not Modified\r\nETag: x\r\n\r\n"
                                + "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", close: true)
        defer { close(fd) }
        let first = reader.next()
        #expect(first?.status == 200 && first?.body == Array("abc".utf8) && first?.complete == true)
        let second = reader.next()
        #expect(second?.status == 304 && second?.body == [] && second?.complete == true)
        let head = reader.next(request: "HEAD")
        #expect(head?.status == 200 && head?.body == [] && head?.complete == true)
        #expect(reader.next() == nil)
        #expect(reader.endErrno == 0)
    }

    @Test("A body cut short is incomplete; without Content-Length the body runs to the close; a silent peer times out")
    func endsOfTheConnection() {
        let (cutFD, cut, _) = pair("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", close: true)
        defer { close(cutFD) }
        let short = cut.next()
        #expect(short?.complete == false && short?.body == Array("abc".utf8))
        let (openFD, open, _) = pair("HTTP/1.0 200 OK\r\n\r\nuntil the end", close: true)
        defer { close(openFD) }
        #expect(open.next()?.body == Array("until the end".utf8))
        let (silentFD, silent, writer) = pair("HTTP/1.1 200", close: false)
        defer { close(silentFD); close(writer) }
        #expect(silent.next() == nil)
        #expect(silent.endErrno == EAGAIN)
    }
}
