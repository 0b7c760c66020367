import AgentCore
import AgentPosix
import Foundation
import Glibc
import ToolSupport

/// One cell of the HTTP interface's measurement (docs/http.md F).
struct HTTPRow {
    var kind: String
    var clients: Int
    var result: LoadResult
}

struct MetricsScrape {
    var count: Int
    var medianSeconds: Double
    var p99Seconds: Double
    var cpuSecondsPerScrape: Double
    var bytes: Int
}

/// A blocking HTTP/1.1 keep-alive connection over a Unix socket (answers with Content-Length).
final class HTTPOverUnix {
    let fd: Int32
    private let reader: HTTPResponseReader

    init(_ path: String) throws {
        fd = try Sockets.connectUnix(path)
        BlockingSocket.setReceiveTimeout(fd, 5)
        reader = HTTPResponseReader(fd: fd)
    }

    deinit { close(fd) }

    static func exchange(_ path: String, _ request: [UInt8]) throws -> (status: Int, bytes: Int, text: String) {
        try HTTPOverUnix(path).exchange(request)
    }

    /// Sends `request` (a GET or POST), reads one answer: its status, its whole length in bytes, its body as text.
    func exchange(_ request: [UInt8]) throws -> (status: Int, bytes: Int, text: String) {
        try BlockingSocket.sendAll(fd, request)
        guard let answer = reader.next(), answer.complete else { throw BenchError("HTTP: connection closed or timed out") }
        return (answer.status, answer.head.length + answer.body.count, String(decoding: answer.body, as: UTF8.self))
    }
}

extension Report {
    func httpRow(_ kind: String, clients: Int) -> HTTPRow? {
        http.first { $0.kind == kind && $0.clients == clients }
    }

    var httpMarkdown: String {
        guard !http.isEmpty, let o = options else { return "" }
        var md = "\n## HTTP interface: OFREP single-flag evaluation\n\n"
        md += "The same agent and run: `POST /ofrep/v1/evaluate/flags/new_checkout` (libmicrohttpd on the agent's event loop, "
        md += "Listen= on a Unix socket, keep-alive, 1 request in flight per client) against the socket's `isEnabled` for the same flag "
        md += "and against `GET /healthz`, the smallest answer of the same HTTP server on the same loop. "
        md += String(format: "%.1f s warm-up + %.1f s measured per cell, cells alternating.\n\n", o.warmup, o.duration)
        md += "| clients | request | req/s | p50 / p99 µs | agent CPU | CPU µs per request | OFREP ÷ this (req/s) |\n"
        md += "| ---: | --- | ---: | ---: | ---: | ---: | ---: |\n"
        for clients in o.httpClientCounts {
            guard let ofrep = httpRow("OFREP evaluate", clients: clients) else { continue }
            for kind in ["socket isEnabled", "OFREP evaluate", "HTTP /healthz"] {
                guard let row = httpRow(kind, clients: clients) else { continue }
                let r = row.result
                md += String(format: "| %d | %@ | %.0f | %.0f / %.0f | %.0f %% | %.1f | %.0f %% |\n", clients, kind,
                             r.requestsPerSecond, r.p50, r.p99, r.serverCPU, r.cpuPerRequest,
                             ofrep.result.requestsPerSecond / max(r.requestsPerSecond, 1) * 100)
            }
        }
        if let m = metricsScrape {
            md += String(format: "\nOne `GET /metrics` scrape with %d flags served (%d sequential scrapes on one connection): median %.0f µs, p99 %.0f µs, agent CPU %.0f µs per scrape, %d bytes.\n",
                         o.flagCount, m.count, m.medianSeconds * 1e6, m.p99Seconds * 1e6, m.cpuSecondsPerScrape * 1e6, m.bytes)
        }
        return md
    }

    var httpJSON: JSONValue {
        func number(_ value: Double) -> JSONValue { .number((value * 1000).rounded() / 1000) }
        var o: [String: JSONValue] = [
            "cells": .array(http.map { r in
                ["request": .string(r.kind), "clients": .number(Double(r.clients)), "requestsPerSecond": number(r.result.requestsPerSecond),
                 "p50Microseconds": number(r.result.p50), "p99Microseconds": number(r.result.p99),
                 "serverCPUPercent": number(r.result.serverCPU), "serverCPUMicrosecondsPerRequest": number(r.result.cpuPerRequest)]
            }),
        ]
        if let m = metricsScrape {
            o["metricsScrape"] = ["count": .number(Double(m.count)), "medianMicroseconds": number(m.medianSeconds * 1e6),
                                  "p99Microseconds": number(m.p99Seconds * 1e6), "cpuMicroseconds": number(m.cpuSecondsPerScrape * 1e6),
                                  "bytes": .number(Double(m.bytes))]
        }
        return .object(o)
    }
}
