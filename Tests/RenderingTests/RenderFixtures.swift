import Foundation
import TransferCore
import XCTest
@testable import transferd

/// A clock that only moves when the test says so.
final class FixedClock: Sendable {
    private let time = Locked(Date(timeIntervalSince1970: 1_796_000_000))
    var now: Date { time.current }
    func advance(_ seconds: TimeInterval) { time.withLock { $0 = $0.addingTimeInterval(seconds) } }
}

/// Everything a renderer wrote, stdout and stderr apart.
final class CapturedOutput: Sendable {
    private let text = Locked((out: "", err: ""))
    var out: String { text.current.out }
    var err: String { text.current.err }
    func writeOut(_ written: String) { text.withLock { $0.out += written } }
    func writeErr(_ written: String) { text.withLock { $0.err += written } }
}

enum Golden {
    static let folder = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Golden")

    /// Compares `actual` with `Golden/NAME.txt`. With TRANSFERD_UPDATE_GOLDEN=1
    /// the file is rewritten instead (review the diff before committing it).
    static func check(_ actual: String, _ name: String, file: StaticString = #filePath, line: UInt = #line) {
        let url = folder.appendingPathComponent(name + ".txt")
        if ProcessInfo.processInfo.environment["TRANSFERD_UPDATE_GOLDEN"] == "1" {
            try? FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            try? actual.write(to: url, atomically: true, encoding: .utf8)
            return
        }
        guard let expected = try? String(contentsOf: url, encoding: .utf8) else {
            XCTFail("no golden file \(url.path); run with TRANSFERD_UPDATE_GOLDEN=1 to create it", file: file, line: line)
            return
        }
        if actual != expected {
            XCTFail("output differs from \(name).txt:\n--- expected\n\(expected)\n--- actual\n\(actual)", file: file, line: line)
        }
    }

    /// Escape sequences made visible, so a golden file shows what the terminal is sent.
    static func visible(_ text: String) -> String {
        text.replacingOccurrences(of: "\u{1B}", with: "⎋")
    }
}

/// Event sequences shared by the renderer tests.
enum Scenario {
    static func start(_ id: String, _ name: String, total: Int64?, done: Int64 = 0, attempt: Int = 1) -> QueueEvent {
        .started(JobStarted(id: id, kind: "download", name: name, url: "http://127.0.0.1:8080/\(name)",
                            destination: "/data/\(name)", bytesDone: done, bytesTotal: total, attempt: attempt))
    }

    static func progress(_ items: (String, Int64, Int64?)...) -> QueueEvent {
        .progress(items.map { JobProgress(id: $0.0, bytesDone: $0.1, bytesTotal: $0.2) })
    }

    static func done(_ id: String, _ name: String, bytes: Int64, seconds: TimeInterval) -> QueueEvent {
        .finished(JobFinished(id: id, state: .done, name: name, url: "http://127.0.0.1:8080/\(name)",
                              destination: "/data/\(name)", bytes: bytes, elapsed: seconds,
                              sha256: String(repeating: "ab", count: 32)))
    }

    static func failed(_ id: String, _ name: String, error: String) -> QueueEvent {
        .finished(JobFinished(id: id, state: .failed, name: name, url: "http://127.0.0.1:8080/\(name)",
                              destination: "/data/\(name)", error: error))
    }

    static let mib: Int64 = 1 << 20
}
