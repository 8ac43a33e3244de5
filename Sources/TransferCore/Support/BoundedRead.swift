import Foundation

/// More of a server's answer than transferd reads from it. Thrown by the sink that
/// holds the answer, so the exchange stops there on either backend (a transport
/// rethrows what its sink threw) instead of reading on without end.
package struct ResponseTooLarge: Error, CustomStringConvertible, Sendable {
    /// What was too long: "the answer", "a line of the event stream".
    package let what: String
    /// Where it came from, redacted.
    package let url: String
    package let limit: Int
    /// What the user should check, as a sentence.
    package let advice: String

    package init(_ what: String = "the answer", url: URL, limit: Int, advice: String) {
        self.what = what
        self.url = Redaction.url(url)
        self.limit = limit
        self.advice = advice
    }

    package var description: String {
        "\(what) from \(url) is longer than \(Self.size(limit)), the most transferd reads of it; \(advice)"
    }

    /// "4 MiB (4194304 bytes)": the limits are whole KiB or MiB, and the bytes are what a test or a log search finds.
    static func size(_ bytes: Int) -> String {
        let unit = bytes >= 1 << 20 && bytes % (1 << 20) == 0 ? "\(bytes >> 20) MiB"
            : bytes >= 1 << 10 && bytes % (1 << 10) == 0 ? "\(bytes >> 10) KiB" : nil
        return unit.map { "\($0) (\(bytes) bytes)" } ?? "\(bytes) bytes"
    }
}

/// Holds an answer read into memory (S3's XML, an upload's answer, a control API
/// answer): every byte up to `limit`, then `ResponseTooLarge`, which stops the
/// exchange. The one place where what transferd reads into memory is capped;
/// file bodies go to `DownloadSink` instead.
// Locked: a transport's threads write, the caller reads once the exchange is answered; the lock
// also keeps a write that comes late (after the answer) from racing the read.
final class CapturingSink: ResponseSink, Sendable {
    let limit: Int
    private let url: URL
    private let advice: String
    private let captured = Locked<(head: ResponseHead?, body: Data)>((nil, Data()))

    init(limit: Int, url: URL, advice: String) {
        self.limit = limit
        self.url = url
        self.advice = advice
    }

    var head: ResponseHead? { captured.withLock { $0.head } }
    var body: Data { captured.withLock { $0.body } }

    func receive(head: ResponseHead) throws { captured.withLock { $0.head = head } }
    func receive(body chunk: UnsafeRawBufferPointer) throws {
        try captured.withLock { captured in
            // Not cut and kept: an XML document cut short reads as another one (a listing without its end).
            guard captured.body.count + chunk.count <= limit else {
                throw ResponseTooLarge(url: captured.head?.url ?? url, limit: limit, advice: advice)
            }
            captured.body.append(contentsOf: chunk)
        }
    }
}

/// A server's answer read into memory by a command that is not async (the
/// control API's answers to `status --watch --remote`), through a transport,
/// never more than `limit` bytes.
package enum BoundedRead {
    /// The most read of one control API answer: a page of 1,000 jobs is well under 1 MiB.
    package static let apiAnswerLimit = 4 << 20

    /// The status and body of `request`'s answer. Blocks the calling thread, which must
    /// not be one of Swift's concurrency pool (a command's main thread is not).
    /// - Throws: `ResponseTooLarge` (with `advice`) past `limit`, or what the transport threw.
    package static func fetch(_ request: TransferRequest, limit: Int, advice: String,
                             transport: Transport) throws -> (status: Int, body: Data) {
        let sink = CapturingSink(limit: limit, url: request.url, advice: advice)
        let result = Locked<Result<Int, Error>?>(nil)
        let done = DispatchSemaphore(value: 0)
        Task.detached {
            do {
                let outcome = try await transport.execute(request, sink: sink)
                result.withLock { $0 = .success(outcome.head.status) }
            } catch {
                result.withLock { $0 = .failure(error) }
            }
            done.signal()
        }
        done.wait()
        let status = try result.current!.get()
        return (status, sink.body)
    }

    /// `fetch` for an async caller: awaits the answer instead of blocking a thread, and gives
    /// its headers too.
    package static func read(_ request: TransferRequest, limit: Int, advice: String,
                            transport: Transport) async throws -> (status: Int, body: Data, headers: HTTPHeaders) {
        let sink = CapturingSink(limit: limit, url: request.url, advice: advice)
        let head = try await transport.execute(request, sink: sink).head
        return (head.status, sink.body, head.headers)
    }
}
